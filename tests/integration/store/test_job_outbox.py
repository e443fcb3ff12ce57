"""A job write's side writes (indexes, event stream, /metrics figures, owner spend) go through
the job's outbox (scheduler/store/outbox.py): applied once after the commit, or, when the
writer died between its EXEC and applying them, by the job's next write or by repair(), still
exactly once, and an older write applied late never undoes a newer one. Real redis-server and
the real 3-master cluster (``redis_client`` runs each test on both); the crash is simulated by
skipping the apply step."""

from __future__ import annotations

import pytest

from core.models import Job, JobState, utcnow
from scheduler.store import JobStore, LeaseLostError, Store, keys, outbox
from scheduler.store import jobs as jobs_module
from scheduler.store.events import EventStream
from scheduler.store.leases import Leases
from tests.factories.jobs import spec


def _job(job_id: str = "train-1") -> Job:
    now = utcnow()
    return Job(id=job_id, spec=spec(owner="alice"), created_at=now, updated_at=now)


@pytest.fixture
def crashing(monkeypatch):
    """While on, job writes commit but their writer "dies" before applying the outbox."""
    skipped: list[tuple[str, list[str]]] = []
    real = outbox.apply

    class Switch:
        on = False

        @staticmethod
        def apply(client, job_id, entries):
            if Switch.on:
                skipped.append((job_id, list(entries)))
                return 0
            return real(client, job_id, entries)

        @staticmethod
        def save(store, job):
            """``store.jobs.save(job)`` by a writer that dies right after its commit."""
            Switch.on = True
            try:
                return store.jobs.save(job)
            finally:
                Switch.on = False

    Switch.skipped = skipped
    monkeypatch.setattr(jobs_module.outbox, "apply", Switch.apply)
    return Switch


def _events(client, job_id: str) -> list[str]:
    return [e["message"] for e in EventStream(client).read(after="0", limit=1000,
                                                           job_id=job_id).events]


def test_a_write_applies_its_side_writes_and_leaves_nothing_queued(redis_client):
    store = Store.over(redis_client)
    job = _job()
    job.record(JobState.PENDING, "queued")
    job = store.jobs.create(job)
    assert store.jobs.active_ids() == [job.id]
    assert [j.id for j in store.jobs.list()] == [job.id]
    assert _events(redis_client, job.id) == ["queued"]
    assert redis_client.hexists(keys.JOB_SUMMARIES, job.id)
    assert outbox.pending(redis_client, job.id) == []
    assert redis_client.zcard(keys.JOBS_DIRTY) == 0


def test_a_crash_after_the_commit_is_repaired_exactly_once(redis_client, crashing):
    store = Store.over(redis_client)
    job = store.jobs.create(_job())
    job.record(JobState.SUCCEEDED, "done")
    job = crashing.save(store, job)
    # Committed (the document is new) but nothing applied yet.
    assert store.jobs.get(job.id).state is JobState.SUCCEEDED
    assert _events(redis_client, job.id) == []
    assert store.jobs.active_ids() == [job.id]
    assert len(outbox.pending(redis_client, job.id)) == 1
    assert outbox.repair(redis_client, grace_ms=10**9) == 0  # too young: its writer's
    assert outbox.repair(redis_client, grace_ms=0) > 0
    assert _events(redis_client, job.id) == ["done"]
    assert store.jobs.active_ids() == []
    assert redis_client.hget(keys.METRIC_FINISHED_STATES, "succeeded") == "1"
    assert outbox.pending(redis_client, job.id) == []
    assert redis_client.zcard(keys.JOBS_DIRTY) == 0
    # The dead writer's entries applied again (a second repairer, a late retry): no change.
    (job_id, entries), = crashing.skipped
    outbox.apply(redis_client, job_id, entries)  # same-version state ops rewrite the same
    assert outbox.repair(redis_client, grace_ms=0) == 0
    assert store.jobs.active_ids() == []
    assert _events(redis_client, job.id) == ["done"]
    assert redis_client.hget(keys.METRIC_FINISHED_STATES, "succeeded") == "1"


def test_the_next_write_applies_what_a_dead_writer_left(redis_client, crashing):
    store = Store.over(redis_client)
    job = store.jobs.create(_job())
    job.record(JobState.PROVISIONING, "placing")
    job = crashing.save(store, job)
    job.record(JobState.FAILED, "gave up")
    job = store.jobs.save(job)
    assert _events(redis_client, job.id) == ["placing", "gave up"]
    assert store.jobs.active_ids() == []
    assert outbox.pending(redis_client, job.id) == []
    assert redis_client.zcard(keys.JOBS_DIRTY) == 0


def test_an_older_write_applied_late_never_undoes_a_newer_one(redis_client, crashing):
    store = Store.over(redis_client)
    job = store.jobs.create(_job())
    job.record(JobState.RUNNING, "running")
    job = crashing.save(store, job)  # v2, active: its entries are held by a "slow" applier
    (job_id, slow), = crashing.skipped
    job.record(JobState.CANCELLED, "cancelled")
    store.jobs.save(job)  # v3, terminal: applies v2's entries and its own
    assert outbox.apply(redis_client, job_id, slow) == 0  # the slow applier, at last
    assert store.jobs.active_ids() == []
    assert not redis_client.hexists(keys.JOB_SUMMARIES, job.id)
    assert redis_client.hexists(keys.JOBS_FINISHED, job.id)
    assert _events(redis_client, job.id) == ["running", "cancelled"]


def test_a_write_that_never_committed_leaves_a_dirty_id_repair_drops(redis_client):
    store = Store.over(redis_client)
    job = store.jobs.create(_job())
    stale = job.model_copy(update={"version": 0})
    with pytest.raises(jobs_module.StaleJobError):
        store.jobs.save(stale)
    outbox.mark_dirty(redis_client, f"{job.id}:7")  # a writer that died before its EXEC
    assert outbox.repair(redis_client, grace_ms=0) == 0
    assert redis_client.zcard(keys.JOBS_DIRTY) == 0
    assert store.jobs.get(job.id).version == 1


def test_a_fenced_write_with_a_lost_lease_queues_nothing(redis_client):
    store = Store.over(redis_client)
    job = store.jobs.create(_job())
    ours = Leases(redis_client, "a").acquire(keys.job_lease(job.id), 30)
    redis_client.delete(keys.job_lease(job.id))
    Leases(redis_client, "b").acquire(keys.job_lease(job.id), 30)
    job.record(JobState.RUNNING, "running")
    with pytest.raises(LeaseLostError):
        JobStore(redis_client).fenced(ours, 30).save(job)
    assert outbox.pending(redis_client, job.id) == []
    assert _events(redis_client, job.id) == []
    assert store.jobs.get(job.id).version == 1


def test_writes_apply_after_the_script_cache_is_lost(redis_client):
    store = Store.over(redis_client)
    job = store.jobs.create(_job())
    nodes = redis_client.get_primaries() if hasattr(redis_client, "get_primaries") else None
    if nodes:
        for node in nodes:
            node.redis_connection.script_flush()
    else:
        redis_client.script_flush()
    job.record(JobState.SUCCEEDED, "done")
    store.jobs.save(job)
    assert _events(redis_client, job.id) == ["done"]
    assert store.jobs.active_ids() == []


def test_metrics_figures_and_the_one_time_count_of_older_jobs(redis_client):
    from scheduler.store.job_stats import JobStats

    store = Store.over(redis_client)
    for n in range(3):
        job = store.jobs.create(_job(f"old-{n}"))
        if n:
            job.record(JobState.SUCCEEDED, "done")
            store.jobs.save(job)
    stats = JobStats(redis_client)
    before = stats.totals(0.0).by_state
    assert before["succeeded"] == 2 and before["pending"] == 1
    # Jobs stored before the figures existed (an upgrade): counted by the next scrape, once.
    redis_client.delete(keys.JOB_SUMMARIES, keys.JOBS_FINISHED, keys.METRIC_FINISHED_STATES,
                        keys.METRIC_BACKFILLED)
    assert stats.totals(0.0).by_state == before
    assert stats.totals(0.0).by_state == before
    assert outbox.pending(redis_client, "old-1") == []


def test_a_redis_failure_after_the_commit_leaves_the_write_standing(redis_client, monkeypatch):
    import redis

    store = Store.over(redis_client)
    job = store.jobs.create(_job())
    job.record(JobState.SUCCEEDED, "done")

    def failing(*_):
        raise redis.ConnectionError("node down")

    real = outbox.apply
    monkeypatch.setattr(jobs_module.outbox, "apply", failing)
    saved = store.jobs.save(job)  # no error: the write committed
    monkeypatch.setattr(jobs_module.outbox, "apply", real)
    assert store.jobs.get(job.id).version == saved.version == 2
    assert _events(redis_client, job.id) == []
    outbox.repair(redis_client, grace_ms=0)
    assert _events(redis_client, job.id) == ["done"]
