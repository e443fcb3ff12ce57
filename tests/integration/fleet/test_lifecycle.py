"""Launch, describe and terminate over real SSH with a stand-in agent (conftest.FAKE_AGENT):
process groups, CUDA_VISIBLE_DEVICES, idempotency, races, launches that died."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import threading
from pathlib import Path

import psutil
import pytest

from core.models import InstanceState
from providers.errors import CapacityError
from providers.fleet import remote
from providers.fleet.provider import FleetProvider
from providers.fleet.setup import from_config
from tests.fixtures.sshd import wait_gone
from tests.fixtures.waiting import wait_until
from tests.integration.fleet.conftest import (
    FleetEnv,
    agent_env,
    gpu_timeline_ok,
    request,
    slot,
)


def agent_pid(env: FleetEnv, host: str, token: str) -> int:
    path = env.work_root(host) / token / "agent.pid"
    wait_until(path.exists, 10, f"{path}")
    return int(path.read_text().split()[0])


def test_launch_starts_the_agent_in_its_own_process_group(fleet_env: FleetEnv) -> None:
    adapter = fleet_env.provider()
    inst = adapter.launch(request(slot(adapter, "gpu-a", 2), "job1-1", JOB_KNOB="x"))
    assert (inst.id, inst.state, inst.client_token) == ("gpu-a.job1-1", InstanceState.RUNNING,
                                                        "job1-1")
    assert inst.offer.instance_type == "gpu-a.2xRTX4090" and inst.job_id == "job1-1"
    pid = agent_pid(fleet_env, "gpu-a", "job1-1")
    wait_until(lambda: (fleet_env.work_root("gpu-a") / "job1-1/work/agent-env.txt").exists(),
               10, "the agent's environment")
    assert os.getpgid(pid) == pid and os.getsid(pid) == pid  # its own group and session
    seen = agent_env(fleet_env, "gpu-a", "job1-1")
    assert seen["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert (seen["GA_INSTANCE_ID"], seen["GA_METADATA_FLAVOR"], seen["JOB_KNOB"]) == (
        "gpu-a.job1-1", "none", "x")
    assert seen["GA_WORK_DIR"] == str(fleet_env.work_root("gpu-a") / "job1-1" / "work")
    # The agent's secrets are in a 0600 file of a 0700 folder, never on a command line.
    folder = fleet_env.work_root("gpu-a") / "job1-1"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((folder / "agent.env").stat().st_mode) == 0o600
    for proc in psutil.process_iter(["cmdline"]):
        assert "sekrit-agent-token" not in " ".join(proc.info["cmdline"] or [])
    assert fleet_env.ledger().allocations() == {"gpu-a": {0: inst.id, 1: inst.id}}
    [start] = fleet_env.allocation_log("gpu-a")
    assert start[1:4] == ["start", "gpu-a.job1-1", "gpus=0,1"]

    described = adapter.describe({"gpu-arbiter:job": "job1-1"})
    assert [(i.id, i.state) for i in described] == [(inst.id, InstanceState.RUNNING)]
    assert adapter.describe({"gpu-arbiter:job": "nobody"}) == []
    # The next slot goes to the next free GPUs.
    second = adapter.launch(request(slot(adapter, "gpu-a", 1), "job2-1"))
    assert fleet_env.ledger().allocations()["gpu-a"][2] == second.id


def test_launch_is_idempotent_on_the_client_token(fleet_env: FleetEnv) -> None:
    adapter = fleet_env.provider()
    offer = slot(adapter, "gpu-b", 1)
    first = adapter.launch(request(offer, "job-idem-1"))
    pid = agent_pid(fleet_env, "gpu-b", "job-idem-1")
    again = fleet_env.provider().launch(request(offer, "job-idem-1"))  # another replica too
    assert again.id == first.id and agent_pid(fleet_env, "gpu-b", "job-idem-1") == pid
    assert fleet_env.ledger().allocations() == {"gpu-b": {0: first.id}}
    assert [line[1] for line in fleet_env.allocation_log("gpu-b")] == ["start"]


def test_terminate_stops_exactly_that_process_group(fleet_env: FleetEnv) -> None:
    adapter = fleet_env.provider()
    one = adapter.launch(request(slot(adapter, "gpu-a", 1), "job-t-1"))
    two = adapter.launch(request(slot(adapter, "gpu-a", 1), "job-t-2"))
    pids = {t: agent_pid(fleet_env, "gpu-a", t) for t in ("job-t-1", "job-t-2")}
    work = fleet_env.work_root("gpu-a")
    wait_until(lambda: (work / "job-t-1/work/job.pid").exists(), 10, "the first job's child")
    child = int((work / "job-t-1/work/child.pid").read_text())
    job = int((work / "job-t-1/work/job.pid").read_text())
    wait_until(lambda: os.getpgid(job) == job, 10, "the job in its own process group")
    assert os.getpgid(child) == pids["job-t-1"] and os.getsid(job) == pids["job-t-1"]

    adapter.terminate(one.id)
    wait_gone([pids["job-t-1"], child, job])  # the agent's whole session
    assert psutil.Process(pids["job-t-2"]).is_running()
    assert "TERM" in (work / "job-t-1/work/signals").read_text()
    assert not (work / "job-t-1/agent.env").exists()  # secrets go, the job's files stay
    assert (work / "job-t-1/work/agent-env.txt").exists()
    assert fleet_env.ledger().allocations() == {"gpu-a": {1: two.id}}
    adapter.terminate(one.id)  # again: quiet
    adapter.terminate("gpu-a.never-launched")
    adapter.terminate("no-such-host.x-1")
    states = {i.id: i.state for i in adapter.describe()}
    assert states == {one.id: InstanceState.TERMINATED, two.id: InstanceState.RUNNING}
    assert [line[1:3] for line in fleet_env.allocation_log("gpu-a")] == [
        ["start", one.id], ["start", two.id], ["end", one.id]]
    # Its GPU is offered again.
    assert len([o for o in adapter.list_offers() if o.zone == "gpu-a"]) == 3


def test_an_agent_ignoring_sigterm_is_killed_after_the_grace(fleet_env: FleetEnv) -> None:
    adapter = fleet_env.provider(terminate_grace_s=1)
    inst = adapter.launch(request(slot(adapter, "gpu-b", 1), "job-stubborn-1",
                                  FAKE_IGNORE_TERM="1"))
    pid = agent_pid(fleet_env, "gpu-b", "job-stubborn-1")
    wait_until(lambda: (fleet_env.work_root("gpu-b") / "job-stubborn-1/work/child.pid").exists(),
               10, "the agent's trap set")
    adapter.terminate(inst.id)
    wait_gone([pid], 5)
    assert fleet_env.ledger().allocations() == {}


def test_an_agent_that_exits_is_reported_terminated_and_frees_its_gpus(fleet_env: FleetEnv) -> None:
    adapter = fleet_env.provider()
    inst = adapter.launch(request(slot(adapter, "gpu-b", 2), "job-short-1", FAKE_EXIT_AFTER="3"))
    wait_gone([agent_pid(fleet_env, "gpu-b", "job-short-1")])
    [found] = adapter.describe()
    assert (found.id, found.state, found.terminated_reason) == (
        inst.id, InstanceState.TERMINATED, "agent exited")
    assert fleet_env.ledger().allocations() == {}
    [found] = adapter.describe()  # still listed as ended, for the controller's record
    assert found.state is InstanceState.TERMINATED
    # A launch repeated with the ended token does not revive it.
    again = adapter.launch(request(slot(adapter, "gpu-b", 2), "job-short-1"))
    assert again.state is InstanceState.TERMINATED
    assert [line[1] for line in fleet_env.allocation_log("gpu-b")] == ["start", "end"]


def test_threads_racing_for_the_last_gpu_one_wins(fleet_env: FleetEnv) -> None:
    replicas = [fleet_env.provider() for _ in range(4)]
    offer = slot(replicas[0], "gpu-c", 1)  # gpu-c has one (configured) GPU
    results: dict[str, object] = {}

    def launch(i: int) -> None:
        try:
            results[f"r{i}"] = replicas[i].launch(request(offer, f"race{i}-1"))
        except CapacityError as exc:
            results[f"r{i}"] = exc

    threads = [threading.Thread(target=launch, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    won = [r for r in results.values() if not isinstance(r, Exception)]
    assert len(won) == 1, results
    # A loser says what took the GPU it saw free (or that none was free when it looked).
    assert all(f"GPU 0 by {won[0].id} at " in str(r) or "none free" in str(r)
               for r in results.values() if isinstance(r, Exception)), results
    assert [line[1:3] for line in fleet_env.allocation_log("gpu-c")] == [["start", won[0].id]]
    assert not [o for o in replicas[0].list_offers() if o.zone == "gpu-c"]


_RACER = """
import sys
import time
from providers.errors import CapacityError
from tests.integration.fleet.conftest import request
from providers.fleet.provider import FleetProvider
from providers.fleet.settings import FleetSettings
from scheduler.store.fleet import FleetLedger
import redis
settings = FleetSettings.model_validate_json(sys.argv[1])
adapter = FleetProvider(settings, FleetLedger(redis.Redis(port=int(sys.argv[2]),
                        decode_responses=True), settings.name))
# A listing that times out on busy cores lists the host's slots as none: look again.
deadline = time.monotonic() + 60
while not (offers := [o for o in adapter.list_offers() if o.zone == "gpu-c"]):
    assert time.monotonic() < deadline, "gpu-c never listed"
    time.sleep(0.5)
offer = offers[0]
print("listed", flush=True)
sys.stdin.readline()
try:
    print("won", adapter.launch(request(offer, sys.argv[3])).id)
except CapacityError as exc:
    print("lost", exc)
"""


def test_processes_racing_for_the_last_gpu_one_wins(fleet_env: FleetEnv, redis_server) -> None:
    settings = fleet_env.settings().model_dump_json()
    racers = [subprocess.Popen([sys.executable, "-c", _RACER, settings, str(redis_server.port),
                                f"proc{i}-1"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               text=True, cwd=os.getcwd()) for i in range(3)]
    for racer in racers:  # every racer listed the free slot; now they launch at once
        assert racer.stdout.readline().strip() == "listed"
    for racer in racers:
        racer.stdin.write("go\n")
        racer.stdin.flush()
    outcomes = [racer.communicate(timeout=60)[0].split()[0] for racer in racers]
    assert sorted(outcomes) == ["lost", "lost", "won"], outcomes
    assert len(fleet_env.allocation_log("gpu-c")) == 1


def test_a_launch_killed_after_its_claim_is_released_by_describe(fleet_env: FleetEnv) -> None:
    """A daemon SIGKILLed mid-launch: the claim is made, the folder and meta.json exist, the
    agent never started. Within the launch grace it is not reported (the controller's launch
    with the same token finishes it); after the grace describe marks it ended and frees the
    GPU; no agent runs."""
    adapter = fleet_env.provider(launch_grace_s=60)
    offer = slot(adapter, "gpu-b", 1)
    real_start = remote.start
    remote.start = lambda *a, **k: (_ for _ in ()).throw(SystemExit("killed mid-launch"))
    try:
        with pytest.raises(SystemExit):
            adapter.launch(request(offer, "job-dead-1"))
    finally:
        remote.start = real_start
    iid = "gpu-b.job-dead-1"
    assert fleet_env.ledger().allocations() == {"gpu-b": {0: iid}}
    assert adapter.describe() == []
    assert fleet_env.ledger().allocations() == {"gpu-b": {0: iid}}  # still held for the retry

    fleet_env.clock.advance(61)
    [gone] = adapter.describe()
    assert gone.state is InstanceState.TERMINATED and "never started" in gone.terminated_reason
    assert fleet_env.ledger().allocations() == {}
    assert not (fleet_env.work_root("gpu-b") / "job-dead-1/agent.env").exists()
    # A retry arriving after that cannot start it: the token has ended.
    late = adapter.launch(request(offer, "job-dead-1"))
    assert late.state is InstanceState.TERMINATED and fleet_env.ledger().allocations() == {}
    assert fleet_env.allocation_log("gpu-b") == []  # no agent ever held the GPU


def test_a_launch_resumed_within_the_grace_finishes_the_first_one(fleet_env: FleetEnv) -> None:
    adapter = fleet_env.provider()
    offer = slot(adapter, "gpu-b", 1)
    real_start = remote.start
    remote.start = lambda *a, **k: (_ for _ in ()).throw(SystemExit("killed mid-launch"))
    try:
        with pytest.raises(SystemExit):
            adapter.launch(request(offer, "job-resume-1"))
    finally:
        remote.start = real_start
    inst = fleet_env.provider().launch(request(offer, "job-resume-1"))
    assert inst.state is InstanceState.RUNNING
    assert fleet_env.ledger().allocations() == {"gpu-b": {0: inst.id}}
    agent_pid(fleet_env, "gpu-b", "job-resume-1")


def test_a_claim_with_nothing_on_the_host_is_released_after_the_grace(fleet_env: FleetEnv) -> None:
    """Killed between the claim and the first SSH step: no folder on the host."""
    adapter = fleet_env.provider(launch_grace_s=30)
    fleet_env.ledger().claim("gpu-a", [3], 1, "gpu-a.job-lost-1", at=fleet_env.clock())
    assert adapter.describe() == []  # no offer detail: not an instance to report
    assert "gpu-a.job-lost-1" in fleet_env.ledger().claims()
    fleet_env.clock.advance(31)
    adapter.describe()
    assert fleet_env.ledger().allocations() == {}


def test_never_two_jobs_on_one_gpu_in_the_allocation_log(fleet_env: FleetEnv) -> None:
    adapter = fleet_env.provider()
    ids = []
    for i in range(3):
        ids.append(adapter.launch(request(slot(adapter, "gpu-a", 1), f"churn{i}-1")).id)
    adapter.terminate(ids[0])
    ids.append(adapter.launch(request(slot(adapter, "gpu-a", 2), "churn3-1")).id)
    log = fleet_env.allocation_log("gpu-a")
    assert gpu_timeline_ok(log), log
    assert log[-1][1:4] == ["start", "gpu-a.churn3-1", "gpus=0,3"]


def test_a_work_root_under_home_is_the_ssh_users(fleet_env: FleetEnv) -> None:
    entry = fleet_env.config()
    relative = f".ga-fleet-test-{fleet_env.tag}"
    for host in entry["hosts"]:
        host.pop("work_root")
    entry["work_root"] = f"~/{relative}"
    adapter = FleetProvider(from_config(entry, fleet_env.ssh.folder, fleet_env.ssh.folder).settings,
                            fleet_env.ledger(), fleet_env.clock)
    root = Path.home() / relative
    try:
        inst = adapter.launch(request(slot(adapter, "gpu-b", 1), "job-home-1"))
        seen = root / "job-home-1" / "work" / "agent-env.txt"
        wait_until(seen.exists, 10, "the agent's environment")
        assert seen.read_text().count(f"GA_WORK_DIR={root}/job-home-1/work\n") == 1
        adapter.terminate(inst.id)
        assert (root / "allocations.log").read_text().count("\tend\t") == 1
    finally:
        adapter.close()
        shutil.rmtree(root, ignore_errors=True)
