"""Two replicas racing on one job across a failover of its slot's master, on the real
3-master cluster: a write whose WATCHed connection died must not be retried on the promoted
master without its WATCH (it would overwrite the other replica's newer write, or write after
its lease was taken). It is refused as stale, as on one server. The shared cluster is made
whole again."""

from __future__ import annotations

import pytest

from core.models import Job, JobState, utcnow
from scheduler.store import JobStore, StaleJobError, Store, keys
from scheduler.store import jobs as jobs_module
from scheduler.store.connection import connect
from scheduler.store.leases import Leases
from tests.factories.jobs import spec
from tests.fixtures.redis_cluster import wait_replicated

pytestmark = pytest.mark.slow


def _job(job_id: str) -> Job:
    now = utcnow()
    return Job(id=job_id, spec=spec(owner="ana"), created_at=now, updated_at=now)


def _fail_over_during(monkeypatch, cluster, job_id: str, meanwhile) -> None:
    """The next job write through ``jobs_module`` (holding its WATCH) first sees the master
    of ``job_id``'s slot SIGKILLed, its replica promoted and ``meanwhile()`` run."""
    real = jobs_module.outbox.mark_dirty
    done = []

    def mark_dirty(client, entry_id):
        if not done:
            done.append(entry_id)
            for master in cluster.masters():
                wait_replicated(master)
            cluster.kill_master_of(keys.job(job_id))
            cluster.wait_failover(timeout_s=60)
            meanwhile()
        return real(client, entry_id)

    monkeypatch.setattr(jobs_module.outbox, "mark_dirty", mark_dirty)


def test_a_write_whose_watch_died_in_a_failover_does_not_overwrite_a_newer_one(
        redis_cluster, monkeypatch):
    a, b = connect(redis_cluster.url), connect(redis_cluster.url)
    try:
        job = Store.over(a).jobs.create(_job("race-1"))
        theirs = job.model_copy(deep=True)
        theirs.record(JobState.CANCELLED, "cancelled by b")

        def b_writes():
            JobStore(b).save(theirs)

        _fail_over_during(monkeypatch, redis_cluster, job.id, b_writes)
        ours = job.model_copy(deep=True)
        ours.record(JobState.RUNNING, "running by a")
        with pytest.raises(StaleJobError):
            JobStore(a).save(ours)
        stored = JobStore(b).get(job.id)
        assert (stored.version, stored.state) == (2, JobState.CANCELLED)
    finally:
        redis_cluster.restart_killed()
        a.close()
        b.close()


def test_a_fenced_write_whose_lease_was_taken_during_a_failover_is_refused(
        redis_cluster, monkeypatch):
    a, b = connect(redis_cluster.url), connect(redis_cluster.url)
    try:
        job = Store.over(a).jobs.create(_job("race-2"))
        lease_key = keys.job_lease(job.id)
        ours = Leases(a, "replica-a").acquire(lease_key, 60)

        def b_takes_the_lease():
            b.delete(lease_key)  # a's lease expired while it was cut off
            assert Leases(b, "replica-b").acquire(lease_key, 60) is not None

        _fail_over_during(monkeypatch, redis_cluster, job.id, b_takes_the_lease)
        job.record(JobState.RUNNING, "running by a")
        with pytest.raises(StaleJobError):  # a LeaseLostError, or stale: either way refused
            JobStore(a).fenced(ours, 60).save(job)
        stored = JobStore(b).get(job.id)
        assert stored.version == 1
        assert b.get(lease_key).startswith("replica-b/")
    finally:
        redis_cluster.restart_killed()
        a.close()
        b.close()


def test_a_create_whose_watch_died_in_a_failover_is_stored_not_refused(
        redis_cluster, monkeypatch):
    client = connect(redis_cluster.url)
    try:
        _fail_over_during(monkeypatch, redis_cluster, "race-3", lambda: None)
        job = Store.over(client).jobs.create(_job("race-3"))
        assert job.version == 1
        assert JobStore(client).get("race-3").version == 1
        assert Store.over(client).jobs.active_ids() == ["race-3"]
    finally:
        redis_cluster.restart_killed()
        client.close()
