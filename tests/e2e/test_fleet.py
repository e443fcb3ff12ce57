"""The team's own machines first, the spot market when they are full, end to end: real daemon
processes with a ``kind: fleet`` provider over two one-GPU hosts (real OpenSSH servers,
tests/fixtures/sshd.py, each with a stand-in ``nvidia-smi``) and a ``kind: replay`` spot
market, a real Redis, checkpoints in a real S3 server, real agents running the real training
job on the hosts over SSH.

- Three jobs: two run on the fleet, one bursts to spot; one host's sshd and agent are killed
  mid-run and its job resumes on the cloud from its checkpoint with the exact final model;
  when the slots free, the cloud jobs stay where they are, the move not paying for itself.
- A daemon SIGKILLed while it launches on a host, restarted: the job runs once; then the host
  is drained (``schedctl fleet drain``): the job checkpoints and moves to the other host.
- Two replicas race for the last slot: one job gets it, the other waits for it.

Every module test checks, from each host's allocation log, that no GPU ever ran two jobs,
and that no agent is left on a host. The hosts, Redis and S3 are shared by the module's
tests (each test its own Redis database, work roots and checkpoint bucket).
"""

from __future__ import annotations

import secrets
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from core.config import examples_dir
from providers.replay import shutdown_cloud
from scheduler.checkpoints.urls import open_store
from scheduler.store.fleet import FleetLedger
from tests.e2e.conftest import E2E_ENV, SHORT_E2E_ENV
from tests.e2e.harness import TERMINAL, DaemonProcess
from tests.e2e.outcomes import (
    assert_final_model_is_the_reference,
    assert_resumed_from_the_committed_checkpoint,
)
from tests.fixtures.redis_server import RedisServer, free_port, start_redis
from tests.fixtures.sshd import FakeGpu, SshFleet, start_sshd_hosts
from tests.fixtures.waiting import wait_until

pytestmark = pytest.mark.e2e
JOB_SPEC = examples_dir() / "charlm-job.yaml"
FLEET = "fleet"
# Owned GPUs at $0.05/GPU-hour against spot at $0.158/hour: the fleet wins while it has room.
FLEET_USD_PER_GPU_HOUR = 0.05
SPOT_MARKET = {
    "name": "fleet-overflow", "time_scale": 1, "notice_seconds": 10,
    "description": "one always-available spot offer for the fleet's overflow",
    "offers": [{"provider": "aws", "region": "us-east-1", "zone": "us-east-1a",
                "instance_type": "g4dn.xlarge", "gpu_model": "T4", "gpu_count": 1,
                "vram_gib": 16, "vcpus": 4, "memory_gib": 16,
                "on_demand_price_usd_per_hour": 0.526, "spot_price_usd_per_hour": 0.158,
                "interruption_risk": 0.05}]}
SHORT_ENV = {**E2E_ENV, "CHARLM_STEPS": "6000"}


@pytest.fixture(scope="module")
def hosts(tmp_path_factory) -> SshFleet:
    fleet = start_sshd_hosts(tmp_path_factory.mktemp("hosts"),
                             {"box1": [FakeGpu()], "box2": [FakeGpu()]})
    yield fleet
    fleet.stop()


@pytest.fixture(scope="module")
def redis_server_for_fleet(tmp_path_factory) -> RedisServer:
    server = start_redis(tmp_path_factory.mktemp("redis"))
    yield server
    server.stop()


_databases = iter(range(1, 16))


@dataclass
class FleetSetup:
    """One test's daemons over the shared hosts: its own Redis database, work roots (``tag``
    under each host's), checkpoint bucket and homes. ``hosts``: the host names its fleet
    config lists."""

    ssh: SshFleet
    redis: RedisServer
    s3: Any
    tmp: Path
    hosts: tuple[str, ...] = ("box1", "box2")
    replay: bool = True
    db: int = field(default_factory=lambda: next(_databases))
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    daemons: list[DaemonProcess] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.store_url = self.s3.store_url(prefix="fleet")
        self.cloud_dir = self.tmp / "cloud"
        fleet = self.ssh.config(sys.executable, name=FLEET, host_lost_after_s=5,
                                connect_timeout_s=3, terminate_grace_s=5, drain_notice_s=30,
                                launch_grace_s=20, agent_start_timeout_s=45)
        fleet["hosts"] = [dict(h, work_root=str(self.work_root(h["name"])),
                               cost_per_gpu_hour_usd=FLEET_USD_PER_GPU_HOUR)
                          for h in fleet["hosts"] if h["name"] in self.hosts]
        providers = [fleet]
        if self.replay:
            market = self.tmp / "spot-market.yaml"
            market.write_text(yaml.safe_dump(SPOT_MARKET))
            providers.append({"kind": "replay", "market": str(market),
                              "state_dir": str(self.cloud_dir)})
        self.config = self.tmp / "config.yaml"
        self.config.write_text(yaml.safe_dump({"providers": providers}))
        self.env = {"REDIS_URL": f"{self.redis.url.rsplit('/', 1)[0]}/{self.db}",
                    "GA_STORE_URL": self.store_url, **self.s3.credentials_env(),
                    "GA_API_TOKEN": secrets.token_urlsafe(24),
                    "GA_AGENT_SECRET": secrets.token_urlsafe(24)}

    def work_root(self, host: str) -> Path:
        return self.ssh.hosts[host].work_root / self.tag

    def daemon(self, name: str = "home", port: int | None = None,
               advertise: str | None = None) -> DaemonProcess:
        env = dict(self.env, **({"GA_ADVERTISE_URL": advertise} if advertise else {}))
        d = DaemonProcess(self.tmp / name, self.config, env=env,
                          args=["--config", str(self.config), "--port", str(port or free_port())])
        self.daemons.append(d)
        return d

    def ledger(self) -> FleetLedger:
        return FleetLedger(_client(self.redis, self.db), FLEET)

    def allocation_log(self, host: str) -> list[list[str]]:
        path = self.work_root(host) / "allocations.log"
        return [line.split("\t") for line in path.read_text().splitlines()] if path.exists() else []

    def agents_left(self) -> dict[str, list[int]]:
        """Processes still working under this test's work root, per host."""
        left = {}
        for name in self.hosts:
            root = str(self.work_root(name))
            pids = [p.pid for p in self.ssh.hosts[name].processes()
                    if (p.info.get("cwd") or "").startswith(root)]
            if pids:
                left[name] = pids
        return left

    def close(self) -> None:
        for d in self.daemons:
            d.stop()
        if self.replay:
            shutdown_cloud(self.cloud_dir)


def _client(redis: RedisServer, db: int):
    import redis as redis_lib

    return redis_lib.Redis(port=redis.port, db=db, decode_responses=True)


@pytest.fixture
def setup(hosts, redis_server_for_fleet, s3_server, tmp_path, monkeypatch):
    made: list[FleetSetup] = []

    def make(**kw) -> FleetSetup:
        s = FleetSetup(hosts, redis_server_for_fleet, s3_server, tmp_path, **kw)
        made.append(s)
        monkeypatch.setenv("GA_API_TOKEN", s.env["GA_API_TOKEN"])  # the test's API clients
        for name, value in s3_server.credentials_env().items():
            monkeypatch.setenv(name, value)  # to read the checkpoint bucket
        return s

    yield make
    for host in hosts.hosts.values():  # a host a failed test killed serves the next test
        if host.proc is None or host.proc.poll() is not None:
            host.start()
    for s in made:
        s.close()
        for host in s.hosts:  # anything a failed test left running on a host
            for proc in hosts.hosts[host].processes():
                if (proc.info.get("cwd") or "").startswith(str(s.work_root(host))):
                    proc.kill()


# ----- checks every test makes -------------------------------------------------------------
def gpu_holders_overlap(lines: list[list[str]]) -> list[str]:
    """Starts, in an allocation log, of a GPU another instance still held (started, not yet
    ended): each is two jobs on one GPU."""
    holder: dict[str, str] = {}
    clashes = []
    for at, event, instance, gpus, *_ in lines:
        for gpu in gpus.removeprefix("gpus=").split(","):
            if event == "start":
                if gpu in holder and holder[gpu] != instance:
                    clashes.append(f"{at}: {instance} started on GPU {gpu} held by {holder[gpu]}")
                holder[gpu] = instance
            elif event == "end" and holder.get(gpu) == instance:
                del holder[gpu]
    return clashes


def assert_one_job_per_gpu_and_no_agent_left(s: FleetSetup) -> None:
    for host in s.hosts:
        lines = s.allocation_log(host)
        assert not gpu_holders_overlap(lines), (host, lines)
        starts = [line[2] for line in lines if line[1] == "start"]
        assert len(starts) == len(set(starts)), (host, "an instance started twice", lines)
    wait_until(lambda: not s.agents_left(), 30, "no agent or job left on the hosts",
               detail=lambda: str(s.agents_left()))
    wait_until(lambda: not s.ledger().claims(), 30, "every slot claim released",
               detail=lambda: str(s.ledger().claims()))


def _cli(d: DaemonProcess, *args: str) -> str:
    """``schedctl ARGS`` against ``d`` as a user runs it; its output on one line."""
    done = subprocess.run([sys.executable, "-m", "scheduler", *args, "--home", str(d.home)],
                          env={**d.env, "COLUMNS": "200"}, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return " ".join(done.stdout.split())


def _finished(d: DaemonProcess, job_id: str, timeout_s: float = 300) -> dict[str, Any]:
    return wait_until(lambda: (j := d.job(job_id))["state"] in TERMINAL and j, timeout_s,
                      f"job {job_id} to finish", detail=d.log_tail)


def _started(job: dict[str, Any]) -> list[dict[str, Any]]:
    placements = job["placements"] + ([job["placement"]] if job["placement"] else [])
    return [p for p in placements if p.get("started_at")]


def _host_of(placement: dict[str, Any]) -> str | None:
    offer = placement["offer"]
    return offer["instance_type"].split(".")[0] if offer["provider"] == FLEET else None


def _running_on(d: DaemonProcess, job_id: str) -> dict[str, Any]:
    job = d.job(job_id)
    placement = job["placement"]
    return placement if job["state"] == "running" and placement and placement.get(
        "started_at") else None


# ----- the three-job run ---------------------------------------------------------------
def test_fleet_first_spot_for_the_overflow_and_a_dead_host_resumes_on_the_cloud(
        setup, reference_model, tmp_path):
    s = setup()
    d = s.daemon().start()
    wait_until(lambda: {o["instance_type"] for o in d.client().get("/v1/offers")} >= {
        "box1.1xRTX4090", "box2.1xRTX4090", "g4dn.xlarge"}, 60,
        "both hosts' slots and the spot offer listed", detail=d.log_tail)
    offers = _cli(d, "offers")
    assert "fleet/box1" in offers and "box1.1xRTX4090" in offers and "fleet/box2" in offers
    assert "aws/us-east-1a" in offers  # owned slots beside the cloud's offers, one table
    ids = [d.submit(JOB_SPEC, env=E2E_ENV, name=f"fleet-{n}")["id"] for n in range(3)]
    where = wait_until(lambda: (w := {i: p for i in ids if (p := _running_on(d, i))})
                       and len(w) == 3 and w, 120, "all three jobs running", detail=d.log_tail)
    hosts_used = sorted(h for p in where.values() if (h := _host_of(p)))
    assert hosts_used == ["box1", "box2"], where
    [burst] = [i for i, p in where.items() if _host_of(p) is None]
    assert where[burst]["offer"]["provider"] == "aws" and where[burst]["offer"]["market"] == "spot"
    [on_box1] = [i for i, p in where.items() if _host_of(p) == "box1"]
    fleet_rows = {r["host"]: r for r in d.client().get("/v1/fleet")["hosts"]}
    assert [j["job"] for j in fleet_rows["box1"]["jobs"]] == [on_box1]
    assert fleet_rows["box1"]["gpus_used"] == 1 and fleet_rows["box1"]["gpus_free"] == 0
    assert fleet_rows["box1"]["reachable"] and fleet_rows["box1"]["gpus_from"] == "nvidia-smi"
    assert fleet_rows["box1"]["gpus"] == [{"model": "RTX4090", "count": 1, "vram_gib": 24.0}]

    # A committed checkpoint on box1, then a power cut: sshd, agent and job SIGKILLed.
    wait_until(lambda: d.job(on_box1)["last_checkpoint_id"], 120,
               "a checkpoint of the job on box1", detail=d.log_tail)
    s.ssh.hosts["box1"].kill()
    moved = wait_until(lambda: (p := _running_on(d, on_box1)) and _host_of(p) is None and p,
                       120, "the box1 job to resume off the dead host", detail=d.log_tail)
    assert moved["offer"]["provider"] == "aws", moved  # box2 is busy: the cloud took it
    s.ssh.hosts["box1"].start()  # the host answers again: its slot returns

    # The slots free up (box1 back, box2's job done): the cloud jobs are near their end, so
    # the move back would cost more than it saves and they stay.
    fleet_offered = []

    def all_done() -> list[dict[str, Any]] | None:
        offers = d.client().get("/v1/offers", provider=FLEET)
        jobs = [d.job(i) for i in ids]
        if any(j["state"] == "running" and _host_of(j["placement"]) is None for j in jobs):
            fleet_offered.extend(o["instance_type"] for o in offers)
        return jobs if all(j["state"] in TERMINAL for j in jobs) else None

    done = wait_until(all_done, 400, "the three jobs to finish", interval_s=1,
                      detail=d.log_tail)
    assert [j["state"] for j in done] == ["succeeded"] * 3, [j["events"] for j in done]
    assert fleet_offered, "no fleet slot was offered while a cloud job ran"
    for job in done:
        if job["id"] in (burst, on_box1):
            cloud = [p for p in _started(job) if _host_of(p) is None]
            assert cloud and all(p.get("end_reason") != "moved" for p in cloud), job["events"]

    # The killed job resumed on the cloud from a checkpoint committed on box1, exactly.
    killed = next(j for j in done if j["id"] == on_box1)
    resumed = [e for e in killed["events"] if "resumed from checkpoint" in e["message"]]
    assert resumed and resumed[-1]["offer"].startswith("aws/"), killed["events"]
    store = open_store(s.store_url)
    for job_id in ids:
        assert_final_model_is_the_reference(store, job_id, reference_model,
                                            tmp_path / f"restored-{job_id}")
    assert_one_job_per_gpu_and_no_agent_left(s)

    # What a user sees: the fleet's hosts and the bill, owned apart from rented.
    report = d.client().get("/v1/cost-report")
    assert report["owned_providers"] == [FLEET]
    assert report["totals"]["owned_compute_usd"] > 0 and report["totals"]["rented_compute_usd"] > 0
    listed = _cli(d, "fleet", "list")
    assert "fleet/box1" in listed and "fleet/box2" in listed and "ready" in listed
    assert "compute on owned machines (fleet)" in _cli(d, "cost-report")


# ----- a daemon killed mid-launch, then a drain -------------------------------------------
def test_daemon_killed_while_launching_on_a_host_then_the_host_drained(
        setup, reference_models, tmp_path):
    # No market clock here: a job long enough for a checkpoint, a drain and a move will do.
    reference_model = reference_models(SHORT_E2E_ENV)
    s = setup(replay=False)
    d = s.daemon().start()
    ledger = s.ledger()
    job_id = d.submit(JOB_SPEC, env=SHORT_E2E_ENV, providers={"allow": [FLEET]})["id"]
    claim = wait_until(lambda: ledger.claims(), 60, "the launch to claim a slot",
                       interval_s=0.005, detail=d.log_tail)
    d.kill()
    (instance, held), = claim.items()
    started_before = [line for line in s.allocation_log(held.host) if line[1] == "start"]
    d.start()
    first = wait_until(lambda: _running_on(d, job_id), 120, "the job running",
                       detail=d.log_tail)
    host = _host_of(first)
    # One instance for the attempt the kill interrupted: resumed, or released and relaunched.
    assert first["instance_id"] == instance or not started_before, (first, instance)

    # Drain the job's host: the job checkpoints and moves to the other host.
    wait_until(lambda: d.job(job_id)["last_checkpoint_id"], 120, "a checkpoint",
               detail=d.log_tail)
    drained = _cli(d, "fleet", "drain", host)
    assert f"fleet/{host} drained; moving {job_id}" in drained
    other = "box2" if host == "box1" else "box1"
    moved = wait_until(lambda: (p := _running_on(d, job_id)) and _host_of(p) == other and p,
                       120, f"the job to move to {other}", detail=d.log_tail)
    assert not [o for o in d.client().get("/v1/offers", provider=FLEET)
                if o["instance_type"].startswith(f"{host}.")], "a drained host offered a slot"
    done = _finished(d, job_id)
    assert done["state"] == "succeeded", done["events"]
    assert moved["offer"]["instance_type"].startswith(f"{other}.")
    assert_resumed_from_the_committed_checkpoint(done)
    assert_final_model_is_the_reference(open_store(s.store_url), job_id, reference_model,
                                        tmp_path / "restored")
    row = next(r for r in d.client().get("/v1/fleet")["hosts"] if r["host"] == host)
    assert row["drained"] and row["gpus_used"] == 0
    d.client().post(f"/v1/fleet/{host}/undrain")
    wait_until(lambda: [o for o in d.client().get("/v1/offers", provider=FLEET)
                        if o["instance_type"].startswith(f"{host}.")], 60,
               f"{host}'s slot offered again after undrain")
    assert_one_job_per_gpu_and_no_agent_left(s)


# ----- two replicas, one slot -------------------------------------------------------------
def test_two_replicas_racing_for_the_last_slot_run_one_job_on_it_at_a_time(setup):
    s = setup(hosts=("box2",), replay=False)
    ports = [free_port(), free_port()]
    advertise = ",".join(f"http://127.0.0.1:{p}" for p in ports)
    a, b = (s.daemon(f"home-{n}", port, advertise) for n, port in enumerate(ports))
    a.start()
    b.start()
    pinned = {"env": SHORT_ENV, "providers": {"allow": [FLEET]}}
    ids = [a.submit(JOB_SPEC, name="race-a", **pinned)["id"],
           b.submit(JOB_SPEC, name="race-b", **pinned)["id"]]
    done = [_finished(a, i) for i in ids]
    assert [j["state"] for j in done] == ["succeeded", "succeeded"], [j["events"] for j in done]
    assert all(_host_of(p) == "box2" for j in done for p in _started(j))
    starts = [line for line in s.allocation_log("box2") if line[1] == "start"]
    assert len(starts) == 2, starts  # each job ran once, one after the other
    assert_one_job_per_gpu_and_no_agent_left(s)
    # The job that did not get the slot waited for it (its launch refused, or no offer left).
    later = max(done, key=lambda j: _started(j)[0]["started_at"])
    assert any("launch refused (no capacity: box2" in e["message"]
               or "no offer fits" in e["message"] for e in later["events"]), later["events"]
