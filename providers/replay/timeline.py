"""Time in a replayed market: the market clock, availability traces and spot price steps.

**Market time** is seconds since the origin of the market's traces (tick 0 of every trace, hour 0
of every price series). The clock maps wall time to market time::

    market_s = start_market_s + (wall_now - epoch_wall).total_seconds() * time_scale

``epoch_wall`` is fixed when the cloud process first starts and persisted, so a restarted cloud
keeps the same clock.
"""

from __future__ import annotations

import bisect
import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from core.models.base import ensure_utc

SECONDS_PER_30_DAYS = 30 * 86400


class TraceError(ValueError):
    """A trace file is missing or not in the ``cbl_spot_traces`` format."""


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
    """A spot availability trace in the ``cbl_spot_traces`` format.

    ``data[i]`` is the number of spot instances available during tick ``i``, i.e. during market
    seconds ``[i * gap_seconds, (i + 1) * gap_seconds)``. Polarity: **1 (or more) = available,
    0 = preempted/unavailable**. Past its end the trace loops.
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

    def is_available(self, market_s: float) -> bool:
        """True when the trace says spot capacity exists at ``market_s``."""
        return self.data[self.tick(market_s)] >= 1

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


def load_trace(path: str | Path) -> AvailabilityTrace:
    """Read a ``cbl_spot_traces`` JSON file.

    Format: ``{"metadata": {"gap_seconds": N}, "data": [k0, k1, ...]}`` where ``k`` is the number
    of spot instances available at that tick: **1 = available, 0 = preempted/unavailable** (some
    third-party copies use the opposite polarity; this loader expects the source's).

    Raises ``TraceError`` naming the file when it is missing, not JSON, or malformed.
    """
    path = Path(path)
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        raise TraceError(f"{path}: trace file not found") from None
    except (OSError, ValueError) as exc:
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
