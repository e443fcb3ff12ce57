"""The history store against a real Redis: change-only storage, out-of-order and late
observations, compaction into rollups, retention, settings, and bounded memory."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from core.models import PriceObservation
from scheduler.store import keys
from scheduler.store.history import HistoryStore, to_ms

T0 = datetime(2025, 1, 1, tzinfo=UTC)
S = "aws/us-east-1/us-east-1a/p3.2xlarge/spot"


def obs(minutes: float, price: float, series: str = S) -> PriceObservation:
    return PriceObservation(series=series, observed_at=T0 + timedelta(minutes=minutes),
                            price_usd_per_hour=price)


def test_only_changes_are_stored_and_repeats_extend_the_series(redis_client):
    history = HistoryStore(redis_client)
    result = history.append([obs(0, 1.0), obs(10, 1.0), obs(20, 1.5), obs(30, 1.5), obs(40, 1.0)])
    assert (result.given, result.stored, result.unchanged) == (5, 3, 2)
    assert history.raw_points(S) == [(to_ms(T0), 1.0), (to_ms(T0) + 1_200_000, 1.5),
                                     (to_ms(T0) + 2_400_000, 1.0)]
    assert history.append([obs(50, 1.0)]).stored == 0
    meta = history.metas([S])[S]
    assert meta.last_seen_ms == to_ms(T0) + 3_000_000
    again = history.append([obs(0, 1.0), obs(20, 1.5)])
    assert again.stored == 0 and again.unchanged == 2


def test_out_of_order_points_keep_the_step_function_canonical(redis_client):
    history = HistoryStore(redis_client)
    history.append([obs(0, 1.0), obs(30, 2.0)])
    history.append([obs(20, 2.0)])  # an earlier change to 2.0: the point at 30 is now redundant
    assert [p for _, p in history.raw_points(S)] == [1.0, 2.0]
    assert history.raw_points(S)[1][0] == to_ms(T0) + 1_200_000
    history.append([obs(20, 3.0)])  # a different price at the same time replaces it
    assert [p for _, p in history.raw_points(S)] == [1.0, 3.0]


def test_seen_until_extends_a_series_without_a_change(redis_client):
    history = HistoryStore(redis_client)
    history.append([obs(0, 1.0)], seen_until={S: T0 + timedelta(days=2)})
    assert history.metas([S])[S].last_seen_ms == to_ms(T0 + timedelta(days=2))


def test_compaction_rolls_old_points_into_hours_and_late_points_are_dropped(redis_client):
    history = HistoryStore(redis_client)
    history.configure(raw_days=2, compact_slack_h=0)
    points = [obs(m, 1.0 + (m // 30) % 4 / 10) for m in range(0, 5 * 24 * 60, 30)]
    result = history.append(points)
    assert result.compacted == 1
    meta = history.metas([S])[S]
    assert meta.rolled_until_ms == to_ms(T0 + timedelta(days=5) - timedelta(minutes=30)) \
        - 2 * 86_400_000 - (to_ms(T0 + timedelta(days=5) - timedelta(minutes=30)) % 3_600_000)
    assert history.raw_points(S)[0][0] >= meta.rolled_until_ms
    assert redis_client.zcard(keys.history_hourly(S)) == 3  # days 1-3 rolled, one blob each
    pieces, changes = history.pieces(meta, meta.first_ms, meta.last_seen_ms)
    assert changes == len(points) - 1
    assert {p.lo for p in pieces} | {p.hi for p in pieces} == {1.0, 1.1, 1.2, 1.3}
    assert history.append([obs(60, 9.0)]).late == 1
    at = to_ms(T0 + timedelta(hours=10, minutes=50))
    price, since = history.prices_at([S], at)[S]
    # Rolled up, the answer is the price at the end of hour 10: 1.1, set at 10:30 (it is 1.0
    # from 10:00, and 1.2 only from 11:00).
    assert since == to_ms(T0 + timedelta(hours=10)) and price == 1.1


def test_retention_drops_old_rollups_and_keeps_the_price_at_the_new_start(redis_client):
    history = HistoryStore(redis_client)
    history.configure(raw_days=1, rollup_days=3, compact_slack_h=0)
    history.append([obs(60 * 12, 5.0), obs(60 * 24 * 2, 6.0)])
    history.append([obs(60 * 24 * 8, 7.0)])
    meta = history.metas([S])[S]
    assert meta.first_ms == to_ms(T0 + timedelta(days=5))
    assert meta.base_price == 6.0
    pieces, _ = history.pieces(meta, meta.first_ms, meta.last_seen_ms)
    assert pieces[0].lo == 6.0 and pieces[-1].last == 7.0
    assert redis_client.zcard(keys.history_hourly(S)) == 0


def test_point_cap_bounds_the_raw_tier(redis_client):
    history = HistoryStore(redis_client)
    history.configure(raw_max_points=100, compact_slack_h=0)
    history.append([obs(m, 1.0 + (m % 2)) for m in range(600)])  # a change every minute
    assert redis_client.zcard(keys.history_raw(S)) <= 110
    meta = history.metas([S])[S]
    _, changes = history.pieces(meta, meta.first_ms, meta.last_seen_ms)
    assert changes == 599


def test_settings_are_validated_and_shared(redis_client):
    history = HistoryStore(redis_client)
    with pytest.raises(ValueError, match="raw_days"):
        history.configure(raw_days=0)
    with pytest.raises(ValueError, match="unknown history setting"):
        history.configure(raw_weeks=3)
    history.configure(raw_days=7)
    assert HistoryStore(redis_client).settings().raw_days == 7


def test_a_year_of_many_series_stays_within_the_stated_bound(redis_client):
    """Scaled down from the benchmark: 20 series × 365 days, a change ~every 4 h (6 a day,
    several times the real AWS rate), observed every 2 h. Bound: 200 KB per series-year."""
    history = HistoryStore(redis_client)
    rng = random.Random(5)
    prices = [rng.uniform(0.5, 5) for _ in range(20)]
    before = redis_client.info("memory")["used_memory"]
    for day in range(365):
        batch = []
        for i in range(20):
            for k in range(12):
                if rng.random() < 0.5:
                    prices[i] = round(prices[i] * rng.uniform(0.95, 1.05), 4)
                batch.append(PriceObservation.model_construct(
                    series=f"aws/r/z{i}/t/spot", price_usd_per_hour=prices[i],
                    observed_at=T0 + timedelta(days=day, hours=2 * k)))
        history.append(batch)
    grown = redis_client.info("memory")["used_memory"] - before
    per_series = sum(redis_client.memory_usage(k) for k in redis_client.scan_iter("ga:hist:{*")) / 20
    assert per_series < 200_000 and grown / 20 < 200_000
    raw = max(redis_client.zcard(keys.history_raw(f"aws/r/z{i}/t/spot")) for i in range(20))
    assert raw < 31 * 12  # 30 days (+ slack) of changes at most


def test_price_at_a_time_before_the_first_changed_hour_of_its_day(redis_client):
    history = HistoryStore(redis_client)
    history.configure(raw_days=1, compact_slack_h=0)
    history.append([obs(60 * 20, 2.0), obs(60 * 24 + 60 * 5, 3.0), obs(60 * 24 * 4, 4.0)])
    at = to_ms(T0 + timedelta(days=1, hours=1))  # day 2 01:00: its blob starts at 05:00
    assert history.prices_at([S], at)[S] == (2.0, to_ms(T0 + timedelta(hours=20)))


def test_day_by_day_compaction_stores_the_blobs_of_one_rollup_of_every_point(redis_client):
    """Compaction cut into daily runs (a day continuing the newest stored blob, retention
    dropping old days) stores what one rollup of the whole step function gives."""
    from scheduler.store.rollups import encode_day, group_by_day, rollup_hours

    history = HistoryStore(redis_client)
    history.configure(raw_days=1, rollup_days=6, compact_slack_h=0)
    rng = random.Random(5)
    price, points = 2.0, []
    for day in range(12):
        batch = []
        for minute in sorted(rng.sample(range(day * 1440, (day + 1) * 1440), 9)):
            price = round(price * rng.uniform(0.9, 1.1), 4)
            batch.append(obs(minute, price))
            points.append((to_ms(T0 + timedelta(minutes=minute)), price))
        history.append(batch[:5])
        history.append(batch[5:])  # a second compaction on the same day
    meta = history.metas([S])[S]
    rolled = meta.rolled_until_ms
    assert rolled is not None and meta.first_ms > to_ms(T0)  # retention moved the start
    hours = rollup_hours([p for p in points if p[0] < rolled], None, rolled)
    want = {day: encode_day(day, hs) for day, hs in group_by_day(hours).items()
            if day >= meta.first_ms}
    stored = redis_client.zrange(keys.history_hourly(S), 0, -1, withscores=True)
    assert {int(score): blob for blob, score in stored} == want
    assert meta.base_price == [p for ms, p in points if ms < meta.first_ms][-1]
