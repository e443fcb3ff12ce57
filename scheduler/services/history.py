"""Price-history queries behind ``schedctl history``, ``schedctl offers --at`` and their API
routes: which series match, their time-weighted statistics per series or per group, the
market at a past moment, and points to plot.

Sources: real history and each replayed market's are kept apart
(:mod:`scheduler.store.history_sources`). Every query takes a ``source`` selector (``auto``,
``real``, ``replay``, ``replay:<market>``, ``all``); ``auto`` answers from real history when
it has data for the question, else from the replayed markets' (so a demo shows its replayed
prices). Every row says its ``source``; no statistic pools two sources.

Data: the history store (:mod:`scheduler.store.history`); GPU model and VRAM of a series come
from the ``provider/instance_type`` hardware map in Redis, kept up to date from the latest
offers on every query (and from catalogs at import), with the AWS table of
:mod:`providers.catalog.gpus` as a last resort. Statistics are defined in
:mod:`scheduler.services.history_stats`.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from core.models import Market, OfferKey, utcnow
from providers.catalog.gpus import AWS_GPU_TYPES
from scheduler.services.history_stats import Accumulator, split_by_hour_of_day
from scheduler.store import Store
from scheduler.store import history_sources as sources
from scheduler.store.history import HistoryStore, SeriesMeta, from_ms, to_ms
from scheduler.store.rollups import Piece

GROUPINGS = ("series", "zone", "region", "provider", "hour-of-day")
_GROUP_FIELDS: dict[str, tuple[str, ...]] = {
    "series": ("provider", "region", "zone", "instance_type", "market"),
    "zone": ("provider", "region", "zone"), "region": ("provider", "region"),
    "provider": ("provider",), "hour-of-day": ("hour",),
}
_RELATIVE_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*(m|min|h|d|w|y)\Z")
_UNIT_S = {"m": 60, "min": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}
# Times a query may name: history's millisecond timestamps start at the epoch, and the upper
# bound leaves room for the arithmetic callers do past it (datetime stops at 9999-12-31).
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9000, 1, 1, tzinfo=UTC)


class QueryError(ValueError):
    """A bad query parameter; ``field`` names it, the message says what is allowed."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


def parse_when(text: str | None, field: str, now: datetime | None = None) -> datetime | None:
    """A time as the CLI and API accept it.

    Accepts ``None``/``""`` (→ ``None``), ``now``, a duration ago (``30d``, ``12h``, ``90m``,
    ``2w``, ``1y``), an ISO-8601 date (``2020-03-01``, midnight UTC) or date-time (with a
    timezone, or UTC when naive). Returns an aware UTC datetime between :data:`EARLIEST`
    and :data:`LATEST`.

    Raises:
        QueryError: naming ``field`` and the accepted forms, or the range when the time is
            outside it (``300000y`` ago, year 1 with a positive offset, a 16 KiB number).
    """
    if text is None or not str(text).strip():
        return None
    text = str(text).strip()
    now = now or utcnow()
    if text == "now":
        return now
    shown = text if len(text) <= 40 else text[:40] + "…"
    out_of_range = QueryError(field, f"got {shown!r}: out of range; times from "
                                     f"{EARLIEST:%Y-%m-%d} to {LATEST:%Y-%m-%d} UTC")
    m = _RELATIVE_RE.match(text)
    if m:
        seconds = float(m.group(1)) * _UNIT_S[m.group(2)]
        if not seconds <= (now - EARLIEST).total_seconds():  # also inf from a huge number
            raise out_of_range
        return now - timedelta(seconds=seconds)
    try:
        at = datetime.fromisoformat(text.replace("Z", "+00:00"))
        at = at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
    except OverflowError:  # year 1 at +01:00, year 9999 at -01:00
        raise out_of_range from None
    except ValueError:
        raise QueryError(field, f"got {shown!r}; use a duration ago (30d, 12h, 90m, 2w, 1y), "
                                "an ISO date (2020-03-01) or date-time (2020-03-01T12:00Z)") from None
    if not EARLIEST <= at <= LATEST:
        raise out_of_range
    return at


def hardware_map(store: Store) -> dict[str, dict[str, Any]]:
    """``"provider/instance_type"`` → hardware (``gpu_model``, ``gpu_count``, ``vram_gib``,
    ``vcpus``, ``memory_gib``): the Redis map, refreshed from the latest offers (written back
    when they add or change an entry), then the AWS table for AWS types still unknown."""
    history = store.offers.history
    known = history.hardware()
    fresh: dict[str, dict[str, Any]] = {}
    for o in store.offers.all_offers():
        hw = {"gpu_model": o.gpu_model, "gpu_count": o.gpu_count, "vram_gib": o.vram_gib,
              "vcpus": o.vcpus, "memory_gib": o.memory_gib, "source": "offers"}
        name = f"{o.provider}/{o.instance_type}"
        if known.get(name) != hw and name not in fresh:
            fresh[name] = hw
    if fresh:
        history.remember_hardware(fresh)
        known.update(fresh)
    return known


def _hardware_of(hw: dict[str, dict[str, Any]], key: OfferKey) -> dict[str, Any] | None:
    found = hw.get(f"{key.provider}/{key.instance_type}")
    if found is None and key.provider == "aws":
        found = AWS_GPU_TYPES.get(key.instance_type)
    return found


def _types_with_gpu(hw: dict[str, dict[str, Any]], gpu: str) -> list[tuple[str, str]]:
    """``(provider, instance_type)`` pairs whose GPU model is ``gpu`` (case-insensitive), as
    :func:`_hardware_of` resolves them (the map, then the AWS table), for the series index."""
    found = [tuple(name.split("/", 1)) for name, info in hw.items()
             if "/" in name and str(info.get("gpu_model", "")).lower() == gpu.lower()]
    found += [("aws", t) for t, info in AWS_GPU_TYPES.items()
              if f"aws/{t}" not in hw and str(info["gpu_model"]).lower() == gpu.lower()]
    return found


def select_series(store: Store, *, gpu: str | None = None, provider: str | None = None,
                  region: str | None = None, zone: str | None = None,
                  instance_type: str | None = None, market: str | None = None,
                  min_vram_gib: float = 0, source: str = sources.REAL
                  ) -> list[tuple[str, OfferKey, dict[str, Any] | None]]:
    """Series with history in ``source`` matching every filter given (case-insensitive
    equality; ``gpu`` against the series' GPU model), as ``(series, key, hardware or None)``,
    sorted."""
    if market not in (None, "spot", "on-demand"):
        raise QueryError("market", f"got {market!r}; allowed: spot, on-demand")
    hw = hardware_map(store)
    wanted = {"provider": provider, "region": region, "zone": zone,
              "instance_type": instance_type, "market": market}
    wanted = {k: v.lower() for k, v in wanted.items() if v is not None}
    out = []
    types = None if not gpu else _types_with_gpu(hw, gpu)
    for series in store.offers.history.series(source, types=types, **wanted):
        parts = series.split("/")
        if len(parts) != 5:
            continue
        values = dict(zip(("provider", "region", "zone", "instance_type", "market"), parts))
        if any(values[k].lower() != v for k, v in wanted.items()):
            continue  # the index matched already; a scan (index being built) did not
        try:
            key = OfferKey.from_series(series)
        except ValueError:
            continue
        info = _hardware_of(hw, key)
        if gpu and (info is None or str(info["gpu_model"]).lower() != gpu.lower()):
            continue
        if min_vram_gib and (info is None or float(info["vram_gib"]) < min_vram_gib):
            continue
        out.append((series, key, info))
    return out


def _selector(source: str | None) -> str:
    try:
        return sources.parse_selector(source)
    except ValueError as exc:
        raise QueryError("source", str(exc)) from None


def _candidates(store: Store, selector: str) -> list[str]:
    """The sources a selector may answer from, real first (``auto``: every source)."""
    known = set(store.offers.history.sources())
    return sources.matching("all" if selector == "auto" else selector, known)


def _chosen(selector: str, answered: dict[str, bool]) -> list[str]:
    """Sources kept: all candidates, or for ``auto`` real alone when it answered, else the
    replayed markets that did (real when none did, so the answer says what real lacks)."""
    if selector != "auto":
        return list(answered)
    if answered.get(sources.REAL):
        return [sources.REAL]
    return [s for s, ok in answered.items() if ok and s != sources.REAL] or [sources.REAL]


def _window(meta: SeriesMeta, start_ms: int, end_ms: int, live: bool) -> tuple[int, int] | None:
    """The part of ``[start_ms, end_ms]`` the series covers; a live series covers up to now."""
    extent_end = end_ms if live else min(end_ms, meta.last_seen_ms)
    lo, hi = max(start_ms, meta.first_ms), extent_end
    return (lo, hi) if lo <= hi else None


def _spans(store: Store, source: str, start_ms: int, end_ms: int, filters: dict[str, Any]):
    """Matching series of ``source`` with the part of the window each covers (``None``:
    outside it), as ``(series, key, hardware, meta, span)``."""
    history = store.offers.history
    matched = select_series(store, source=source, **filters)
    metas = history.metas([s for s, _, _ in matched], source)
    live = history.live(list(metas), source)
    return [(series, key, info, metas[series],
             _window(metas[series], start_ms, end_ms, series in live))
            for series, key, info in matched if series in metas]


def query(store: Store, *, since: str | None = "30d", until: str | None = None,
          by: str = "series", per_gpu: bool = False, now: datetime | None = None,
          source: str | None = "auto", **filters: Any) -> dict[str, Any]:
    """Statistics of the matching series over ``[since, until]``.

    Args:
        since, until: see :func:`parse_when` (defaults: 30 days ago, now).
        by: one of :data:`GROUPINGS`; groups pool their series' time-weighted distributions
            (never across sources: the source is part of every group).
        per_gpu: prices per GPU-hour (divided by each series' GPU count; series of unknown
            hardware are left out).
        source: a selector of :mod:`scheduler.store.history_sources` (default ``auto``:
            real history when any matching real series covers part of the window, else the
            replayed markets that do).
        filters: ``gpu``, ``provider``, ``region``, ``zone``, ``instance_type``, ``market``.

    Returns:
        ``{"since", "until", "by", "per_gpu", "source": [sources answered from], "rows":
        [...], "matched", "outside": {"count", "first", "last"}}``; each row holds its
        ``source``, its group fields (plus hardware for ``series``) and the statistics of
        :class:`~scheduler.services.history_stats.Accumulator`.

    Raises:
        QueryError: a bad ``since``/``until``/``by``/``market``/``source`` (names the field).
    """
    if by not in GROUPINGS:
        raise QueryError("by", f"got {by!r}; allowed: {', '.join(GROUPINGS)}")
    selector = _selector(source)
    start, end = _bounds(since, until, now or utcnow())
    found = {src: _spans(store, src, to_ms(start), to_ms(end), filters)
             for src in _candidates(store, selector)}
    chosen = _chosen(selector, {src: any(r[4] for r in rows) for src, rows in found.items()})
    history = store.offers.history
    groups: dict[tuple, Accumulator] = defaultdict(Accumulator)
    labels: dict[tuple, dict[str, Any]] = {}
    outside: list[SeriesMeta] = []
    for src in chosen:
        for series, key, info, meta, span in found.get(src, []):
            if not span:
                outside.append(meta)
                continue
            if per_gpu and not (info and info.get("gpu_count")):
                continue
            divisor = float(info["gpu_count"]) if per_gpu else 1.0
            if by == "hour-of-day":
                pieces, changes = history.pieces(meta, *span)
                _accumulate_by_hour(src, pieces, changes, divisor, groups, labels)
            else:
                _accumulate(by, src, key, info, meta, span, divisor, groups, labels, history)
    rows = [{**labels[g], **stats, "source": g[0]} for g, acc in groups.items()
            if (stats := acc.result())]  # source last: columns of CSV output stay where they were
    rows.sort(key=lambda r: (r.get("hour", 0), r["p50"], r.get("series_key", ""), r["source"]))
    return {
        "since": start.isoformat(), "until": end.isoformat(), "by": by, "per_gpu": per_gpu,
        "source": chosen, "matched": sum(len(found.get(src, [])) for src in chosen),
        "rows": rows,
        "outside": _outside(outside),
    }


def _bounds(since: str | None, until: str | None, now: datetime) -> tuple[datetime, datetime]:
    """``[since, until]`` as aware datetimes (defaults: the epoch, ``now``); QueryError when
    ``until`` is before ``since``."""
    start = parse_when(since, "since", now) or datetime(1970, 1, 1, tzinfo=UTC)
    end = parse_when(until, "until", now) or now
    if end < start:
        raise QueryError("until", "must not be before since")
    return start, end


def _outside(metas: list[SeriesMeta]) -> dict[str, Any]:
    """How many matching series have no point in the window, and the span they cover."""
    if not metas:
        return {"count": 0, "first": None, "last": None}
    return {"count": len(metas), "first": from_ms(min(m.first_ms for m in metas)).isoformat(),
            "last": from_ms(max(m.last_seen_ms for m in metas)).isoformat()}


def _accumulate(by: str, source: str, key: OfferKey, info: dict[str, Any] | None,
                meta: SeriesMeta, span: tuple[int, int], divisor: float,
                groups: dict[tuple, Accumulator], labels: dict[tuple, dict[str, Any]],
                history: HistoryStore) -> None:
    values = {"provider": key.provider, "region": key.region, "zone": key.zone,
              "instance_type": key.instance_type, "market": key.market.value}
    group = (source,) + tuple(values[f] for f in _GROUP_FIELDS[by])
    label = dict(zip(_GROUP_FIELDS[by], group[1:]))
    if by == "series":
        label["series_key"] = key.series()
        label.update({k: (info or {}).get(k) for k in ("gpu_model", "gpu_count", "vram_gib")})
    labels[group] = label
    # Both paths add the same values in the same order; columns pay off once rolled-up days
    # are read (hundreds of hours), objects are cheaper for a few raw points.
    if meta.rolled_until_ms is not None and span[0] < meta.rolled_until_ms:
        groups[group].add_columns(*history.piece_columns(meta, *span), divisor)
    else:
        groups[group].add(*history.pieces(meta, *span), divisor)


def _accumulate_by_hour(source: str, pieces: list[Piece], changes: int, divisor: float,
                        groups: dict[tuple, Accumulator], labels: dict[tuple, dict[str, Any]]) -> None:
    changes_by_hour = _changes_by_hour(pieces)
    for hour, parts in split_by_hour_of_day(pieces).items():
        if not parts:
            continue
        acc = groups[(source, hour)]
        labels[(source, hour)] = {"hour": hour}
        acc.series += 1
        acc.changes += changes_by_hour.get(hour, 0)
        for piece, dur in parts:
            acc.add_piece(piece, divisor, dur)


def _changes_by_hour(pieces: list[Piece]) -> dict[int, int]:
    """Changes per UTC hour of day, approximated by piece starts after the first."""
    out: dict[int, int] = defaultdict(int)
    for prev, p in zip(pieces, pieces[1:]):
        if p.lo != prev.last or p.hi != p.lo:
            out[(p.start_ms % 86_400_000) // 3_600_000] += 1
    return out


def points(store: Store, series: str, since: str | None = "30d", until: str | None = None,
           now: datetime | None = None, source: str | None = "auto") -> dict[str, Any]:
    """The series' step function over the window for plotting: ``{"series", "source",
    "points": [[iso time, price], ...]}`` with one point per piece start plus the window end
    (rolled-up hours give their mean). ``source``: a selector naming one source, or ``auto``
    (real when it covers the window, else the first replayed market that does). Raises
    ``QueryError`` for a bad time or source, an unknown series, or a selector naming several
    sources."""
    selector = _selector(source)
    now = now or utcnow()
    start = parse_when(since, "since", now) or datetime(1970, 1, 1, tzinfo=UTC)
    end = parse_when(until, "until", now) or now
    history = store.offers.history
    spans = {}
    for src in _candidates(store, selector):
        meta = history.metas([series], src).get(series)
        if meta is not None:
            spans[src] = (meta, _window(meta, to_ms(start), to_ms(end),
                                        series in history.live([series], src)))
    if not spans:
        raise QueryError("series", f"no history for {series!r}")
    chosen = _chosen(selector, {src: bool(span) for src, (_, span) in spans.items()})
    if len(chosen) > 1 and selector != "auto":
        raise QueryError("source", f"{series!r} has history in {', '.join(chosen)}: name one")
    src = chosen[0] if chosen[0] in spans else next(iter(spans))
    meta, span = spans[src]
    pieces = history.pieces(meta, *span)[0] if span else []
    out = [[from_ms(p.start_ms).isoformat(), p.mean] for p in pieces]
    if pieces:
        out.append([from_ms(pieces[-1].end_ms).isoformat(), pieces[-1].last])
    return {"series": series, "source": src, "points": out}


def offers_at(store: Store, at: str, *, gpu: str | None = None, provider: str | None = None,
              market: str | None = None, min_vram_gib: float = 0,
              now: datetime | None = None, source: str | None = "auto") -> list[dict[str, Any]]:
    """The market as it was at ``at`` (see :func:`parse_when`), from history: rows shaped
    like :func:`scheduler.services.offers.table` (spot and on-demand side by side per
    instance type and zone) plus ``source``; ``observed_at`` and ``price_since`` = since when
    that price was in force (``price_age_s``: seconds from then to ``at``), risk unknown
    (``None``). Series whose history does not cover
    ``at`` are left out. ``source``: a selector (default ``auto``: real history when it covers
    ``at``, else the replayed markets that do). Raises ``QueryError`` (names the field)."""
    selector = _selector(source)
    when = parse_when(at, "at", now or utcnow())
    assert when is not None
    at_ms = to_ms(when)
    history = store.offers.history
    found: dict[str, list[tuple[str, OfferKey, dict[str, Any] | None]]] = {}
    prices: dict[str, dict[str, tuple[float, int]]] = {}
    for src in _candidates(store, selector):
        found[src] = select_series(store, gpu=gpu, provider=provider, min_vram_gib=min_vram_gib,
                                   source=src)
        names = [s for s, _, _ in found[src]]
        metas = history.metas(names, src)
        live = history.live(names, src)
        covered = [s for s in names if s in metas and (s in live or metas[s].last_seen_ms >= at_ms)]
        prices[src] = history.prices_at(covered, at_ms, src)
    rows: dict[tuple[str, str, str, str, str], dict[str, Any]] = {}
    for src in _chosen(selector, {src: bool(p) for src, p in prices.items()}):
        for series, key, info in found.get(src, []):
            if series not in prices[src]:
                continue
            price, since_ms = prices[src][series]
            _offer_row(rows, src, key, info or {}, price, from_ms(since_ms).isoformat())
    out = list(rows.values())
    for r in out:
        r["price_age_s"] = max(0.0, (when - datetime.fromisoformat(r["price_since"])).total_seconds())
    if market in ("spot", "on-demand"):
        field = "spot_usd_per_hour" if market == "spot" else "on_demand_usd_per_hour"
        out = [r for r in out if r[field] is not None]
    cheapest: Callable[[dict[str, Any]], float] = lambda r: min(
        p for p in (r["spot_usd_per_hour"], r["on_demand_usd_per_hour"], float("inf")) if p is not None)
    out.sort(key=lambda r: (cheapest(r), r["zone"], r["instance_type"], r["source"]))
    return out


def _offer_row(rows: dict[tuple[str, str, str, str, str], dict[str, Any]], source: str,
               key: OfferKey, info: dict[str, Any], price: float, since: str) -> None:
    row = rows.setdefault((source, key.provider, key.region, key.zone, key.instance_type), {
        "gpu_model": info.get("gpu_model", "?"), "gpu_count": info.get("gpu_count", 0),
        "vram_gib": info.get("vram_gib", 0), "provider": key.provider, "region": key.region,
        "zone": key.zone, "instance_type": key.instance_type,
        "on_demand_usd_per_hour": None, "spot_usd_per_hour": None,
        "interruption_risk": None, "observed_at": since, "price_since": since,
        "source": source})
    if key.market is Market.SPOT:
        row["spot_usd_per_hour"] = price
        row["price_since"] = since  # the spot price's start, as the live table shows it
    else:
        row["on_demand_usd_per_hour"] = price
