"""Two replicas racing on one job across a Sentinel failover (``redis+sentinel://``, the
master SIGKILLed while one replica holds its WATCH, the other writing on the promoted
master): the cut-off write is refused as stale, never applied over the newer one; a create
cut off the same way is stored once."""

from __future__ import annotations

import pytest

from core.models import Job, JobState, utcnow
from scheduler.store import JobStore, StaleJobError, Store
from scheduler.store import jobs as jobs_module
from scheduler.store.connection import connect
from tests.factories.jobs import spec
from tests.fixtures.redis_cluster import wait_replicated


def _job(job_id: str) -> Job:
    now = utcnow()
    return Job(id=job_id, spec=spec(owner="ana"), created_at=now, updated_at=now)


def _fail_over_during(monkeypatch, sentinel, meanwhile) -> None:
    real = jobs_module.outbox.mark_dirty
    done = []

    def mark_dirty(client, entry_id):
        if not done:
            done.append(entry_id)
            wait_replicated(sentinel.master())
            sentinel.kill_master()
            sentinel.wait_failover(timeout_s=60)
            meanwhile()
        return real(client, entry_id)

    monkeypatch.setattr(jobs_module.outbox, "mark_dirty", mark_dirty)


def test_a_write_cut_off_by_a_sentinel_failover_does_not_overwrite_a_newer_one(
        redis_sentinel, monkeypatch):
    redis_sentinel.flushall()
    a, b = connect(redis_sentinel.url), connect(redis_sentinel.url)
    try:
        job = Store.over(a).jobs.create(_job("srace-1"))
        theirs = job.model_copy(deep=True)
        theirs.record(JobState.CANCELLED, "cancelled by b")
        _fail_over_during(monkeypatch, redis_sentinel, lambda: JobStore(b).save(theirs))
        job.record(JobState.RUNNING, "running by a")
        with pytest.raises(StaleJobError):
            JobStore(a).save(job)
        stored = JobStore(b).get(job.id)
        assert (stored.version, stored.state) == (2, JobState.CANCELLED)
    finally:
        redis_sentinel.restart_killed()
        a.close()
        b.close()


def test_a_create_cut_off_by_a_sentinel_failover_is_stored_once(redis_sentinel,
                                                                  monkeypatch):
    redis_sentinel.flushall()
    client = connect(redis_sentinel.url)
    try:
        _fail_over_during(monkeypatch, redis_sentinel, lambda: None)
        assert Store.over(client).jobs.create(_job("srace-2")).version == 1
        assert Store.over(client).jobs.active_ids() == ["srace-2"]
    finally:
        redis_sentinel.restart_killed()
        client.close()
