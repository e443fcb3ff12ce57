"""Price history in Redis, bounded: raw price changes for a recent window, hourly rollups
for the long term.

Per series (``provider/region/zone/instance_type/market``), three keys sharing the
``{series}`` hash tag (see :mod:`scheduler.store.keys`):

- ``ga:hist:{series}:raw`` — zset of **price changes** only (member ``"{ms}:{price}"``, score
  ms). An observation that repeats the price in force is not stored; it only extends the
  series' ``last_seen_ms``. Points older than ``raw_days`` behind the series' newest
  observation (or beyond ``raw_max_points``) are rolled up.
- ``ga:hist:{series}:hourly`` — zset of day blobs of hourly rollups (min/mean/max/last/changes
  of each hour in which the price changed; :mod:`scheduler.store.rollups`), dropped after
  ``rollup_days`` behind the newest observation.
- ``ga:hist:{series}:meta`` — hash: ``first_ms``, ``last_seen_ms``, ``rolled_until_ms`` (raw
  points are all at or after it), ``rolled_price`` (in force at it), ``base_price`` (in force
  at ``first_ms`` once retention moved it).

Every series lives in one **source** (:mod:`scheduler.store.history_sources`): ``real``
(cloud APIs, imported real dumps; the key layout above, unchanged since before sources
existed) or ``replay:<market>`` (a replayed market; the same keys under
``ga:hist:replay:<market>:``, indexed in ``ga:series:replay:<market>``). Writers name their
source; readers name the one they read, or let it follow the provider's latest offers
(``ga:offers-source:<provider>``, written with the offers). Sources never share points or extents.

Each source's series are indexed by provider, region, zone, instance type and market
(:mod:`scheduler.store.history_index`), so a filtered :meth:`HistoryStore.series` reads only
the matching names. Redis Cluster: every script runs on one series' keys (one slot); the
global sets (series indexes, ``ga:hist:sources``, hardware, settings) are written by separate,
idempotent commands.

Retention counts from the series' own newest observation, not the wall clock, so imported old
dumps keep their raw points. Settings live in ``ga:hist:config`` (shared by all replicas).

Bound per series: at most ``raw_days`` of changes, capped at ``raw_max_points`` (about 60 B
each in a Redis skiplist zset), plus ``rollup_days`` day blobs of at most 24 hours
(≈ 35 B per changed hour + ≈ 70 B per day): e.g. 30 days raw + 730 days hourly with a change
every hour ≤ 2.4 MB, and ~0.2 MB with the few changes a day real spot prices show.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import asdict, fields
from datetime import datetime

import redis

from core.models import PriceObservation
from scheduler.store import history_index, keys
from scheduler.store.history_compaction import Compaction
from scheduler.store.history_index import SeriesIndex
from scheduler.store.history_scripts import APPEND, run_pipelined
from scheduler.store.history_sources import REAL, check, is_replay
from scheduler.store.rollups import (
    DAY_MS,
    HOUR_MS,
    AppendResult,
    HistorySettings,
    HourColumns,
    HourRollup,
    Piece,
    PieceColumns,
    SeriesMeta,
    decode_day,
    decode_days,
    floor_day,
    floor_hour,
    from_ms,
    piece_columns_from_hours,
    pieces_from_hours,
    pieces_from_points,
    price_text,
    to_ms,
)


class HistoryStore:
    """Append and read price history. Safe to share between threads (redis-py pools
    connections); several replicas may append to the same series (scripts are atomic and
    compaction is optimistic)."""

    def __init__(self, client: redis.Redis) -> None:
        self._r = client
        self._append = client.register_script(APPEND)
        self._compaction = Compaction(client)
        self._index = SeriesIndex(client)

    # ----- settings ---------------------------------------------------------------------------
    def settings(self) -> HistorySettings:
        """The settings in ``ga:hist:config``, defaults for fields never set."""
        raw = self._r.hgetall(keys.HISTORY_CONFIG)
        given = {f.name: f.type for f in fields(HistorySettings)}
        values = {k: (int(float(v)) if k == "raw_max_points" else float(v))
                  for k, v in raw.items() if k in given}
        return HistorySettings(**values)

    def configure(self, **changes: float) -> HistorySettings:
        """Change retention settings (fields of :class:`HistorySettings`); returns the result.
        Raises ``ValueError`` for an unknown field or a value out of range (nothing stored)."""
        unknown = set(changes) - {f.name for f in fields(HistorySettings)}
        if unknown:
            raise ValueError(f"unknown history setting(s) {sorted(unknown)}; allowed: "
                             f"{', '.join(f.name for f in fields(HistorySettings))}")
        merged = HistorySettings(**{**asdict(self.settings()), **changes}).validate()
        self._r.hset(keys.HISTORY_CONFIG, mapping={k: str(v) for k, v in asdict(merged).items()})
        return merged

    # ----- writing ----------------------------------------------------------------------------
    def append(self, observations: Iterable[PriceObservation],
               seen_until: Mapping[str, datetime] | None = None,
               chunk_series: int = 500, source: str = REAL) -> AppendResult:
        """Append observations (any order, any series), keeping only price changes.

        Args:
            observations: what a poller or an import read.
            seen_until: per series, the end of the span the source covered (e.g. a dump's
                newest timestamp), when later than the series' own newest observation.
            chunk_series: series per pipeline round trip.
            source: the history source written (``real``, ``replay:<market>``).

        Returns:
            An :class:`AppendResult`. Idempotent: the same observations again store nothing.

        Raises:
            ValueError: ``source`` is not a valid source (nothing stored).
        """
        source = check(source)
        by_series: dict[str, dict[int, str]] = defaultdict(dict)
        given = 0
        # A poll's observations share their times and many prices: convert each once
        # (converting is a third of an append's time in Python otherwise).
        ms_of: dict[datetime, int] = {}
        text_of: dict[float, str] = {}
        series, points = None, {}
        for obs in observations:
            if obs.series != series:  # a batch usually holds each series' observations together
                series = obs.series
                points = by_series[series]
            at, price = obs.observed_at, obs.price_usd_per_hour
            try:
                ms = ms_of[at]
            except KeyError:
                ms = ms_of[at] = to_ms(at)
            try:
                points[ms] = text_of[price]
            except KeyError:
                points[ms] = text_of[price] = price_text(price)
            given += 1
        for series in seen_until or {}:
            by_series.setdefault(series, {})
        total = AppendResult(given=given)
        settings = self.settings()
        names = sorted(by_series)
        if names and is_replay(source):
            self._r.sadd(keys.HISTORY_SOURCES, source)
        for start in range(0, len(names), chunk_series):
            chunk = names[start:start + chunk_series]
            total.add(self._append_chunk(chunk, by_series, seen_until or {}, settings, source))
        return total

    def _append_chunk(self, names: list[str], by_series: dict[str, dict[int, str]],
                      seen_until: Mapping[str, datetime], settings: HistorySettings,
                      source: str) -> AppendResult:
        result = AppendResult()
        retention = (f"{source},{int(settings.raw_days * DAY_MS)},"
                     f"{int(settings.compact_slack_h * HOUR_MS)},{settings.raw_max_points}")
        calls = [([keys.history_raw(series, source), keys.history_meta(series, source),
                   keys.history_hourly(series, source)],
                  [f"{to_ms(seen_until[series]) if series in seen_until else ''},{retention}",
                   ",".join([f"{ms}:{price}" for ms, price in sorted(by_series[series].items())])])
                 for series in names]
        replies = run_pipelined(self._r, self._append, calls)
        read, long_way, new = [], [], []
        for series, reply in zip(names, replies):
            lines = reply.split("\n")
            stored, unchanged, late, to_index, due = lines[0].split(",")
            result.stored += int(stored)
            result.unchanged += int(unchanged)
            result.late += int(late)
            if to_index == "1":
                new.append(series)
            if due == "2":
                long_way.append(series)
            elif due == "1":
                cutoff, meta, members, blob = lines[1:5]
                flat = meta.split("\t")
                parsed = SeriesMeta.parse(series, dict(zip(flat[::2], flat[1::2])), source)
                if parsed is not None:
                    read.append((parsed, int(cutoff), members.split(" ") if members else [],
                                 [blob] if blob else []))
        if new:
            self._index_new(new, source)
        if read:
            result.compacted += self._compaction.apply(read, settings, source)
        if long_way:
            result.compacted += self.compact(long_way, settings, source)
        return result

    def _index_new(self, names: list[str], source: str) -> None:
        """Index series the append script found unindexed, then mark them (meta ``ix``): two
        round trips, in this order, so a series is marked only once it is indexed."""
        with self._r.pipeline(transaction=False) as pipe:
            history_index.add_commands(pipe, names, source)
            pipe.execute()
        with self._r.pipeline(transaction=False) as pipe:
            for series in names:
                pipe.hset(keys.history_meta(series, source), "ix", "1")
            pipe.execute()

    def compact(self, names: list[str], settings: HistorySettings | None = None,
                source: str = REAL) -> int:
        """Roll the raw points of ``names`` (series of ``source``) that fell out of the raw
        window into hourly rollups, and drop rollups past retention
        (:meth:`~scheduler.store.history_compaction.Compaction.run`). Returns how many series
        were compacted (a series written meanwhile is skipped; the next append retries it)."""
        return self._compaction.run(names, settings or self.settings(), source)

    # ----- reading ----------------------------------------------------------------------------
    def sources(self) -> list[str]:
        """Every source with history: ``real`` first, then the replayed markets', sorted."""
        return [REAL] + sorted(self._r.smembers(keys.HISTORY_SOURCES))

    def series(self, source: str = REAL, *, types: Iterable[tuple[str, str]] | None = None,
               **wanted: str | None) -> list[str]:
        """The series with history in ``source``, sorted: every one, or those whose fields
        equal ``wanted`` (``provider``, ``region``, ``zone``, ``instance_type``, ``market``;
        case-insensitive; ``None`` values ignored) and, with ``types``, whose
        ``(provider, instance_type)`` is one of them (``[]``: none).

        Filtered, it reads only the matching series' names from the index
        (:mod:`scheduler.store.history_index`), building the index once over history stored
        before it existed; while another replica builds it, it scans every name instead.

        Raises:
            ValueError: a field other than those five.
        """
        given = {f: v for f, v in wanted.items() if v is not None}
        unknown = set(given) - set(history_index.FIELDS)
        if unknown:
            raise ValueError(f"unknown series field(s) {sorted(unknown)}; allowed: "
                             f"{', '.join(history_index.FIELDS)}")
        if not given and types is None:
            return sorted(self._r.smembers(keys.series_index(source)))
        if self._index.ready(source):
            return sorted(self._index.find(source, given, types))
        return _scan(self._r.smembers(keys.series_index(source)), given, types)

    def source_of(self, providers: Iterable[str]) -> dict[str, str]:
        """The history source each provider name's latest offers come from (written with the
        offers, expiring with them; ``real`` for a name without such a record)."""
        names = sorted(set(providers))
        with self._r.pipeline(transaction=False) as pipe:  # one GET per key: Cluster-safe
            for name in names:
                pipe.get(keys.offer_source(name))
            found = pipe.execute() if names else []
        return {n: s or REAL for n, s in zip(names, found)}

    def _sources_for(self, names: list[str], source: str | None) -> list[str]:
        """Per series of ``names``: ``source``, or when ``None`` the source of the series'
        provider's latest offers (the offer's own history)."""
        if source is not None:
            return [source] * len(names)
        by_provider = self.source_of(s.split("/", 1)[0] for s in names)
        return [by_provider[s.split("/", 1)[0]] for s in names]

    def metas(self, names: list[str], source: str | None = None) -> dict[str, SeriesMeta]:
        """Extent of each named series that has history in ``source`` (one pipelined round
        trip). ``source=None`` (default): each series in the source its provider's latest
        offers come from (:meth:`source_of`; ``real`` when none), i.e. an offer's own history,
        as plans and bills want it. Queries about real or replayed history name the source."""
        chosen = self._sources_for(names, source)
        with self._r.pipeline(transaction=False) as pipe:
            for series, src in zip(names, chosen):
                pipe.hgetall(keys.history_meta(series, src))
            replies = pipe.execute()
        out = {}
        for series, src, raw in zip(names, chosen, replies):
            meta = SeriesMeta.parse(series, raw, src)
            if meta is not None:
                out[series] = meta
        return out

    def live(self, names: list[str], source: str | None = None) -> set[str]:
        """The series among ``names`` that are in their provider's latest offers (their price
        is still in force now, even without a recent change). With ``source``, only when those
        offers come from that source: a replayed market listing ``aws`` offers keeps no real
        ``aws`` series alive."""
        by_provider = self.source_of(s.split("/", 1)[0] for s in names)
        with self._r.pipeline(transaction=False) as pipe:
            for series in names:
                pipe.hexists(keys.offers(series.split("/", 1)[0]), series)
            replies = pipe.execute()
        return {s for s, ok in zip(names, replies)
                if ok and (source is None or by_provider[s.split("/", 1)[0]] == source)}

    def pieces(self, meta: SeriesMeta, start_ms: int, end_ms: int) -> tuple[list[Piece], int]:
        """The series over ``[start_ms, end_ms]`` (already clipped to its extent) as pieces, and
        the number of price changes after ``start_ms``. Read from ``meta.source``.

        Raw tier: exact. Rolled-up tier: hour resolution (see
        :func:`scheduler.store.rollups.pieces_from_hours`).
        """
        out: list[Piece] = []
        changes = 0
        rolled = meta.rolled_until_ms
        if rolled is not None and start_ms < rolled:
            hours, carry = self._hours(meta, start_ms, min(end_ms, rolled))
            out += pieces_from_hours(hours, carry, start_ms, min(end_ms, rolled))
            changes += sum(h.changes for h in hours if h.hour_ms >= floor_hour(start_ms))
        raw_start = start_ms if rolled is None else max(start_ms, rolled)
        if raw_start <= end_ms and (rolled is None or end_ms >= rolled):
            points, carry = self._raw(meta, raw_start, end_ms)
            if out and carry is None:
                carry = out[-1].last
            out += pieces_from_points(points, carry, raw_start, end_ms)
            changes += sum(1 for ms, _ in points if ms > start_ms)
        return out, changes

    def piece_columns(self, meta: SeriesMeta, start_ms: int, end_ms: int) -> tuple[PieceColumns, int]:
        """:meth:`pieces` as :class:`~scheduler.store.rollups.PieceColumns` (the same pieces,
        in the same order) and the number of price changes after ``start_ms``: what long
        windows read, since a year of rolled-up hours decodes into arrays without an object
        per hour or piece."""
        parts: list[PieceColumns] = []
        changes = 0
        rolled = meta.rolled_until_ms
        if rolled is not None and start_ms < rolled:
            hours, carry = self._hour_columns(meta, start_ms, min(end_ms, rolled))
            parts.append(piece_columns_from_hours(hours, carry, start_ms, min(end_ms, rolled)))
            changes += int(hours.changes.sum())
        raw_start = start_ms if rolled is None else max(start_ms, rolled)
        if raw_start <= end_ms and (rolled is None or end_ms >= rolled):
            points, carry = self._raw(meta, raw_start, end_ms)
            if parts and len(parts[0]) and carry is None:
                carry = float(parts[0].last[-1])
            parts.append(PieceColumns.from_pieces(pieces_from_points(points, carry, raw_start, end_ms)))
            changes += sum(1 for ms, _ in points if ms > start_ms)
        return PieceColumns.concat(parts), changes

    def _raw(self, meta: SeriesMeta, raw_start: int, end_ms: int) -> tuple[list[tuple[int, float]], float | None]:
        """Raw points in ``[raw_start, end_ms]`` and the price in force before them (``None``
        when the stored extent says none)."""
        raw = keys.history_raw(meta.series, meta.source)
        with self._r.pipeline(transaction=False) as pipe:
            pipe.zrangebyscore(raw, raw_start, end_ms)
            pipe.zrevrangebyscore(raw, f"({raw_start}", "-inf", start=0, num=1)
            members, before = pipe.execute()
        carry = _point(before[0])[1] if before else (
            meta.rolled_price if meta.rolled_until_ms is not None else meta.base_price)
        return [_point(m) for m in members], carry

    def _hour_columns(self, meta: SeriesMeta, start_ms: int, end_ms: int) -> tuple[HourColumns, float | None]:
        """:meth:`_hours` as columns."""
        key = keys.history_hourly(meta.series, meta.source)
        with self._r.pipeline(transaction=False) as pipe:
            pipe.zrangebyscore(key, floor_day(start_ms), f"({end_ms}")
            pipe.zrevrangebyscore(key, f"({floor_day(start_ms)}", "-inf", start=0, num=1)
            blobs, before = pipe.execute()
        hours = decode_days(blobs)
        carry = decode_day(before[0])[-1].last if before else meta.base_price
        head = floor_hour(start_ms)
        early = hours.hour_ms < head
        if early.any():
            carry = float(hours.last[early][-1])
        return hours.take(~early & (hours.hour_ms < end_ms)), carry

    def _hours(self, meta: SeriesMeta, start_ms: int, end_ms: int) -> tuple[list[HourRollup], float | None]:
        """Rollup hours overlapping ``[start_ms, end_ms)`` and the price in force before them."""
        key = keys.history_hourly(meta.series, meta.source)
        with self._r.pipeline(transaction=False) as pipe:
            pipe.zrangebyscore(key, floor_day(start_ms), f"({end_ms}")
            pipe.zrevrangebyscore(key, f"({floor_day(start_ms)}", "-inf", start=0, num=1)
            blobs, before = pipe.execute()
        hours = [h for b in blobs for h in decode_day(b)]
        carry = decode_day(before[0])[-1].last if before else meta.base_price
        head = floor_hour(start_ms)
        for h in hours:
            if h.hour_ms < head:
                carry = h.last
        return [h for h in hours if h.hour_ms >= head and h.hour_ms < end_ms], carry

    def prices_at(self, names: list[str], at_ms: int,
                  source: str | None = None) -> dict[str, tuple[float, int]]:
        """Price in force at ``at_ms`` per series (of ``source``, see :meth:`metas`), with the
        ms since which it was in force.

        Series whose history starts after ``at_ms`` are left out (the caller checks the end of
        the extent). In the rolled-up range the resolution is one hour: the price at the end of
        the hour holding ``at_ms``.
        """
        metas = self.metas(names, source)
        with self._r.pipeline(transaction=False) as pipe:
            asked = []
            for series, meta in metas.items():
                if meta.first_ms > at_ms:
                    continue
                asked.append(meta)
                if meta.rolled_until_ms is not None and at_ms < meta.rolled_until_ms:
                    # two day blobs: the day of at_ms may hold only hours after it
                    pipe.zrevrangebyscore(keys.history_hourly(series, meta.source), at_ms, "-inf",
                                          start=0, num=2)
                else:
                    pipe.zrevrangebyscore(keys.history_raw(series, meta.source), at_ms, "-inf",
                                          start=0, num=1)
            replies = pipe.execute()
        out: dict[str, tuple[float, int]] = {}
        for meta, reply in zip(asked, replies):
            if meta.rolled_until_ms is not None and at_ms < meta.rolled_until_ms:
                hours = [h for blob in reversed(reply) for h in decode_day(blob) if h.hour_ms <= at_ms]
                if hours:
                    out[meta.series] = (hours[-1].last, hours[-1].hour_ms)
                elif meta.base_price is not None:
                    out[meta.series] = (meta.base_price, meta.first_ms)
            elif reply:
                ms, price = _point(reply[0])
                out[meta.series] = (price, ms)
            elif meta.rolled_price is not None:
                out[meta.series] = (meta.rolled_price, meta.rolled_until_ms or meta.first_ms)
        return out

    def raw_points(self, series: str, start_ms: int | None = None,
                   end_ms: int | None = None, source: str = REAL) -> list[tuple[int, float]]:
        """Raw-tier price changes ``(ms, price)`` of ``series`` in ``source`` within
        ``[start_ms, end_ms]``, ascending."""
        members = self._r.zrangebyscore(keys.history_raw(series, source),
                                        "-inf" if start_ms is None else start_ms,
                                        "+inf" if end_ms is None else end_ms)
        return [_point(m) for m in members]

    # ----- hardware of instance types ---------------------------------------------------------
    def remember_hardware(self, entries: Mapping[str, Mapping[str, object]]) -> int:
        """Store hardware per ``"provider/instance_type"`` (``gpu_model``, ``gpu_count``,
        ``vram_gib``, ``vcpus``, ``memory_gib``, ``source``); returns how many were given."""
        if entries:
            self._r.hset(keys.HISTORY_HARDWARE,
                         mapping={k: json.dumps(dict(v), sort_keys=True) for k, v in entries.items()})
        return len(entries)

    def hardware(self) -> dict[str, dict[str, object]]:
        """Every known ``"provider/instance_type"`` → hardware mapping."""
        return {k: json.loads(v) for k, v in self._r.hgetall(keys.HISTORY_HARDWARE).items()}


def _scan(names: Iterable[str], wanted: Mapping[str, str],
          types: Iterable[tuple[str, str]] | None) -> list[str]:
    """The names among ``names`` matching as :meth:`HistoryStore.series` says, by reading
    each (what the index saves a query from)."""
    want = {f: v.lower() for f, v in wanted.items()}
    pairs = None if types is None else {(p.lower(), t.lower()) for p, t in types}
    out = []
    for series in names:
        found = history_index.fields_of(series)
        if found is None or any(found[f] != v for f, v in want.items()):
            continue
        if pairs is not None and (found["provider"], found["instance_type"]) not in pairs:
            continue
        out.append(series)
    return sorted(out)


def _point(member: str) -> tuple[int, float]:
    ms, price = member.split(":", 1)
    return int(ms), float(price)


__all__ = ["AppendResult", "HistorySettings", "HistoryStore", "SeriesMeta", "from_ms", "to_ms"]
