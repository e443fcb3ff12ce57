"""Leases with fencing on a real Redis: a replica that lost its lease (it paused past the TTL and
another replica took the job) can no longer write the job."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest
import redis

from core.models import Job, JobState, utcnow
from scheduler.controller.context import AgentBootstrap, Context, ProviderRegistry
from scheduler.controller.reconcile import reconcile_pass
from scheduler.store import LeaseLostError, Leases, StaleJobError, Store, keys, multi
from scheduler.store.agents import AgentTokens
from scheduler.store.leases import LeasedTask
from tests.factories.jobs import spec
from tests.fixtures.redis_server import free_port


def _job(store: Store, job_id: str = "j") -> Job:
    now = utcnow()
    job = Job(id=job_id, spec=spec(), created_at=now, updated_at=now)
    job.record(JobState.PENDING, "submitted")
    return store.jobs.create(job)


def _expire(client, key: str) -> None:
    """The TTL ran out (as while its holder was paused), without waiting for it."""
    client.delete(key)


def test_fences_grow_with_every_new_acquisition(redis_client):
    a, b = Leases(redis_client, "a"), Leases(redis_client, "b")
    key = keys.job_lease("j")
    first = a.acquire(key, 5)
    assert first.fence >= 1 and redis_client.get(key) == f"a/{first.fence}"
    assert a.acquire(key, 5) == first  # a renewal keeps the fence
    assert b.acquire(key, 5) is None
    _expire(redis_client, key)
    second = b.acquire(key, 5)
    assert second.fence > first.fence
    assert not a.renew(first, 5)  # the old acquisition cannot extend b's lease
    assert not a.release(key)
    _expire(redis_client, key)
    third = a.acquire(key, 5)  # the same holder again: a new fence
    assert third.fence > second.fence
    assert a.renew(third, 5)


def test_release_all_frees_every_lease_of_the_holder(redis_client):
    a, b = Leases(redis_client, "a"), Leases(redis_client, "b")
    for name in ("x", "y"):
        assert a.acquire(keys.lease(name), 30)
    assert a.release_all() == 2
    assert all(b.acquire(keys.lease(name), 30) for name in ("x", "y"))


def test_old_holders_save_is_refused_after_another_replica_took_the_lease(redis_client):
    store = Store.over(redis_client)
    job = _job(store)
    key = keys.job_lease(job.id)
    a, b = Leases(redis_client, "a"), Leases(redis_client, "b")
    old = store.jobs.fenced(a.acquire(key, 5), 5)
    mine = store.jobs.get(job.id)
    mine.waiting_reason = "a writes this"
    old.save(mine)  # while a holds the lease its saves land
    old_copy = store.jobs.get(job.id)

    _expire(redis_client, key)  # a pauses past the TTL ...
    new = store.jobs.fenced(b.acquire(key, 5), 5)  # ... b takes the job, has not written yet

    old_copy.waiting_reason = "a, after its pause"
    with pytest.raises(LeaseLostError, match="lease a/"):
        old.save(old_copy)  # the version still matches: only the fence stops it
    assert store.jobs.get(job.id).waiting_reason == "a writes this"
    fresh = store.jobs.get(job.id)
    fresh.waiting_reason = "b"
    assert new.save(fresh).waiting_reason == "b"


def test_a_lapsed_lease_refuses_saves_and_a_fenced_save_renews_the_lease(redis_client):
    store = Store.over(redis_client)
    job = _job(store)
    key = keys.job_lease(job.id)
    jobs = store.jobs.fenced(Leases(redis_client, "a").acquire(key, 1), 60)
    job = jobs.save(job)
    assert redis_client.pttl(key) > 1000  # extended to 60 s by the save
    _expire(redis_client, key)
    with pytest.raises(LeaseLostError):  # nobody holds it: still not ours
        jobs.save(job)
    assert issubclass(LeaseLostError, StaleJobError)  # callers that retry stale jobs cope


def _context(client, holder: str) -> Context:
    store = replace(Store.over(client), leases=Leases(client, holder))
    bootstrap = AgentBootstrap(api_url="http://127.0.0.1:9", store_url="file:///nowhere",
                               tokens=AgentTokens(b"s"))
    return Context(store=store, providers=ProviderRegistry(), bootstrap=bootstrap, owner="o")


def test_reconcile_leaves_a_job_leased_by_another_replica_alone(redis_client):
    a, b = _context(redis_client, "a"), _context(redis_client, "b")
    job = _job(a.store)
    assert b.store.leases.acquire(keys.job_lease(job.id), 30)
    assert reconcile_pass(a) == 0
    assert a.store.jobs.get(job.id).version == job.version
    assert reconcile_pass(b) == 1  # the holder acts (no offers: it records why it waits)
    assert b.store.jobs.get(job.id).waiting_reason


def test_a_leased_task_runs_on_one_replica_and_moves_when_its_owner_is_gone(redis_client):
    runs: list[str] = []
    key = keys.lease("task")
    a = LeasedTask(Leases(redis_client, "a"), key, 30, runs.append, "a")
    b = LeasedTask(Leases(redis_client, "b"), key, 30, runs.append, "b")
    a(), b(), a(), b()
    assert runs == ["a", "a"]
    _expire(redis_client, key)  # a died; its lease ran out
    b(), a()
    assert runs == ["a", "a", "b"]


def test_a_leased_task_that_meets_redis_gone_logs_one_line_and_a_bug_still_raises(
        redis_client, caplog):
    # A client of a server that is not there (a master mid-failover), without retries.
    gone = redis.Redis(port=free_port(), socket_connect_timeout=1, retry_on_error=[],
                       retry=None)
    task = LeasedTask(Leases(redis_client, "a"), keys.lease("gone"), 30, gone.get, "k")
    with caplog.at_level(logging.WARNING, logger="scheduler.store.leases"):
        assert task() is None
    (record,) = [r for r in caplog.records if "Redis unavailable" in r.getMessage()]
    assert record.exc_info is None and "ConnectionError" in record.getMessage()
    redis_client.set("ga:test:a-string", "1")
    wrong = LeasedTask(Leases(redis_client, "a"), keys.lease("wrong"), 30,
                       redis_client.lpush, "ga:test:a-string", "x")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        wrong()


def test_two_replicas_split_the_jobs_evenly(redis_client):
    a, b = _context(redis_client, "a"), _context(redis_client, "b")
    ids = [_job(a.store, f"j{n}").id for n in range(4)]

    def holders() -> list[str | None]:
        return [(v or "").split("/")[0] or None
                for v in multi.mget(redis_client, [keys.job_lease(i) for i in ids])]

    reconcile_pass(a)  # alone: a controls every job
    assert holders() == ["a"] * 4
    reconcile_pass(b)  # b joins: every lease is a's for now
    reconcile_pass(a)  # a keeps its share, gives the rest up ...
    assert holders() == ["a", "a", None, None]
    reconcile_pass(b)  # ... and b takes it
    assert holders() == ["a", "a", "b", "b"]
    reconcile_pass(a), reconcile_pass(b)
    assert holders() == ["a", "a", "b", "b"]  # stable


def test_batched_acquire_and_release_match_the_single_ones(redis_client):
    a, b = Leases(redis_client, "a"), Leases(redis_client, "b")
    names = [keys.job_lease(f"j{n}") for n in range(3)]
    assert b.acquire(names[1], 30)
    taken = a.acquire_many(names, 30)
    assert taken[names[1]] is None and taken[names[0]].fence >= 1
    assert a.holders(names) == ["a", "b", "a"]
    assert a.acquire_many(names, 30)[names[2]] == taken[names[2]]  # renewal keeps the fence
    a.release_many(names)
    assert a.holders(names) == [None, "b", None]
