"""Retention of price history: raw price changes that fell out of the raw window (or past the
point cap) are rolled into hourly rollups, and rollups past ``rollup_days`` are dropped.

The key layout and the retention settings are described in :mod:`scheduler.store.history`.
Compaction is optimistic: the script (``COMPACT``) applies a plan only when the series' raw
points are still those the plan was computed from, so a series written meanwhile is skipped
and compacted by a later append.
"""

from __future__ import annotations

import hashlib

import redis

from scheduler.store import keys
from scheduler.store.history_scripts import COMPACT, run_pipelined
from scheduler.store.rollups import (
    DAY_MS,
    HOUR_MS,
    HistorySettings,
    SeriesMeta,
    decode_day,
    encode_day,
    floor_day,
    floor_hour,
    price_text,
    rollup_day_texts,
)


def due_for_compaction(settings: HistorySettings, seen: int, count: int, oldest: int) -> bool:
    """Is the raw tier past its window by the slack, or 10 % past its point cap? ``seen``: the
    series' newest observation (ms), ``count`` its raw points, ``oldest`` the oldest one (ms)."""
    by_age = floor_hour(seen - int(settings.raw_days * DAY_MS))
    slack = int(settings.compact_slack_h * HOUR_MS)
    return oldest < by_age - slack or count > settings.raw_max_points * 1.1


# What a compaction plan is made from: meta, cutoff ms, raw members before it, newest blob.
Read = tuple[SeriesMeta, int, list[str], list[str]]


class Compaction:
    """Compacts series of price history in Redis (thread-safe, as redis-py is)."""

    def __init__(self, client: redis.Redis) -> None:
        self._r = client
        self._script = client.register_script(COMPACT)

    def run(self, names: list[str], settings: HistorySettings, source: str) -> int:
        """Compact ``names`` (series of ``source``) under ``settings``; returns how many series
        were compacted (a series written meanwhile is skipped; the next append retries it)."""
        with self._r.pipeline(transaction=False) as pipe:
            for series in names:
                pipe.hgetall(keys.history_meta(series, source))
                pipe.zcard(keys.history_raw(series, source))
            replies = pipe.execute()
        plans: list[tuple[SeriesMeta, int, int]] = []  # meta, cutoff by age, excess points
        for i, series in enumerate(names):
            meta = SeriesMeta.parse(series, replies[2 * i], source)
            if meta is not None:
                cutoff = floor_hour(meta.last_seen_ms - int(settings.raw_days * DAY_MS))
                plans.append((meta, cutoff, int(replies[2 * i + 1]) - settings.raw_max_points))
        with self._r.pipeline(transaction=False) as pipe:
            for meta, cutoff, excess in plans:
                raw = keys.history_raw(meta.series, source)
                if excess > 0:
                    pipe.zrange(raw, excess, excess, withscores=True)
                else:
                    pipe.echo("-")
                pipe.zrangebyscore(raw, "-inf", f"({cutoff}")
                pipe.zrevrangebyscore(keys.history_hourly(meta.series, source), "+inf", "-inf",
                                      start=0, num=1)
            replies = pipe.execute()
        read: list[Read] = []
        for i, (meta, cutoff, excess) in enumerate(plans):
            at_excess, members, last_blob = replies[3 * i: 3 * i + 3]
            if excess > 0 and at_excess:
                by_count = min(floor_hour(int(at_excess[0][1])) + HOUR_MS,
                               floor_hour(meta.last_seen_ms))
                if by_count > cutoff:
                    cutoff = by_count
                    members = self._r.zrangebyscore(keys.history_raw(meta.series, source),
                                                    "-inf", f"({cutoff}")
            read.append((meta, cutoff, members, last_blob))
        return self.apply(read, settings, source)

    def apply(self, read: list[Read], settings: HistorySettings, source: str) -> int:
        """Plan and apply the compaction of series already read: per series its meta, the
        cutoff (an hour start), its raw members before the cutoff and its newest rollup blob
        (a list of 0 or 1), as the append script returns them. One pipelined round trip;
        returns how many series were compacted (the script skips a series whose raw points
        changed since they were read)."""
        calls = []
        for meta, cutoff, members, last_blob in read:
            args = self._plan(meta, cutoff, members, last_blob, settings)
            if args is not None:
                calls.append(([keys.history_raw(meta.series, source),
                               keys.history_hourly(meta.series, source),
                               keys.history_meta(meta.series, source)], args))
        return sum(int(a) for a in run_pipelined(self._r, self._script, calls))

    def _plan(self, meta: SeriesMeta, cutoff: int, members: list[str],
              last_blob: list[str], settings: HistorySettings) -> list[str] | None:
        old, points = [], []
        for m in members:
            ms_text, _, price = m.partition(":")
            ms = int(ms_text)
            if ms < cutoff:
                old.append(m)
                points.append((ms, float(price)))
        if not old or (meta.rolled_until_ms is not None and cutoff <= meta.rolled_until_ms):
            return None
        carry = meta.rolled_price if meta.rolled_until_ms is not None else meta.base_price
        days = rollup_day_texts(points, carry, cutoff)
        if last_blob:
            previous = decode_day(last_blob[0])
            first_day, first_parts, first_last = days[0]
            if previous and floor_day(previous[0].hour_ms) == first_day:
                # The new hours continue the newest stored day: one blob, stored hours first.
                head = encode_day(first_day, previous).partition("|")[2]
                days[0] = (first_day, [head, *first_parts], first_last)
        horizon = floor_day(meta.last_seen_ms - int(settings.rollup_days * DAY_MS))
        first_ms, base = meta.first_ms, None
        if horizon > meta.first_ms:
            first_ms, base = horizon, self._price_at_horizon(meta, horizon, days)
        args = [",".join(("" if meta.rolled_until_ms is None else str(meta.rolled_until_ms),
                          str(cutoff), hashlib.sha1("\n".join(old).encode()).hexdigest(),
                          price_text(points[-1][1]), str(horizon) if base is not None else "",
                          str(first_ms), "" if base is None else price_text(base)))]
        for day_ms, parts, _ in days:
            if day_ms >= horizon or base is None:
                args += [str(day_ms), f"{day_ms // DAY_MS}|" + ";".join(parts)]
        return args

    def _price_at_horizon(self, meta: SeriesMeta, horizon: int,
                          new_days: list[tuple[int, list[str], float]]) -> float | None:
        """The price in force at ``horizon`` (a day start), from the rollups before it."""
        before = [last for d, _, last in new_days if d < horizon]
        if before:
            return before[-1]
        stored = self._r.zrevrangebyscore(keys.history_hourly(meta.series, meta.source),
                                          f"({horizon}", "-inf", start=0, num=1)
        if stored:
            return decode_day(stored[0])[-1].last
        return meta.base_price if meta.base_price is not None else meta.rolled_price
