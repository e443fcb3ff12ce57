"""Redis restarted under a running job: a daemon on an external redis-server with AOF
persistence (``appendfsync always``: every write is on disk before Redis acknowledges it, so a
SIGKILL loses nothing acknowledged; ``everysec`` could lose the last second). The server is
killed while the training job runs, stays down some seconds and comes back on the same port
from the same AOF. The daemon reconnects, the agent's reports are retried, the job migrates on
the market's preemption and finishes with the exact model of an uninterrupted run."""

from __future__ import annotations

import time

import pytest

from core.config import examples_dir
from providers.replay.provider import ReplayProvider
from scheduler.checkpoints.checkpoints import list_checkpoints
from scheduler.checkpoints.keys import created_ms_of
from scheduler.checkpoints.urls import open_store
from scheduler.cli.client import CliError
from scheduler.store import keys
from tests.e2e.conftest import E2E_ENV
from tests.e2e.harness import TERMINAL, DaemonProcess
from tests.e2e.outcomes import (
    assert_final_model_is_the_reference,
    assert_resumed_from_the_committed_checkpoint,
)
from tests.fixtures.redis_server import start_redis
from tests.fixtures.waiting import wait_until

pytestmark = pytest.mark.e2e
MARKET = examples_dir() / "market.yaml"
JOB_SPEC = examples_dir() / "charlm-job.yaml"
REDIS_DOWN_S = 6.0


@pytest.fixture
def setup(tmp_path):
    servers = [start_redis(tmp_path / "redis", appendonly=True, appendfsync="always")]
    daemon = DaemonProcess(tmp_path / "home", MARKET, env={"REDIS_URL": servers[0].url})
    yield daemon, servers
    daemon.stop()
    ReplayProvider(MARKET, daemon.home / "replay").shutdown_cloud()
    servers[-1].stop()


def test_job_survives_redis_killed_and_restarted_from_its_aof(setup, reference_model, tmp_path):
    daemon, servers = setup
    daemon.start()
    job_id = daemon.submit(JOB_SPEC, env=E2E_ENV)["id"]
    store = open_store((daemon.home / "checkpoints").resolve().as_uri())
    # Running, with a checkpoint committed and recorded by the job.
    before = wait_until(lambda: (j := daemon.job(job_id))["last_checkpoint_id"] and j, 60,
                        "a first checkpoint recorded", detail=daemon.log_tail)
    assert before["state"] == "running"
    recorded = before["last_checkpoint_id"]
    assert recorded in {m.checkpoint_id for m in list_checkpoints(store, job_id)}
    events_before = len(before["events"])
    steps_before = max(_periodic_checkpoint_steps(
        daemon.client().get(f"/v1/jobs/{job_id}/logs")["lines"]) or [0])

    servers[0].kill()  # SIGKILL by pid: nothing flushed beyond the AOF
    time.sleep(REDIS_DOWN_S)
    assert daemon.proc.poll() is None, daemon.log_tail()
    servers.append(start_redis(servers[0].directory, port=servers[0].port, appendonly=True,
                               appendfsync="always"))

    # Nothing acknowledged was lost: the job's record and timeline are all there.
    client = servers[-1].client()
    assert client.exists(keys.job(job_id))
    after = wait_until(lambda: _answer(daemon, job_id), 60, "the daemon to answer again",
                       detail=daemon.log_tail)
    assert after["events"][:events_before] == before["events"]
    assert created_ms_of(after["last_checkpoint_id"]) >= created_ms_of(recorded)

    done = wait_until(lambda: (j := daemon.job(job_id))["state"] in TERMINAL and j, 240,
                      "the job to finish", detail=daemon.log_tail)
    assert done["state"] == "succeeded", done["events"]
    assert done["derived"]["migrations"] >= 1
    assert_resumed_from_the_committed_checkpoint(done)
    assert_final_model_is_the_reference(store, job_id, reference_model, tmp_path / "restored")
    # The agent's reports that failed during the outage were sent again: the first attempt's
    # output has every periodic checkpoint line, none lost in the gap.
    lines = daemon.client().get(f"/v1/jobs/{job_id}/logs")["lines"]
    first = lines[:next(i for i, line in enumerate(lines) if "resumed from step" in line)]
    steps = _periodic_checkpoint_steps(first)
    every = int(E2E_ENV["CHARLM_CHECKPOINT_EVERY"])
    assert steps == list(range(every, steps[-1] + 1, every)), steps
    # It ran on through the outage: at least one more periodic checkpoint after the one seen
    # before the kill, none missing. The market reclaims the instance at a fixed market time,
    # so how many more fit depends on how fast the training runs: 2 to 4 on two shared cores
    # with little else running, only 1 (4000 -> 6000) in a fresh-clone run beside six busy
    # processes, which asking for two made fail.
    assert steps[-1] >= steps_before + every, (steps_before, steps)
    # The daemon did see the outage (and lived through it).
    log = (daemon.home / "daemon-1.log").read_text(errors="replace")
    assert "Connection refused" in log or "Error 111" in log


def _periodic_checkpoint_steps(lines: list[str]) -> list[int]:
    """Steps of the training's "checkpoint saved at step N" lines (not the one after SIGTERM)."""
    return [int(line.rsplit("step ", 1)[1]) for line in lines
            if "checkpoint saved at step" in line and " after " not in line]


def _answer(daemon: DaemonProcess, job_id: str):
    try:
        return daemon.job(job_id)
    except CliError:  # 503 while the daemon reconnects
        return None
