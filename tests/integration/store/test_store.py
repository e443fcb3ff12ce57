"""The Redis store against a real redis-server."""

from datetime import timedelta

import pytest

from core.models import Job, JobState, PriceObservation, utcnow
from scheduler.store import JobExistsError, StaleJobError, Store, keys
from scheduler.store.connection import EmbeddedRedis
from scheduler.store.leases import Leases
from tests.factories.jobs import spec
from tests.factories.offers import offer


def _job(job_id="train-1"):
    now = utcnow()
    return Job(id=job_id, spec=spec(), created_at=now, updated_at=now)


def test_job_create_is_once_and_saves_are_optimistic(redis_client):
    store = Store.over(redis_client)
    created = store.jobs.create(_job())
    with pytest.raises(JobExistsError):
        store.jobs.create(_job())
    a = store.jobs.get(created.id)
    b = store.jobs.get(created.id)
    a.record(JobState.PROVISIONING, "placed")
    store.jobs.save(a)
    b.record(JobState.CANCELLED, "stale writer")
    with pytest.raises(StaleJobError):
        store.jobs.save(b)
    assert store.jobs.get(created.id).state is JobState.PROVISIONING
    assert store.jobs.active_ids() == [created.id]


def test_terminal_jobs_leave_the_active_set(redis_client):
    store = Store.over(redis_client)
    job = store.jobs.create(_job())
    job.record(JobState.SUCCEEDED, "done")
    store.jobs.save(job)
    assert store.jobs.active_ids() == []
    assert [j.id for j in store.jobs.list()] == [job.id]


def test_logs_are_capped_and_paged(redis_client):
    store = Store.over(redis_client)
    store.jobs.append_logs("j", [f"line {i}" for i in range(5)])
    assert store.jobs.logs("j", 3) == ["line 3", "line 4"]


def test_offers_replace_per_provider_and_history_appends(redis_client):
    store = Store.over(redis_client)
    store.offers.replace_offers("aws", [offer(zone="a"), offer(zone="b")])
    store.offers.replace_offers("gcp", [offer(provider="gcp", zone="c")])
    store.offers.replace_offers("aws", [offer(zone="a")])
    assert sorted(o.zone for o in store.offers.all_offers()) == ["a", "c"]
    series = offer(zone="a").key.series()
    t0 = utcnow()
    obs = [PriceObservation(series=series, observed_at=t0 + timedelta(minutes=i),
                            price_usd_per_hour=0.9 + i / 100) for i in range(3)]
    store.offers.append_prices(obs)
    store.offers.append_prices(obs[:1])  # the same observation twice is stored once
    history = store.offers.price_history(series)
    assert [o.price_usd_per_hour for o in history] == [0.9, 0.91, 0.92]
    assert store.offers.price_history(series, since=t0 + timedelta(seconds=30))[0].price_usd_per_hour == 0.91
    assert store.offers.series() == [series]


def test_unavailable_offers_expire(redis_client):
    store = Store.over(redis_client)
    key = offer().key
    store.offers.mark_unavailable(key, ttl_s=60)
    store.offers.mark_unavailable(offer(zone="b").key, ttl_s=-1)
    assert store.offers.unavailable() == {key}


def test_leases_renew_only_for_their_holder(redis_client):
    a, b = Leases(redis_client, "a"), Leases(redis_client, "b")
    key = keys.job_lease("j")
    assert a.acquire(key, 5)
    assert not b.acquire(key, 5)
    assert a.acquire(key, 5)  # renewal
    assert not b.release(key)
    assert a.release(key)
    assert b.acquire(key, 5)


def test_embedded_redis_persists_across_restarts(tmp_path):
    server = EmbeddedRedis(tmp_path / "redis")
    client = server.start()
    Store.over(client).jobs.create(_job("persisted"))
    # A second start while it runs reuses the same server.
    assert EmbeddedRedis(tmp_path / "redis").start().get(keys.job("persisted"))
    server.stop()
    assert not server.running()
    again = EmbeddedRedis(tmp_path / "redis").start()
    try:
        assert Store.over(again).jobs.get("persisted").id == "persisted"
    finally:
        EmbeddedRedis(tmp_path / "redis").stop()
