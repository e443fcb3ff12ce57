"""Pure history arithmetic: hourly rollups, day blobs, pieces and time-weighted statistics,
checked against brute force over the step function."""

from __future__ import annotations

import random

import pytest

from scheduler.services.history_stats import Accumulator, split_by_hour_of_day
from scheduler.store.rollups import (
    DAY_MS,
    HOUR_MS,
    HourRollup,
    Piece,
    decode_day,
    encode_day,
    group_by_day,
    pieces_from_hours,
    pieces_from_points,
    price_text,
    rollup_hours,
)

T0 = 1_577_836_800_000  # 2020-01-01T00:00Z


def brute(points: list[tuple[int, float]], start: int, end: int) -> dict[str, float]:
    """Time-weighted min/mean/max/inverted-CDF quantiles of the step function, per minute."""
    step = 60_000
    samples = []
    for t in range(start, end, step):
        price = [p for ms, p in points if ms <= t][-1]
        samples.append(price)
    samples.sort()
    n = len(samples)
    q = lambda f: samples[max(0, -(-int(f * n * 1000) // 1000) - 1)]
    return {"min": samples[0], "max": samples[-1], "mean": sum(samples) / n,
            "p50": q(0.5), "p90": q(0.9)}


def test_price_text_is_canonical():
    assert price_text(float("1.140900")) == "1.1409" == price_text(1.1409)


def test_rollup_of_an_hour_with_a_carry_and_two_changes():
    points = [(T0 + 15 * 60_000, 2.0), (T0 + 45 * 60_000, 4.0)]
    [hour] = rollup_hours(points, 1.0, T0 + HOUR_MS)
    assert (hour.min, hour.max, hour.last, hour.changes) == (1.0, 4.0, 4.0, 2)
    assert hour.mean == pytest.approx((15 * 1 + 30 * 2 + 15 * 4) / 60)


def test_first_point_of_a_series_is_not_a_change_and_covers_from_itself():
    [hour] = rollup_hours([(T0 + 30 * 60_000, 3.0)], None, T0 + HOUR_MS)
    assert (hour.mean, hour.changes) == (3.0, 0)


def test_rollup_refuses_points_past_the_cutoff():
    with pytest.raises(ValueError):
        rollup_hours([(T0 + HOUR_MS, 1.0)], None, T0 + HOUR_MS)
    with pytest.raises(ValueError):
        rollup_hours([], None, T0 + 1)


def test_day_blob_round_trip_and_grouping():
    hours = [HourRollup(T0 + h * HOUR_MS, 1.0, 1.25, 1.5, 1.5, 2) for h in (0, 5, 23)]
    hours.append(HourRollup(T0 + DAY_MS, 2.0, 2.0, 2.0, 2.0, 1))
    days = group_by_day(hours)
    assert sorted(days) == [T0, T0 + DAY_MS]
    blob = encode_day(T0, days[T0])
    assert blob.startswith(f"{T0 // DAY_MS}|0:")
    assert decode_day(blob) == days[T0]
    with pytest.raises(ValueError):
        encode_day(T0, days[T0 + DAY_MS])
    with pytest.raises(ValueError):
        decode_day("x|oops")


def test_pieces_from_rollups_are_exact_for_min_max_mean():
    rng = random.Random(7)
    points, t, price = [], T0, 1.0
    for _ in range(200):
        t += rng.randrange(5, 400) * 60_000
        price = round(price + rng.choice([-0.1, 0.1, 0.05]), 4)
        points.append((t, price))
    end = t - t % HOUR_MS + HOUR_MS
    hours = rollup_hours(points, None, end)
    pieces = pieces_from_hours(hours, None, points[0][0], end)
    acc = Accumulator()
    acc.add(pieces)
    got = acc.result()
    want = brute(points, points[0][0] - points[0][0] % 60_000 + 60_000, end)
    assert got["min"] == min(p for _, p in points)
    assert got["max"] == max(p for _, p in points)
    assert got["mean"] == pytest.approx(want["mean"], rel=1e-3)
    assert got["last"] == points[-1][1]


def test_raw_pieces_give_the_brute_force_quantiles():
    rng = random.Random(3)
    points, t = [(T0, 1.0)], T0
    for _ in range(80):
        t += rng.randrange(1, 90) * 60_000
        points.append((t, round(rng.uniform(0.5, 2.0), 3)))
    end = t + 30 * 60_000
    pieces = pieces_from_points(points, None, T0, end)
    acc = Accumulator()
    acc.add(pieces, changes=len(points) - 1)
    got, want = acc.result(), brute(points, T0, end)
    for k in ("min", "max", "p50", "p90"):
        assert got[k] == want[k], k
    assert got["mean"] == pytest.approx(want["mean"])
    assert got["changes"] == 80 and got["hours"] == pytest.approx((end - T0) / HOUR_MS)


def test_a_snapshot_counts_once():
    pieces = pieces_from_points([(T0, 2.5)], None, T0, T0)
    assert pieces == [Piece.constant(T0, T0, 2.5)]
    acc = Accumulator()
    acc.add(pieces)
    assert acc.result()["p50"] == 2.5


def test_hour_of_day_split_keeps_every_millisecond():
    piece = Piece.constant(T0 + 30 * 60_000, T0 + 3 * DAY_MS + 2 * HOUR_MS, 1.0)
    split = split_by_hour_of_day([piece])
    total = sum(d for parts in split.values() for _, d in parts)
    assert total == piece.end_ms - piece.start_ms
    assert sum(d for _, d in split[0]) == 3 * HOUR_MS + 30 * 60_000
    assert sum(d for _, d in split[5]) == 3 * HOUR_MS
