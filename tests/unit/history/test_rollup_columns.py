"""The columnar decode and pieces (:func:`decode_days`, :func:`piece_columns_from_hours`,
:meth:`Accumulator.add_columns`) against the per-object code they replace on long windows:
the same hours, the same pieces and bit-equal statistics; and compaction's one-pass
:func:`rollup_day_texts` against :func:`rollup_hours` + :func:`encode_day`: the same blobs.
All on random step functions."""

from __future__ import annotations

import random

import pytest

from scheduler.services.history_stats import Accumulator
from scheduler.store.rollups import (
    DAY_MS,
    HOUR_MS,
    HourColumns,
    PieceColumns,
    decode_day,
    decode_days,
    encode_day,
    group_by_day,
    piece_columns_from_hours,
    pieces_from_hours,
    rollup_day_texts,
    rollup_hours,
)

T0 = 1_577_836_800_000  # 2020-01-01T00:00Z


def random_hours(rng: random.Random, days: int, p: float) -> list:
    """Rollups of a random step function over ``days`` days (changes at random minutes)."""
    points, price, t = [], rng.uniform(0.5, 30), T0 + rng.randrange(HOUR_MS)
    while t < T0 + days * DAY_MS:
        points.append((t, price))
        price = round(max(0.01, price * rng.uniform(0.8, 1.2)), rng.choice([2, 4, 6]))
        t += int(rng.expovariate(p) * HOUR_MS) + 60_000
    points = [pt for pt in points if pt[0] < T0 + days * DAY_MS]
    return rollup_hours(points, rng.choice([None, 1.5]) if rng.random() < 0.5 else None,
                        T0 + days * DAY_MS)


def blobs_of(hours) -> list[str]:
    return [encode_day(day, hs) for day, hs in group_by_day(hours).items()]


def same_pieces(cols: PieceColumns, pieces) -> bool:
    return cols.to_pieces() == pieces


@pytest.mark.parametrize("seed", range(40))
def test_decoded_columns_and_pieces_equal_the_per_object_code(seed):
    rng = random.Random(seed)
    hours = random_hours(rng, rng.randint(1, 60), rng.choice([0.1, 0.5, 2.0, 8.0]))
    blobs = blobs_of(hours)
    decoded = decode_days(blobs)
    hours = [h for b in blobs for h in decode_day(b)]  # what the store reads back
    assert [tuple(x) for x in zip(*(getattr(decoded, f) for f in
                                    ("hour_ms", "min", "mean", "max", "last", "changes")))] == \
        [(h.hour_ms, h.min, h.mean, h.max, h.last, h.changes) for h in hours]
    first, last = hours[0].hour_ms, hours[-1].hour_ms + HOUR_MS
    for _ in range(10):
        start = rng.randrange(first - 2 * HOUR_MS, last)
        end = rng.randrange(start, last + 3 * HOUR_MS)
        carry = rng.choice([None, 2.25])
        want = pieces_from_hours(hours, carry, start, end)
        got = piece_columns_from_hours(decoded, carry, start, end)
        assert same_pieces(got, want), (start, end, carry)
        divisor = rng.choice([1.0, 4.0, 8.0])
        old, new = Accumulator(), Accumulator()
        old.add(want, 7, divisor)
        new.add_columns(got, 7, divisor)
        assert new.result() == old.result()


def test_pooled_columns_and_pieces_in_any_mix_give_the_same_statistics():
    rng = random.Random(3)
    series = [random_hours(rng, 20, 1.0) for _ in range(4)]
    pieces = [pieces_from_hours(h, None, h[0].hour_ms, h[-1].hour_ms + HOUR_MS) for h in series]
    old, new = Accumulator(), Accumulator()
    for k, p in enumerate(pieces):
        old.add(p, k, 2.0)
        if k % 2:
            new.add_columns(PieceColumns.from_pieces(p), k, 2.0)
        else:
            new.add(p, k, 2.0)
    assert new.result() == old.result()
    assert Accumulator().result() is None
    empty = Accumulator()
    empty.add_columns(PieceColumns.from_pieces([]))
    assert empty.result() is None and empty.series == 0


def test_lenient_and_empty_blobs_decode_as_decode_day_does_and_malformed_ones_raise():
    blobs = ["18262|", "18262|1:1.0,1.5,2.0,2.0,3", "18263| 2:1,1,1,1,0", "18264|;3:2.0,2.0,2.0,2.0,1;"]
    got = decode_days(blobs)
    want = HourColumns.from_hours([h for b in blobs for h in decode_day(b)])
    for f in ("hour_ms", "min", "mean", "max", "last", "changes"):
        assert getattr(got, f).tolist() == getattr(want, f).tolist()
    assert len(decode_days([])) == 0 and len(decode_days(["18262|"])) == 0
    for bad in ("x|1:1,1,1,1,0", "18262|1:1,1,1,1", "18262|1:1,1,oops,1,0", "18262|1:1e,1,1,1,0"):
        with pytest.raises(ValueError):
            decode_days(["18261|0:1.0,1.0,1.0,1.0,1", bad])


@pytest.mark.parametrize("seed", range(300))
def test_day_texts_equal_rollup_hours_then_encode_day(seed):
    rng = random.Random(seed)
    points, t, price = [], T0 + rng.randrange(5 * HOUR_MS), rng.uniform(0.1, 10)
    cutoff = T0 + (rng.randint(1, 120) + 5) * HOUR_MS
    while t < cutoff:
        points.append((t, price))
        if rng.random() < 0.8:
            price = round(price * rng.uniform(0.8, 1.2), rng.choice([2, 4, 6]))
        t += rng.choice([1, 1000, 60_000, 600_000, HOUR_MS - 1, HOUR_MS, 5 * HOUR_MS])
    carry = rng.choice([None, 1.0, points[0][1]])
    hours = rollup_hours(points, carry, cutoff)
    want = [(day, encode_day(day, hs), hs[-1].last) for day, hs in group_by_day(hours).items()]
    got = [(day, f"{day // DAY_MS}|" + ";".join(parts), last)
           for day, parts, last in rollup_day_texts(points, carry, cutoff)]
    assert got == want


def test_day_texts_refuse_what_rollup_hours_refuses():
    with pytest.raises(ValueError):
        rollup_day_texts([(T0 + HOUR_MS, 1.0)], None, T0 + HOUR_MS)
    with pytest.raises(ValueError):
        rollup_day_texts([], None, T0 + 1)
    assert rollup_day_texts([], None, T0) == []
