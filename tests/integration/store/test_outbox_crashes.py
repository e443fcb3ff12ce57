"""Job writers SIGKILLed (real processes) between their commit and applying their outbox,
and repair() racing live writers, on the real redis-server and the real 3-master cluster
(``redis_client``): every side write of a committed write is applied exactly once, by
repair if nobody else, and repair never loses track of a committed write."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

from core.models import Job, JobState, utcnow
from scheduler.store import Store, keys, outbox
from scheduler.store.events import EventStream
from tests.factories.jobs import spec

# A writer process: reads the job, records a state, saves it and is SIGKILLed right after
# the commit (where applying its outbox would begin).
_WRITER = textwrap.dedent("""
    import os, signal, sys
    from core.models import JobState
    from scheduler.store import JobStore
    from scheduler.store import jobs as jobs_module
    from scheduler.store.connection import connect

    url, job_id, state = sys.argv[1:4]
    store = JobStore(connect(url))
    job = store.get(job_id)
    job.record(JobState(state), f"{state} by the killed writer")
    jobs_module.outbox.apply = lambda *_: os.kill(os.getpid(), signal.SIGKILL)
    store.save(job)
    sys.exit(3)  # never reached: the kill comes first
""")


def _killed_writer(url: str, job_id: str, state: JobState) -> None:
    """Run :data:`_WRITER` to its SIGKILL; raises ``AssertionError`` if it was not killed."""
    done = subprocess.run([sys.executable, "-c", _WRITER, url, job_id, state.value],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]


def _job(job_id: str) -> Job:
    now = utcnow()
    return Job(id=job_id, spec=spec(owner="alice"), created_at=now, updated_at=now)


def _events(client, job_id: str) -> list[str]:
    return [e["message"] for e in EventStream(client).read(after="0", limit=1000,
                                                           job_id=job_id).events]


def test_a_writer_killed_after_its_commit_is_repaired_exactly_once(redis_client,
                                                                    redis_server):
    store = Store.over(redis_client)
    job = store.jobs.create(_job("killed-1"))
    _killed_writer(redis_server.url, job.id, JobState.SUCCEEDED)
    assert store.jobs.get(job.id).state is JobState.SUCCEEDED
    assert store.jobs.active_ids() == [job.id] and _events(redis_client, job.id) == []
    assert redis_client.zscore(keys.JOBS_DIRTY, f"{job.id}:2") is not None
    assert outbox.repair(redis_client, grace_ms=0) > 0
    assert outbox.repair(redis_client, grace_ms=0) == 0
    assert store.jobs.active_ids() == []
    assert _events(redis_client, job.id) == ["succeeded by the killed writer"]
    assert redis_client.hget(keys.METRIC_FINISHED_STATES, "succeeded") == "1"
    assert redis_client.zcard(keys.JOBS_DIRTY) == 0
    assert outbox.pending(redis_client, job.id) == []


def test_repair_dropping_a_dead_write_keeps_the_id_a_live_writer_marked_again(
        redis_client, redis_server, monkeypatch):
    # A writer died before its EXEC long ago and left "<job>:2" dirty with nothing queued.
    # Repair lists that id and finds the outbox empty; meanwhile a live writer writes v2 (the
    # same id, marked again), commits and is killed. Repair must not drop the id now.
    store = Store.over(redis_client)
    job = store.jobs.create(_job("killed-2"))
    entry_id = f"{job.id}:2"
    redis_client.zadd(keys.JOBS_DIRTY, {entry_id: int(time.time() * 1000) - 3_600_000})
    real = outbox.pending

    def pending_then_a_write_commits(client, job_id):
        entries = real(client, job_id)
        if job_id == job.id and not entries:
            _killed_writer(redis_server.url, job_id, JobState.FAILED)
        return entries

    monkeypatch.setattr(outbox, "pending", pending_then_a_write_commits)
    outbox.repair(redis_client, grace_ms=60_000)
    monkeypatch.setattr(outbox, "pending", real)
    assert store.jobs.get(job.id).state is JobState.FAILED
    assert redis_client.zscore(keys.JOBS_DIRTY, entry_id) is not None  # still to repair
    assert len(outbox.pending(redis_client, job.id)) == 1
    assert outbox.repair(redis_client, grace_ms=0) > 0
    assert store.jobs.active_ids() == []
    assert _events(redis_client, job.id) == ["failed by the killed writer"]
    assert redis_client.zcard(keys.JOBS_DIRTY) == 0


def test_jobs_whose_outbox_keeps_failing_do_not_starve_repair_of_the_others(
        redis_client, redis_server):
    store = Store.over(redis_client)
    failing = [store.jobs.create(_job(f"stuck-{n}")) for n in range(3)]
    healthy = store.jobs.create(_job("healthy"))
    for job in [*failing, healthy]:
        _killed_writer(redis_server.url, job.id, JobState.SUCCEEDED)
    # Each failing job's outbox cannot be read (its key was overwritten with a string).
    for job in failing:
        redis_client.delete(keys.job_outbox(job.id))
        redis_client.set(keys.job_outbox(job.id), "not a list")
    base = int(time.time() * 1000) - 3_600_000
    redis_client.zadd(keys.JOBS_DIRTY, {f"{job.id}:2": base + n
                                        for n, job in enumerate([*failing, healthy])})
    now = base + 10_000
    for n in range(2):  # two passes of two ids each
        outbox.repair(redis_client, limit=2, grace_ms=0, now_ms=now + n)
    assert _events(redis_client, healthy.id) == ["succeeded by the killed writer"]
    assert store.jobs.active_ids() == sorted(j.id for j in failing)
    # The failing ones stay dirty, queued behind.
    assert sorted(redis_client.zrange(keys.JOBS_DIRTY, 0, -1)) == sorted(
        f"{j.id}:2" for j in failing)


def test_a_side_write_that_always_fails_does_not_hold_the_jobs_outbox(redis_client):
    # A shared key of another type (left by an older layout, say): its op fails on every
    # retry. The write's other side writes apply and the outbox drains (else it grew by an
    # entry per write of the job, each write re-sending all of them).
    store = Store.over(redis_client)
    redis_client.set(keys.JOB_SUMMARIES, "not a hash")
    job = store.jobs.create(_job("wrongtype-1"))
    for n in range(20):
        job.record(JobState.RUNNING, f"step {n}")
        job = store.jobs.save(job)
    assert outbox.pending(redis_client, job.id) == []
    assert redis_client.zcard(keys.JOBS_DIRTY) == 0
    assert _events(redis_client, job.id) == [f"step {n}" for n in range(20)]
    assert store.jobs.active_ids() == [job.id]
    assert redis_client.get(keys.JOB_SUMMARIES) == "not a hash"
