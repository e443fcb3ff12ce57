"""Daemons with their state on a real 3-master Redis Cluster (``REDIS_URL=redis+cluster://...``)
or behind Sentinel: the main job end to end (real daemon, replayed market, real agents running
the real training job to the same final model as an uninterrupted run) while the master of the
job's hash slot is SIGKILLed mid-run and its replica promoted; two replicas splitting the
jobs; a daemon through a Sentinel failover. The session's shared cluster is used (made whole
again afterwards), the Sentinel setup is the module's."""

from __future__ import annotations

import secrets

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
from tests.fixtures.redis_server import free_port
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


def _holder_pid(value: str | None) -> int | None:
    """Pid in a lease holder ``host:pid:random/fence``."""
    return int(value.split(":")[1]) if value else None


def test_two_replicas_on_a_cluster_split_the_jobs(tmp_path, redis_cluster, monkeypatch):
    redis_cluster.flushall()
    market = examples_dir() / "market.yaml"
    ports = [free_port(), free_port()]
    env = {"REDIS_URL": redis_cluster.url, "GA_STORE_URL": (tmp_path / "checkpoints").as_uri(),
           "GA_API_TOKEN": secrets.token_urlsafe(32),
           "GA_AGENT_SECRET": secrets.token_urlsafe(32),
           "GA_ADVERTISE_URL": ",".join(f"http://127.0.0.1:{p}" for p in ports)}
    monkeypatch.setenv("GA_API_TOKEN", env["GA_API_TOKEN"])
    daemons = [DaemonProcess(tmp_path / f"home-{n}", market, env=env,
                             args=["--market", str(market), "--port", str(port)])
               for n, port in enumerate(ports)]
    client = connect(redis_cluster.url)
    try:
        for d in daemons:
            d.start()
        # Jobs no offer fits: they wait, each controlled by one replica.
        ids = [daemons[n % 2].submit(JOB_SPEC, resources={"gpu_count": 64})["id"]
               for n in range(6)]

        def split() -> bool:
            pids = [_holder_pid(client.get(keys.job_lease(i))) for i in ids]
            return None not in pids and len(set(pids)) == 2 and pids

        wait_until(split, 120, "both replicas controlling some of the jobs",
                   detail=lambda: daemons[0].log_tail() + daemons[1].log_tail())
        assert sorted(client.smembers(keys.ACTIVE_JOBS)) == sorted(ids)
        for job_id in ids:
            assert "gpu_count rejects" in daemons[0].job(job_id)["waiting_reason"]
    finally:
        for n, d in enumerate(daemons):
            d.stop()
            ReplayProvider(market, tmp_path / f"home-{n}" / "replay").shutdown_cloud()
        client.close()


def test_a_daemon_behind_sentinel_keeps_its_jobs_through_a_failover(tmp_path, redis_sentinel):
    market = examples_dir() / "market.yaml"
    daemon = DaemonProcess(tmp_path / "home", market, env={"REDIS_URL": redis_sentinel.url})
    try:
        daemon.start()
        first = daemon.submit(JOB_SPEC, resources={"gpu_count": 64})["id"]
        wait_until(lambda: daemon.job(first)["waiting_reason"], 60, "a waiting reason",
                   detail=daemon.log_tail)
        wait_replicated(redis_sentinel.master())
        redis_sentinel.kill_master()
        redis_sentinel.wait_failover(timeout_s=60)
        assert daemon.job(first)["id"] == first
        second = wait_until(lambda: daemon.submit(JOB_SPEC, resources={"gpu_count": 64})["id"],
                            60, "a submit after the failover", ignoring=(Exception,),
                            detail=daemon.log_tail)
        wait_until(lambda: daemon.job(second)["waiting_reason"], 60, "a waiting reason",
                   detail=daemon.log_tail)
        client = redis_sentinel.client()
        assert {first, second} <= client.smembers(keys.ACTIVE_JOBS)
    finally:
        daemon.stop()
        ReplayProvider(market, tmp_path / "home" / "replay").shutdown_cloud()
        redis_sentinel.restart_killed()
