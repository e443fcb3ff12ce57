"""Gangs end to end: real daemons on replayed spot markets, a real Redis, checkpoints in a real
S3 server, real agents on every node running the real 2-node data-parallel job
(examples/ddp-job.yaml: torch.distributed, gloo, one process per node).

- Preempted on one node mid-run (examples/markets/gang-preempt.yaml: the cheaper zone's
  instance count drops from 2 to 1 at ~50 s): every node stops at the same step, rank 0's
  checkpoint is committed, the whole gang moves to the other zone, resumes on both nodes from
  that checkpoint and ends with the model of an uninterrupted 2-node run.
- One node of a gang never boots (examples/markets/gang-boot-failure.yaml: the cheaper
  zone's first launch never boots): every node of that attempt is terminated once the agent
  start timeout passed, the gang is placed again and succeeds, and the replayed cloud has no
  instance left running.

The Redis server and the reference run are shared by the module; each test has its own daemon
(so its own market clock), Redis database and checkpoint prefix.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from core.config import examples_dir
from core.models import TAG_ATTEMPT, TAG_JOB
from providers.replay.market import load_market
from providers.replay.provider import ReplayProvider
from scheduler.checkpoints.checkpoints import list_checkpoints, restore_latest
from scheduler.checkpoints.urls import open_store
from tests.e2e.harness import TERMINAL, DaemonProcess
from tests.e2e.outcomes import assert_resumed_from_the_committed_checkpoint
from tests.fixtures.redis_server import RedisServer, start_redis
from tests.fixtures.waiting import wait_until
from tests.integration.test_ddp_example import assert_same_model, run_uninterrupted

pytestmark = pytest.mark.e2e
JOB_SPEC = examples_dir() / "ddp-job.yaml"
PREEMPT_MARKET = examples_dir() / "markets" / "gang-preempt.yaml"
BOOT_MARKET = examples_dir() / "markets" / "gang-boot-failure.yaml"
# ~0.03 s a step: 2,500 steps are over a minute of training, so the reclaim at ~50 s of market
# clock lands mid-run however long the gang took to start (10-40 s seen).
PREEMPT_ENV = {"DDP_SEED": "3", "DDP_STEPS": "2500", "DDP_CHECKPOINT_EVERY": "250",
               "DDP_STEP_SLEEP_S": "0.02"}
BOOT_ENV = {"DDP_SEED": "4", "DDP_STEPS": "300", "DDP_CHECKPOINT_EVERY": "100"}
# The reconcile pass that sees the timeout, and the terminate calls, after the timeout.
TERMINATE_SLACK_S = 20


@pytest.fixture(scope="module")
def redis_for_gangs(tmp_path_factory) -> Iterator[RedisServer]:
    server = start_redis(tmp_path_factory.mktemp("redis"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """The final model of an uninterrupted 2-node run of the preempted job (two processes of
    the script on 127.0.0.1, no scheduler), without the step sleep, which changes no result."""
    env = {k: v for k, v in PREEMPT_ENV.items() if k != "DDP_STEP_SLEEP_S"}
    return run_uninterrupted(tmp_path_factory.mktemp("gang-reference"), env)


_databases = iter(range(1, 16))


class GangRun:
    """One test's daemon on ``market``: its own Redis database and checkpoint prefix."""

    def __init__(self, market: Path, redis: RedisServer, s3, tmp: Path):
        self.market = market
        self.store_url = s3.store_url(prefix=f"gang-{market.stem}")
        self.daemon = DaemonProcess(tmp / "home", market, env={
            "REDIS_URL": f"{redis.url.rsplit('/', 1)[0]}/{next(_databases)}",
            "GA_STORE_URL": self.store_url, **s3.credentials_env(),
            "GA_API_TOKEN": secrets.token_urlsafe(24)})

    def cloud(self) -> ReplayProvider:
        return ReplayProvider(self.market, self.daemon.home / "replay")

    def finish(self, job_id: str, timeout_s: float) -> dict[str, Any]:
        return wait_until(lambda: (j := self.daemon.job(job_id))["state"] in TERMINAL and j,
                          timeout_s, "the gang job to finish", interval_s=1,
                          detail=self.daemon.log_tail)

    def instances_by_attempt(self, job_id: str) -> dict[int, list[dict[str, Any]]]:
        """The replayed cloud's instances of the job, by attempt, each sorted by rank."""
        by_attempt: dict[int, list[dict[str, Any]]] = {}
        for row in self.cloud().describe_raw({TAG_JOB: job_id}):
            by_attempt.setdefault(int(row["tags"][TAG_ATTEMPT]), []).append(row)
        return {a: sorted(rows, key=lambda r: int(r["tags"].get("gpu-arbiter:rank", 0)))
                for a, rows in sorted(by_attempt.items())}

    def all_terminated(self, job_id: str) -> dict[int, list[dict[str, Any]]]:
        """Waits until no instance of the job is left running at the cloud; returns them."""
        return wait_until(
            lambda: (b := self.instances_by_attempt(job_id)) and all(
                r["state"] == "terminated" and not r["pid_alive"]
                for rows in b.values() for r in rows) and b,
            30, "every instance of the job to be terminated at the replayed cloud",
            detail=self.daemon.log_tail)

    def close(self) -> None:
        self.daemon.stop()
        self.cloud().shutdown_cloud()


@pytest.fixture
def gang_run(redis_for_gangs, s3_server, tmp_path, monkeypatch):
    made: list[GangRun] = []

    def make(market: Path) -> GangRun:
        run = GangRun(market, redis_for_gangs, s3_server, tmp_path)
        monkeypatch.setenv("GA_API_TOKEN", run.daemon.env["GA_API_TOKEN"])  # the API client
        for name, value in s3_server.credentials_env().items():
            monkeypatch.setenv(name, value)  # to read the checkpoint bucket
        made.append(run)
        return run

    yield make
    for run in made:
        run.close()


def _placements(job: dict[str, Any]) -> list[dict[str, Any]]:
    """Every placement of the job once, by attempt."""
    by_attempt = {p["attempt"]: p for p in [*job["placements"], job.get("placement")] if p}
    return [by_attempt[a] for a in sorted(by_attempt)]


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _job_lines(daemon: DaemonProcess, job_id: str) -> list[str]:
    lines: list[str] = []
    while page := daemon.client().get(f"/v1/jobs/{job_id}/logs", start=len(lines))["lines"]:
        lines.extend(page)
    return lines


def test_a_gang_preempted_on_one_node_moves_whole_and_ends_with_the_uninterrupted_model(
        reference, gang_run, tmp_path):
    run = gang_run(PREEMPT_MARKET)
    run.daemon.start()
    job_id = run.daemon.submit(JOB_SPEC, env=PREEMPT_ENV)["id"]
    done = run.finish(job_id, 420)
    assert done["state"] == "succeeded", done["events"]

    # The gang ran in the cheaper zone, was preempted there, and finished in the other one,
    # every attempt on two nodes of one offer.
    placements = _placements(done)
    zones = [p["offer"]["zone"] for p in placements]
    assert zones[0] == "us-east-1a" and zones[-1] == "us-east-1b", zones
    assert placements[0]["end_reason"] == "preempted", placements[0]
    assert placements[-1]["end_reason"] == "succeeded", placements[-1]
    for p in placements:
        if p["end_reason"] != "launch-failed":
            assert [n["rank"] for n in p["nodes"]] == [0, 1], p
            assert all(n["instance_id"] for n in p["nodes"]), p

    # At the cloud: the market warned one node of the first attempt (the newest: the count
    # fell from 2 to 1), the scheduler then terminated both (within the notice, before the
    # reclaim); none of the job's instances is left running.
    by_attempt = run.all_terminated(job_id)
    assert all(len(rows) == 2 for rows in by_attempt.values()), by_attempt
    first = by_attempt[placements[0]["attempt"]]
    warned = [r for r in first if r.get("notice")]
    newest = max(first, key=lambda r: (_at(r["launched_at"]), r["id"]))
    assert [r["id"] for r in warned] == [newest["id"]], first

    # Every rank stopped after the same step, and both nodes of the next attempt resumed
    # from the checkpoint rank 0 committed then.
    assert_resumed_from_the_committed_checkpoint(done)
    lines = _job_lines(run.daemon, job_id)
    stops = sorted({int(line.split("stopped at step ")[1].split()[0])
                    for line in lines if "stopped at step " in line})
    assert len(stops) == 1 and 0 < stops[0] < int(PREEMPT_ENV["DDP_STEPS"]), stops
    resumed = [line for line in lines if f"resumed from step {stops[0]} " in line]
    assert len(resumed) == 2, [line for line in lines if "resumed from" in line]

    store = open_store(run.store_url)
    manifest = restore_latest(store, job_id, tmp_path / "restored")
    assert manifest is not None and manifest.final
    assert list_checkpoints(store, job_id)[0].final
    assert_same_model(tmp_path / "restored" / "final_model.pt", reference)


def test_a_gang_whose_node_never_boots_is_terminated_whole_and_placed_again(gang_run):
    run = gang_run(BOOT_MARKET)
    timeout_s = load_market(BOOT_MARKET).agent_start_timeout_s
    run.daemon.start()
    job_id = run.daemon.submit(JOB_SPEC, env=BOOT_ENV)["id"]
    done = run.finish(job_id, 300)
    assert done["state"] == "succeeded", done["events"]

    placements = _placements(done)
    assert len(placements) >= 2, placements
    failed = placements[0]
    assert failed["offer"]["zone"] == "us-east-1a", failed
    assert failed["end_reason"] == "launch-failed", failed
    assert any("gang incomplete" in e["message"] for e in done["events"]), done["events"]
    assert placements[-1]["end_reason"] == "succeeded", placements[-1]

    by_attempt = run.all_terminated(job_id)
    nodes = by_attempt[failed["attempt"]]
    assert len(nodes) == 2, nodes
    assert [bool(r["boot_failed"]) for r in nodes].count(True) == 1, nodes
    # Both nodes of the incomplete gang, the one that booted too, went within the timeout.
    for row in nodes:
        alive_s = (_at(row["terminated_at"]) - _at(row["launched_at"])).total_seconds()
        assert alive_s <= timeout_s + TERMINATE_SLACK_S, (alive_s, row)
    assert all(len(rows) == 2 for rows in by_attempt.values()), by_attempt
