"""Pure arithmetic of the price-history tiers: hourly rollups of a price step function and
their compact text form. No Redis here; :mod:`scheduler.store.history` does the I/O.

A series' price is a **step function**: each stored point ``(ms, price)`` is a price change
that stays in force until the next one. The raw tier keeps the points; the rollup tier keeps,
for every UTC hour in which the price changed, the time-weighted ``min/mean/max`` over the
part of the hour the series covers, the ``last`` price (in force at the hour's end) and the
number of ``changes``. Hours without a change are not stored: their price is the previous
stored hour's ``last``.

A day of rollups is one string (a member of the series' rollup zset, scored by the day's
start in ms)::

    "{day}|{hh}:{min},{mean},{max},{last},{changes};{hh}:..."

``day`` is days since the epoch (UTC), ``hh`` the hour 0-23. About 35 bytes per changed hour.

The value types of the store (settings, append counts, a series' extent) live here too.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import UTC, datetime

import numpy as np

from scheduler.store.history_sources import REAL

HOUR_MS = 3_600_000
DAY_MS = 86_400_000


def floor_hour(ms: int) -> int:
    return ms - ms % HOUR_MS


def floor_day(ms: int) -> int:
    return ms - ms % DAY_MS


def price_text(price: float) -> str:
    """Canonical text of a price (shortest round-trip form): ``"1.140900"`` → ``"1.1409"``.
    Equal floats give equal text, so Lua can compare prices as strings."""
    return repr(float(price))


@dataclass(frozen=True)
class HourRollup:
    """One hour of one series. Prices are USD/hour; ``hour_ms`` is the hour's start (UTC ms)."""

    hour_ms: int
    min: float
    mean: float
    max: float
    last: float
    changes: int


@dataclass(frozen=True)
class Piece:
    """A stretch ``[start_ms, end_ms)`` of a series: constant (``lo == mean == hi``) from the
    raw tier, or one rolled-up hour (``lo``/``mean``/``hi`` of the hour, ``last`` at its end)."""

    start_ms: int
    end_ms: int
    lo: float
    mean: float
    hi: float
    last: float

    @classmethod
    def constant(cls, start_ms: int, end_ms: int, price: float) -> Piece:
        return cls(start_ms, end_ms, price, price, price, price)


def rollup_hours(points: Sequence[tuple[int, float]], price_before: float | None,
                 cutoff_ms: int) -> list[HourRollup]:
    """Hourly rollups of the step function given by ``points`` up to ``cutoff_ms``.

    Args:
        points: ``(ms, price)`` changes, ascending, all ``< cutoff_ms``.
        price_before: the price in force just before ``points[0]`` (``None``: the series starts
            at ``points[0]``, which is then not counted as a change).
        cutoff_ms: an hour boundary; every hour touched by ``points`` ends at or before it.

    Returns:
        One :class:`HourRollup` per hour holding at least one point, ascending. Each covers the
        hour from its start (or from the series' first point) to its end.

    Raises:
        ValueError: ``cutoff_ms`` is not an hour boundary or a point is not before it.
    """
    if cutoff_ms % HOUR_MS:
        raise ValueError(f"cutoff_ms {cutoff_ms} is not an hour boundary")
    out: list[HourRollup] = []
    carry = price_before
    i = 0
    while i < len(points):
        hour = floor_hour(points[i][0])
        if points[i][0] >= cutoff_ms:
            raise ValueError(f"point at {points[i][0]} is not before cutoff {cutoff_ms}")
        j = i
        while j < len(points) and floor_hour(points[j][0]) == hour:
            j += 1
        out.append(_one_hour(hour, points[i:j], carry))
        carry = points[j - 1][1]
        i = j
    return out


def _one_hour(hour: int, points: Sequence[tuple[int, float]], carry: float | None) -> HourRollup:
    end = hour + HOUR_MS
    segments: list[tuple[float, int]] = []  # (price, duration ms)
    if carry is not None:
        segments.append((carry, points[0][0] - hour))
    for k, (ms, price) in enumerate(points):
        nxt = points[k + 1][0] if k + 1 < len(points) else end
        segments.append((price, nxt - ms))
    covered = sum(d for _, d in segments)
    prices = [p for p, _ in segments]
    mean = (sum(p * d for p, d in segments) / covered) if covered else points[-1][1]
    changes = len(points) - (1 if carry is None else 0)
    return HourRollup(hour, min(prices), mean, max(prices), points[-1][1], changes)


def encode_day(day_ms: int, hours: Iterable[HourRollup]) -> str:
    """The day blob (see the module docstring) of ``hours``, which all lie in that day."""
    parts = []
    for h in hours:
        if floor_day(h.hour_ms) != day_ms:
            raise ValueError(f"hour {h.hour_ms} is not in day {day_ms}")
        parts.append(f"{(h.hour_ms - day_ms) // HOUR_MS}:{price_text(h.min)},{_mean_text(h.mean)},"
                     f"{price_text(h.max)},{price_text(h.last)},{h.changes}")
    return f"{day_ms // DAY_MS}|" + ";".join(parts)


def rollup_day_texts(points: Sequence[tuple[int, float]], price_before: float | None,
                     cutoff_ms: int) -> list[tuple[int, list[str], float]]:
    """:func:`rollup_hours` then :func:`encode_day` per day, in one pass without an object per
    hour (what compaction runs on every append that ages a day out of the raw window): the
    same arithmetic, the same text.

    Returns:
        Per UTC day holding a point, ascending: ``(day_ms, parts, last)``, where
        ``f"{day_ms // DAY_MS}|" + ";".join(parts)`` is the day's blob and ``last`` the price
        in force at the end of its last changed hour.

    Raises:
        ValueError: as :func:`rollup_hours`.
    """
    if cutoff_ms % HOUR_MS:
        raise ValueError(f"cutoff_ms {cutoff_ms} is not an hour boundary")
    out: list[tuple[int, list[str], float]] = []
    parts: list[str] = []
    day = None
    carry = price_before
    n = len(points)
    i = 0
    while i < n:
        ms, price = points[i]
        if ms >= cutoff_ms:
            raise ValueError(f"point at {ms} is not before cutoff {cutoff_ms}")
        hour = ms - ms % HOUR_MS
        end = hour + HOUR_MS
        # Segments in the order _one_hour sums them: the carried price, then each point's.
        if carry is None:
            total, lo, hi, covered, changes = 0, price, price, end - ms, -1
        else:
            total = 0 + carry * (ms - hour)
            lo = hi = carry
            covered, changes = HOUR_MS, 0
        while True:
            nxt_ms = points[i + 1][0] if i + 1 < n else end
            if nxt_ms >= end:
                nxt_ms = end
            total += price * (nxt_ms - ms)
            if price < lo:
                lo = price
            elif price > hi:
                hi = price
            changes += 1
            i += 1
            if nxt_ms == end:
                break
            ms, price = points[i]
        mean = total / covered if covered else price
        day_ms = hour - hour % DAY_MS
        if day_ms != day:
            if day is not None:
                out.append((day, parts, carry))
            day, parts = day_ms, []
        parts.append(f"{(hour - day_ms) // HOUR_MS}:{repr(float(lo))},{_mean_text(mean)},"
                     f"{repr(float(hi))},{repr(float(price))},{changes}")
        carry = price
    if day is not None:
        out.append((day, parts, carry))
    return out


def _mean_text(mean: float) -> str:
    text = f"{mean:.7f}".rstrip("0")
    return text + "0" if text.endswith(".") else text


def decode_day(blob: str) -> list[HourRollup]:
    """Inverse of :func:`encode_day`. Raises ``ValueError`` on a malformed blob."""
    try:
        day_text, _, body = blob.partition("|")
        day_ms = int(day_text) * DAY_MS
        out = []
        for part in filter(None, body.split(";")):
            hh, _, values = part.partition(":")
            lo, mean, hi, last, changes = values.split(",")
            out.append(HourRollup(day_ms + int(hh) * HOUR_MS, float(lo), float(mean), float(hi),
                                  float(last), int(changes)))
        return out
    except ValueError:
        raise ValueError(f"malformed rollup day blob {blob[:60]!r}") from None


def group_by_day(hours: Iterable[HourRollup]) -> dict[int, list[HourRollup]]:
    """Hours grouped by the start (ms) of their UTC day, order kept."""
    days: dict[int, list[HourRollup]] = {}
    for h in hours:
        days.setdefault(floor_day(h.hour_ms), []).append(h)
    return days


def pieces_from_hours(hours: Sequence[HourRollup], carry: float | None, start_ms: int,
                      end_ms: int) -> list[Piece]:
    """The rolled-up stretch ``[start_ms, end_ms)`` as pieces.

    Args:
        hours: rollups ascending; those outside the stretch are ignored.
        carry: price in force at ``start_ms``'s hour start (``None``: the series starts in the
            first rollup hour, at or after ``start_ms``).
        start_ms, end_ms: the stretch, ms. A rollup hour cut by either edge keeps its
            min/mean/max over the shorter overlap (hour resolution).
    """
    out: list[Piece] = []
    t = start_ms
    for h in hours:
        h_end = h.hour_ms + HOUR_MS
        if h_end <= start_ms or h.hour_ms >= end_ms:
            if h_end <= start_ms:
                carry = h.last
            continue
        if carry is not None and h.hour_ms > t:
            out.append(Piece.constant(t, h.hour_ms, carry))
        lo = max(h.hour_ms, start_ms)
        hi = min(h_end, end_ms)
        out.append(Piece(lo, hi, h.min, h.mean, h.max, h.last))
        carry = h.last
        t = hi
    if carry is not None and t < end_ms:
        out.append(Piece.constant(t, end_ms, carry))
    return out


def pieces_from_points(points: Sequence[tuple[int, float]], carry: float | None, start_ms: int,
                       end_ms: int) -> list[Piece]:
    """The raw stretch ``[start_ms, end_ms]`` as constant pieces.

    ``points`` are the changes in ``[start_ms, end_ms]`` ascending; ``carry`` the price in force
    at ``start_ms`` (``None``: the series starts at ``points[0]``). A change exactly at
    ``end_ms`` gives a zero-length last piece (it sets ``last`` and counts for min/max, not for
    quantiles); so does a single snapshot.
    """
    out: list[Piece] = []
    t, price = start_ms, carry
    for ms, p in points:
        if price is not None and ms > t:
            out.append(Piece.constant(t, ms, price))
        t, price = max(t, ms), p
    if price is not None and (t < end_ms or not out or out[-1].last != price):
        out.append(Piece.constant(t, max(t, end_ms), price))
    return out


def to_ms(at: datetime) -> int:
    """Aware datetime → UTC epoch milliseconds."""
    return int(round(at.timestamp() * 1000))


def from_ms(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


@dataclass(frozen=True)
class HistorySettings:
    """Retention of the history tiers.

    - **raw_days**: days of raw price changes kept behind each series' newest observation
      (default 30).
    - **rollup_days**: days of hourly rollups kept (default 730).
    - **raw_max_points**: raw changes kept per series at most, whatever their age (default
      20,000): bounds memory for a series whose price changes every few seconds.
    - **compact_slack_h**: rollup runs once the raw tier is this many hours past its window
      (default 24), so compaction is amortized over a day of data.
    """

    raw_days: float = 30.0
    rollup_days: float = 730.0
    raw_max_points: int = 20_000
    compact_slack_h: float = 24.0

    def validate(self) -> HistorySettings:
        """Raises ``ValueError`` naming the field when a value is out of range."""
        if not 0 < self.raw_days <= 3650:
            raise ValueError(f"raw_days: got {self.raw_days}; allowed 0 < raw_days <= 3650")
        if not self.raw_days <= self.rollup_days <= 36500:
            raise ValueError(f"rollup_days: got {self.rollup_days}; allowed raw_days..36500")
        if not 10 <= self.raw_max_points <= 10_000_000:
            raise ValueError(f"raw_max_points: got {self.raw_max_points}; allowed 10..10,000,000")
        if not 0 <= self.compact_slack_h <= 24 * 30:
            raise ValueError(f"compact_slack_h: got {self.compact_slack_h}; allowed 0..720")
        return self


@dataclass
class AppendResult:
    """Counts of one :meth:`HistoryStore.append`: observations given, price changes stored,
    observations that repeated the price in force (duplicates included), late ones (older
    than the rolled-up frontier, dropped), and series compacted into rollups."""

    given: int = 0
    stored: int = 0
    unchanged: int = 0
    late: int = 0
    compacted: int = 0

    def add(self, other: AppendResult) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


@dataclass(frozen=True)
class SeriesMeta:
    """Extent of one series: ``first_ms``..``last_seen_ms``; raw tier from ``rolled_until_ms``.
    ``source`` is the namespace it was read from (``real`` or ``replay:<market>``, see
    :mod:`scheduler.store.history_sources`)."""

    series: str
    first_ms: int
    last_seen_ms: int
    rolled_until_ms: int | None
    rolled_price: float | None
    base_price: float | None
    source: str = REAL

    @classmethod
    def parse(cls, series: str, raw: Mapping[str, str], source: str = REAL) -> SeriesMeta | None:
        if not raw or "first_ms" not in raw:
            return None
        opt = lambda k, f: f(raw[k]) if raw.get(k) not in (None, "") else None
        return cls(series, int(raw["first_ms"]), int(raw["last_seen_ms"]),
                   opt("rolled_until_ms", int), opt("rolled_price", float),
                   opt("base_price", float), source)


# ----- columnar form: the same arithmetic over arrays ------------------------------------------
# A long query reads hundreds of day blobs; decoding them into one object per hour and one per
# piece cost most of its time. These functions give the same numbers as decode_day and
# pieces_from_hours, as numpy arrays in the same order (so statistics over them are bit-equal).

# One hour of a day blob: ``hh:min,mean,max,last,changes``; a body is such parts joined by ";".
_NUM = r"[0-9.eE+\-naifNIF]+"
_PART = rf"[0-9]{{1,6}}:{_NUM},{_NUM},{_NUM},{_NUM},[0-9]{{1,12}}"
_BODY_RE = re.compile(rf"(?:{_PART}(?:;{_PART})*)?")


@dataclass(frozen=True)
class HourColumns:
    """Rollup hours as arrays of equal length, ascending: ``hour_ms`` (int64, UTC ms of the
    hour's start), ``min``/``mean``/``max``/``last`` (float64, USD/hour), ``changes`` (int64)."""

    hour_ms: np.ndarray
    min: np.ndarray
    mean: np.ndarray
    max: np.ndarray
    last: np.ndarray
    changes: np.ndarray

    def __len__(self) -> int:
        return len(self.hour_ms)

    def take(self, mask: np.ndarray) -> HourColumns:
        return HourColumns(*(getattr(self, f.name)[mask] for f in fields(self)))

    @classmethod
    def from_hours(cls, hours: Sequence[HourRollup]) -> HourColumns:
        return cls(np.array([h.hour_ms for h in hours], dtype=np.int64),
                   np.array([h.min for h in hours], dtype=float),
                   np.array([h.mean for h in hours], dtype=float),
                   np.array([h.max for h in hours], dtype=float),
                   np.array([h.last for h in hours], dtype=float),
                   np.array([h.changes for h in hours], dtype=np.int64))


def decode_days(blobs: Sequence[str]) -> HourColumns:
    """The hours of ``blobs`` (day blobs, in order) as columns: what
    ``[h for b in blobs for h in decode_day(b)]`` gives, as arrays.

    Raises:
        ValueError: a malformed blob (as :func:`decode_day`).
    """
    days: list[int] = []
    counts: list[int] = []
    bodies: list[str] = []
    odd: dict[int, list[HourRollup]] = {}  # blobs the strict form does not cover
    for k, blob in enumerate(blobs):
        day_text, _, body = blob.partition("|")
        if day_text.isdigit() and _BODY_RE.fullmatch(body):
            if body:
                days.append(int(day_text) * DAY_MS)
                counts.append(body.count(":"))
                bodies.append(body)
        else:  # lenient spellings decode_day accepts, or an error it raises
            odd[k] = decode_day(blob)
    if odd:
        return HourColumns.from_hours([h for k, blob in enumerate(blobs)
                                       for h in (odd[k] if k in odd else decode_day(blob))])
    if not bodies:
        return HourColumns.from_hours([])
    flat = ";".join(bodies).replace(":", ",").replace(";", ",").split(",")
    try:
        table = np.array(list(map(float, flat)), dtype=float).reshape(-1, 6)
    except ValueError:
        raise ValueError(f"malformed rollup day blob among {len(blobs)}") from None
    hour_ms = np.repeat(np.array(days, dtype=np.int64), counts) + table[:, 0].astype(np.int64) * HOUR_MS
    return HourColumns(hour_ms, table[:, 1].copy(), table[:, 2].copy(), table[:, 3].copy(),
                       table[:, 4].copy(), table[:, 5].astype(np.int64))


@dataclass(frozen=True)
class PieceColumns:
    """Pieces (see :class:`Piece`) as arrays of equal length, in time order: ``start_ms`` and
    ``end_ms`` (int64, UTC ms), ``lo``/``mean``/``hi``/``last`` (float64, USD/hour)."""

    start_ms: np.ndarray
    end_ms: np.ndarray
    lo: np.ndarray
    mean: np.ndarray
    hi: np.ndarray
    last: np.ndarray

    def __len__(self) -> int:
        return len(self.start_ms)

    @classmethod
    def from_pieces(cls, pieces: Sequence[Piece]) -> PieceColumns:
        return cls(np.array([p.start_ms for p in pieces], dtype=np.int64),
                   np.array([p.end_ms for p in pieces], dtype=np.int64),
                   np.array([p.lo for p in pieces], dtype=float),
                   np.array([p.mean for p in pieces], dtype=float),
                   np.array([p.hi for p in pieces], dtype=float),
                   np.array([p.last for p in pieces], dtype=float))

    @classmethod
    def concat(cls, parts: Sequence[PieceColumns]) -> PieceColumns:
        if len(parts) == 1:
            return parts[0]
        return cls(*(np.concatenate([getattr(p, f.name) for p in parts]) if parts
                     else np.array([], dtype=np.int64 if f.name.endswith("_ms") else float)
                     for f in fields(cls)))

    def to_pieces(self) -> list[Piece]:
        return [Piece(int(s), int(e), float(lo), float(m), float(hi), float(la))
                for s, e, lo, m, hi, la in zip(self.start_ms, self.end_ms, self.lo, self.mean,
                                               self.hi, self.last)]


def piece_columns_from_hours(hours: HourColumns, carry: float | None, start_ms: int,
                             end_ms: int) -> PieceColumns:
    """:func:`pieces_from_hours` over columns (``hours`` ascending): the same pieces, as
    :class:`PieceColumns`."""
    h = hours.hour_ms
    before = h + HOUR_MS <= start_ms
    if before.any():
        carry = float(hours.last[before][-1])
    inside = ~before & (h < end_ms)
    sel = hours.take(inside) if not inside.all() else hours
    n = len(sel)
    hour_start = sel.hour_ms
    clipped_lo = np.maximum(hour_start, start_ms)
    clipped_hi = np.minimum(hour_start + HOUR_MS, end_ms)
    # Before hour k the series is at t[k] (where the previous piece ended) with price c[k].
    t = np.empty(n + 1, dtype=np.int64)
    t[0] = start_ms
    t[1:] = clipped_hi
    c = np.empty(n + 1, dtype=float)
    c[0] = np.nan if carry is None else carry
    c[1:] = sel.last
    has_c = np.ones(n + 1, dtype=bool)
    has_c[0] = carry is not None
    # Slots 2k: the constant gap before hour k (k < n) or after the last hour (k = n);
    # slots 2k+1: hour k.
    keep = np.zeros(2 * n + 1, dtype=bool)
    keep[0:2 * n:2] = has_c[:n] & (hour_start > t[:n])
    keep[1::2] = True
    keep[2 * n] = has_c[n] and t[n] < end_ms
    starts = np.empty(2 * n + 1, dtype=np.int64)
    ends = np.empty(2 * n + 1, dtype=np.int64)
    starts[0::2], ends[0:2 * n:2], ends[2 * n] = t, hour_start, end_ms
    starts[1::2], ends[1::2] = clipped_lo, clipped_hi
    out = []
    for name, per_hour in (("lo", sel.min), ("mean", sel.mean), ("hi", sel.max), ("last", sel.last)):
        col = np.empty(2 * n + 1, dtype=float)
        col[0::2] = c
        col[1::2] = per_hour
        out.append(col[keep])
    return PieceColumns(starts[keep], ends[keep], *out)
