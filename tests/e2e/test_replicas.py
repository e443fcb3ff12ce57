"""Two daemon replicas on one Redis, one replayed market and one checkpoint store: the replica
that controls a job is killed with SIGKILL while the job moves after a preemption, and the
other one finishes it (exactly one instance per attempt; the final model equals an
uninterrupted run)."""

from __future__ import annotations

import os
import secrets

import pytest
import yaml

from providers.replay import shutdown_cloud
from providers.replay.provider import ReplayProvider
from scheduler.checkpoints.checkpoints import list_checkpoints, restore_latest
from scheduler.checkpoints.urls import open_store
from core.config import examples_dir
from core.models import TAG_ATTEMPT, TAG_JOB
from scheduler.store import keys
from tests.e2e.conftest import E2E_ENV, load_params
from tests.e2e.harness import TERMINAL, DaemonProcess
from tests.fixtures.waiting import wait_until
from tests.fixtures.redis_server import free_port, start_redis

pytestmark = pytest.mark.e2e
MARKET = examples_dir() / "market.yaml"
JOB_SPEC = examples_dir() / "charlm-job.yaml"


@pytest.fixture
def replicas(tmp_path, monkeypatch):
    """Two replicas sharing a private Redis, the replay cloud (``state_dir``), the checkpoint
    store, the secrets, and both API URLs for agents."""
    redis_server = start_redis(tmp_path / "redis")
    cloud_dir = tmp_path / "cloud"
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"providers": [
        {"kind": "replay", "market": str(MARKET), "state_dir": str(cloud_dir)}]}))
    ports = [free_port(), free_port()]
    env = {
        "REDIS_URL": redis_server.url,
        "GA_STORE_URL": (tmp_path / "checkpoints").as_uri(),
        "GA_API_TOKEN": secrets.token_urlsafe(32),
        "GA_AGENT_SECRET": secrets.token_urlsafe(32),
        "GA_ADVERTISE_URL": ",".join(f"http://127.0.0.1:{p}" for p in ports),
    }
    monkeypatch.setenv("GA_API_TOKEN", env["GA_API_TOKEN"])  # for the test's API clients
    daemons = [DaemonProcess(tmp_path / f"home-{n}", MARKET, env=env,
                             args=["--config", str(config), "--port", str(port)])
               for n, port in enumerate(ports)]
    yield daemons, redis_server, cloud_dir, tmp_path / "checkpoints"
    for d in daemons:
        d.stop()
    shutdown_cloud(cloud_dir)
    redis_server.stop()


def _holder_pid(client, job_id: str) -> int | None:
    """Pid of the replica holding the job's control lease (holder ``host:pid:random/fence``)."""
    value = client.get(keys.job_lease(job_id))
    return int(value.split(":")[1]) if value else None


def test_the_other_replica_finishes_a_job_whose_replica_was_killed_mid_migration(
        replicas, reference_model, tmp_path):
    (a, b), redis_server, cloud_dir, checkpoints = replicas
    a.start()
    b.start()
    client = redis_server.client()
    # Both replicas adopted one owner id and know each other.
    assert len(list(client.scan_iter(keys.replica("*")))) == 2
    job_id = a.submit(JOB_SPEC, env=E2E_ENV)["id"]
    wait_until(lambda: b.job(job_id)["state"] == "running", 60, "running",
               detail=lambda: a.log_tail() + b.log_tail())

    # The market reclaims the first spot offer ~25 s after it started: catch the job moving
    # and kill the replica that controls it.
    moving = wait_until(
        lambda: (j := a.job(job_id))["state"] in ("checkpointing", "migrating") and j,
        90, "the migration to start", interval_s=0.05, detail=a.log_tail)
    holder = _holder_pid(client, job_id)
    victim, survivor = (a, b) if holder == a.proc.pid else (b, a)
    assert holder == victim.proc.pid, (holder, a.proc.pid, b.proc.pid)
    fence_before = int(client.get(keys.job_lease(job_id)).rsplit("/", 1)[1])
    victim.kill()

    done = wait_until(lambda: (j := survivor.job(job_id))["state"] in TERMINAL and j, 240,
                      "the job to finish on the surviving replica", detail=survivor.log_tail)
    assert done["state"] == "succeeded", done["events"]
    assert done["derived"]["migrations"] >= 1, moving["state"]
    value = client.get(keys.job_lease(job_id))
    assert value is None or int(value.split(":")[1]) == survivor.proc.pid
    assert int(client.get(keys.lease_fence(keys.job_lease(job_id)))) > fence_before

    # Exactly one instance per attempt (one client token each), none left running.
    cloud = ReplayProvider(MARKET, cloud_dir)
    by_attempt = wait_until(
        lambda: (rows := cloud.describe_raw({TAG_JOB: job_id})) and all(
            r["state"] == "terminated" for r in rows) and rows,
        30, "every instance of the job to be terminated")
    attempts: dict[str, list] = {}
    for row in by_attempt:
        attempts.setdefault(row["tags"][TAG_ATTEMPT], []).append(row)
    assert all(len(rows) == 1 for rows in attempts.values()), attempts
    assert len(attempts) == len(done["placements"])
    assert len({row["client_token"] for row in by_attempt}) == len(by_attempt)

    # Nothing lost: the final model equals an uninterrupted run's.
    store = open_store(checkpoints.as_uri())
    manifest = restore_latest(store, job_id, tmp_path / "restored")
    assert manifest is not None and manifest.final
    assert list_checkpoints(store, job_id)[0].final
    got, want = load_params(tmp_path / "restored" / "final_model.npz"), load_params(reference_model)
    assert set(got) == set(want)
    for key in want:
        assert (got[key] == want[key]).all(), f"{key} differs from the uninterrupted run"
    assert not os.path.exists(victim.home / "checkpoints")  # every replica used the shared store
