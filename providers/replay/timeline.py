"""Time in a replayed market: the market clock, availability traces and spot price steps.

**Market time** is seconds since the origin of the market's traces (tick 0 of every trace, hour 0
of every price series). The clock maps wall time to market time::

    market_s = start_market_s + (wall_now - epoch_wall).total_seconds() * time_scale

``epoch_wall`` is fixed when the cloud process first starts and persisted, so a restarted cloud
keeps the same clock.

**Availability traces** count spot instances per tick (:class:`AvailabilityTrace`). Two file
formats load (:func:`load_trace`): ``cbl_spot_traces`` JSON (its own fixed gap) and Bamboo's
``time,running_spot_instances`` CSV step traces, resampled onto a fixed gap.
"""

from __future__ import annotations

import bisect
import json
import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from core.models.base import ensure_utc

SECONDS_PER_30_DAYS = 30 * 86400
# Bamboo's step traces change at any second; one minute keeps every step of the 2020 traces
# longer than a minute (most are) while a 4-day trace stays ~6,000 ticks.
DEFAULT_CSV_GAP_S = 60.0
# A CSV's header names its time unit; without one the unit is the caller's (default hours, as
# shared/data/README.md documents the Bamboo files).
CSV_TIME_COLUMNS = {"time_hours": 3600.0, "time_h": 3600.0, "time_seconds": 1.0, "time_s": 1.0}
TIME_UNITS_S = {"hours": 3600.0, "seconds": 1.0}


class TraceError(ValueError):
    """A trace file is missing or malformed; the message names the file (and the line of a
    CSV)."""


@dataclass(frozen=True)
class MarketClock:
    """Maps wall time (aware UTC) to market time (seconds since the traces' origin) and back.

    - **epoch_wall**: wall instant at which market time was ``start_market_s``.
    - **start_market_s**: market time at the epoch (``start_offset_hours * 3600``).
    - **time_scale**: market seconds per wall second (> 0).
    """

    epoch_wall: datetime
    start_market_s: float
    time_scale: float

    def market_s(self, wall: datetime) -> float:
        """Market seconds at ``wall`` (aware UTC; naive is taken as UTC)."""
        elapsed_s = (ensure_utc(wall) - ensure_utc(self.epoch_wall)).total_seconds()
        return self.start_market_s + elapsed_s * self.time_scale

    def wall_at(self, market_s: float) -> datetime:
        """Wall instant (aware UTC) at which the market clock reads ``market_s``."""
        elapsed_s = (market_s - self.start_market_s) / self.time_scale
        return ensure_utc(self.epoch_wall) + timedelta(seconds=elapsed_s)


@dataclass(frozen=True)
class AvailabilityTrace:
    """A spot availability trace: instance counts on a fixed gap.

    ``data[i]`` is the number of spot instances available during tick ``i``, i.e. during market
    seconds ``[i * gap_seconds, (i + 1) * gap_seconds)``. Polarity: **1 (or more) = available,
    0 = preempted/unavailable**; a count above 1 is how many instances of the offer can run at
    once (1-node traces only ever read 0 or 1). Past its end the trace loops.
    """

    data: tuple[int, ...]
    gap_seconds: float
    source: str = ""

    @property
    def duration_s(self) -> float:
        """Length of one loop of the trace in market seconds."""
        return len(self.data) * self.gap_seconds

    def tick(self, market_s: float) -> int:
        """Index into ``data`` for ``market_s`` (the trace loops; negative times wrap too)."""
        return int(market_s // self.gap_seconds) % len(self.data)

    def count_at(self, market_s: float) -> int:
        """Spot instances available at ``market_s`` (the count of its tick; >= 0)."""
        return self.data[self.tick(market_s)]

    @property
    def counts_instances(self) -> bool:
        """Whether the trace counts instances (some tick reads more than 1), rather than
        probing one instance's availability (0/1, as the 1-node Can't-Be-Late traces do: a
        1 there says the probe ran, not that only one instance could)."""
        return max(self.data, default=0) > 1

    def is_available(self, market_s: float) -> bool:
        """True when the trace says spot capacity exists at ``market_s`` (count >= 1)."""
        return self.count_at(market_s) >= 1

    def drop_count(self) -> int:
        """Number of available→unavailable transitions in one loop, counting the wrap-around
        from the last tick to the first (the trace loops, so that edge happens too)."""
        data = self.data
        return sum(1 for i in range(len(data)) if data[i - 1] >= 1 and data[i] == 0)

    def interruption_risk(self) -> float:
        """Derived monthly interruption frequency in [0, 1]: drops per 30 days of trace, capped
        at 1 (the Spot Advisor notion of "interrupted at least once a month")."""
        if self.duration_s <= 0:
            return 0.0
        return min(1.0, self.drop_count() * SECONDS_PER_30_DAYS / self.duration_s)


def load_trace(path: str | Path, *, time_unit: str | None = None,
               gap_seconds: float | None = None) -> AvailabilityTrace:
    """Read an availability trace: ``cbl_spot_traces`` JSON, or a CSV step trace (``.csv``).

    **JSON** (``cbl_spot_traces``): ``{"metadata": {"gap_seconds": N}, "data": [k0, k1, ...]}``
    where ``k`` is the number of spot instances available at that tick: **1 = available, 0 =
    preempted/unavailable** (some third-party copies use the opposite polarity; this loader
    expects the source's). ``time_unit`` and ``gap_seconds`` do not apply.

    **CSV** (Bamboo, ``bamboo_aws_2020-11``): rows ``time,running_spot_instances`` (optional
    header ``time_hours,...`` or ``time_seconds,...``; CRLF and blank lines are fine). Each row
    sets the count from its time on; the first row is at time 0, times never decrease, and two
    rows at one time draw a vertical step (the later one holds). Resampled onto
    ``gap_seconds`` (default :data:`DEFAULT_CSV_GAP_S`): **tick i holds the count in force at
    the tick's start**, market second ``i * gap_seconds`` (a step shorter than the gap may be
    skipped). The trace spans ``ceil(last time / gap)`` ticks (at least one), then loops.

    Args:
        path: the trace file.
        time_unit: CSV only: ``"hours"`` or ``"seconds"`` for a CSV without a header (default
            hours, the data README's format; the Bamboo files without ``_scaled`` in their
            name count seconds). A header's unit must agree.
        gap_seconds: CSV only: the tick length (> 0).

    Raises:
        TraceError: naming the file (and a CSV's line) when it is missing, unreadable or
            malformed, or when ``time_unit``/``gap_seconds`` are given for a JSON trace.
    """
    path = Path(path)
    if time_unit is not None and time_unit not in TIME_UNITS_S:
        raise TraceError(f"{path}: time_unit: got {time_unit!r}; use hours or seconds")
    if gap_seconds is not None and not gap_seconds > 0:
        raise TraceError(f"{path}: gap_seconds: got {gap_seconds!r}; must be > 0")
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise TraceError(f"{path}: trace file not found") from None
    except (OSError, ValueError) as exc:
        raise TraceError(f"{path}: cannot read trace: {exc}") from None
    if path.suffix.lower() == ".csv":
        return _csv_trace(path, text, time_unit, gap_seconds or DEFAULT_CSV_GAP_S)
    if time_unit is not None or gap_seconds is not None:
        raise TraceError(f"{path}: time_unit and gap_seconds apply to CSV step traces only "
                         "(a JSON trace gives metadata.gap_seconds)")
    return _json_trace(path, text)


def _json_trace(path: Path, text: str) -> AvailabilityTrace:
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise TraceError(f"{path}: cannot read trace: {exc}") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("metadata"), dict):
        raise TraceError(f"{path}: expected {{'metadata': {{'gap_seconds': N}}, 'data': [...]}}")
    gap = raw["metadata"].get("gap_seconds")
    if not isinstance(gap, (int, float)) or isinstance(gap, bool) or gap <= 0:
        raise TraceError(f"{path}: metadata.gap_seconds: got {gap!r}; must be a number > 0")
    data = raw.get("data")
    if not isinstance(data, list) or not data:
        raise TraceError(f"{path}: data: must be a non-empty list of instance counts")
    for i, value in enumerate(data):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise TraceError(f"{path}: data[{i}]: got {value!r}; must be an integer >= 0")
    return AvailabilityTrace(data=tuple(data), gap_seconds=float(gap), source=str(path))


def _csv_rows(path: Path, text: str, time_unit: str | None) -> list[tuple[float, int]]:
    """``(market second, count)`` per row, checked; the header (if any) fixes the unit."""
    unit_s = TIME_UNITS_S[time_unit or "hours"]
    rows: list[tuple[float, int]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        cells = [c.strip() for c in line.split(",")]
        if cells == [""]:
            continue
        where = f"{path}:{number}"
        if len(cells) != 2:
            raise TraceError(f"{where}: expected 'time,running_spot_instances', got {line!r}")
        if not rows and cells[0].lower() in CSV_TIME_COLUMNS:
            header_s = CSV_TIME_COLUMNS[cells[0].lower()]
            if time_unit is not None and TIME_UNITS_S[time_unit] != header_s:
                raise TraceError(f"{where}: header {cells[0]!r} disagrees with time_unit "
                                 f"{time_unit!r}")
            unit_s = header_s
            continue
        try:
            at = float(cells[0])
        except ValueError:
            raise TraceError(f"{where}: time: got {cells[0]!r}; must be a number") from None
        if not math.isfinite(at) or at < 0:
            raise TraceError(f"{where}: time: got {cells[0]!r}; must be a finite number >= 0")
        if not cells[1].isdigit():
            raise TraceError(f"{where}: running_spot_instances: got {cells[1]!r}; must be an "
                             "integer >= 0")
        at_s = at * unit_s
        if not rows and at_s != 0:
            raise TraceError(f"{where}: the first row must be at time 0, got {cells[0]!r}")
        if rows and at_s < rows[-1][0]:
            raise TraceError(f"{where}: time {cells[0]!r} is before the previous row's")
        rows.append((at_s, int(cells[1])))
    if not rows:
        raise TraceError(f"{path}: no rows: expected 'time,running_spot_instances' lines")
    return rows


def _csv_trace(path: Path, text: str, time_unit: str | None,
               gap_s: float) -> AvailabilityTrace:
    rows = _csv_rows(path, text, time_unit)
    ticks = max(1, math.ceil(rows[-1][0] / gap_s))
    times = [at for at, _ in rows]
    # bisect_right: of rows at the same time, the last one is in force from that time on.
    data = tuple(rows[bisect.bisect_right(times, i * gap_s) - 1][1] for i in range(ticks))
    return AvailabilityTrace(data=data, gap_seconds=float(gap_s), source=str(path))


@dataclass(frozen=True)
class PriceSeries:
    """A step function of price (USD/hour) over market time.

    ``base_price`` holds before the first point; each point ``(at_s, price)`` sets the price from
    market second ``at_s`` on. The series does **not** loop: the last price holds forever.
    """

    base_price: float
    points: tuple[tuple[float, float], ...] = ()

    def __post_init__(self) -> None:
        if list(self.points) != sorted(self.points):
            object.__setattr__(self, "points", tuple(sorted(self.points)))

    def price_at(self, market_s: float) -> float:
        """Price in force at ``market_s``."""
        idx = bisect.bisect_right([at for at, _ in self.points], market_s)
        return self.base_price if idx == 0 else self.points[idx - 1][1]

    def steps_between(self, after_s: float, until_s: float) -> list[tuple[float, float]]:
        """Points with ``after_s < at_s <= until_s``, oldest first, as ``(at_s, price)``."""
        return [(at, price) for at, price in self.points if after_s < at <= until_s]
