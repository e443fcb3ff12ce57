"""The main job end to end with its state on a real 3-master Redis Cluster
(``REDIS_URL=redis+cluster://...``): real daemon, replayed market, real agents running the
real training job to the same final model as an uninterrupted run, while the master of the
job's hash slot is SIGKILLed mid-run and its replica promoted. Uses the session's shared
cluster (made whole again afterwards)."""

from __future__ import annotations

import numpy as np
import pytest

from core.config import examples_dir
from providers.replay.provider import ReplayProvider
from scheduler.checkpoints.checkpoints import restore_latest
from scheduler.checkpoints.urls import open_store
from scheduler.store import keys
from scheduler.store.connection import connect
from scheduler.store.events import EventStream
from tests.e2e.conftest import E2E_ENV, load_params
from tests.e2e.harness import TERMINAL, DaemonProcess
from tests.fixtures.redis_cluster import wait_replicated
from tests.fixtures.waiting import wait_until

pytestmark = pytest.mark.e2e
JOB_SPEC = examples_dir() / "charlm-job.yaml"


def test_main_job_on_a_cluster_survives_a_failover_of_its_slot(
        tmp_path, redis_cluster, reference_model):
    redis_cluster.flushall()
    market = examples_dir() / "market.yaml"
    daemon = DaemonProcess(tmp_path / "home", market, env={"REDIS_URL": redis_cluster.url})
    client = connect(redis_cluster.url)
    try:
        daemon.start()
        job_id = daemon.submit(JOB_SPEC, env=E2E_ENV)["id"]
        wait_until(lambda: daemon.job(job_id)["state"] == "running", 120, "running",
                   detail=daemon.log_tail)
        assert not (tmp_path / "home" / "redis").exists()
        for master in redis_cluster.masters():
            wait_replicated(master)
        redis_cluster.kill_master_of(keys.job(job_id))
        redis_cluster.wait_failover(timeout_s=60)
        done = wait_until(lambda: (j := daemon.job(job_id))["state"] in TERMINAL and j, 300,
                          "the job to finish", detail=daemon.log_tail)
        assert done["state"] == "succeeded", done["events"]
        store = open_store((daemon.home / "checkpoints").resolve().as_uri())
        manifest = restore_latest(store, job_id, tmp_path / "restored")
        assert manifest is not None and manifest.final
        got, want = load_params(tmp_path / "restored" / "final_model.npz"), \
            load_params(reference_model)
        assert set(got) == set(want)
        assert all(np.array_equal(got[k], want[k]) for k in want)
        # Every timeline event reached the one global stream exactly once.
        streamed = EventStream(client).read(after="0", limit=10_000, job_id=job_id).events
        assert [e["message"] for e in streamed] == [e["message"] for e in done["events"]]
        assert client.smembers(keys.ACTIVE_JOBS) == set()
    finally:
        daemon.stop()
        ReplayProvider(market, tmp_path / "home" / "replay").shutdown_cloud()
        redis_cluster.restart_killed()
        client.close()
