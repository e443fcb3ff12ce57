"""Statistics of price step functions, weighted by time (pure; numpy for the quantiles).

A window of a series is a list of :class:`~scheduler.store.rollups.Piece`. Each constant piece
weighs its duration at its price. A rolled-up hour is known by its min, mean and max only; it
weighs as a two-price mix of ``min`` and ``max`` whose weights give the hour's mean (exact when
the hour held at most two prices, the usual case for spot prices). ``min``/``max``/``mean``
are therefore exact over whole hours; quantiles and volatility are exact in the raw tier.

Definitions (prices in USD/hour, or USD per GPU-hour when divided by the GPU count):

- **min**, **max**: lowest/highest price in force during the window.
- **p50**, **p90** (and p10): time-weighted quantiles, inverted CDF: the lowest price such that
  the price was at or below it for at least that share of the window.
- **mean**: time-weighted mean (what running throughout the window cost per hour).
- **last**: price in force at the end of the window (groups: the cheapest series' last).
- **changes**: price changes inside the window.
- **volatility**: time-weighted standard deviation / mean (coefficient of variation).
- **hours**: hours of the window covered by data.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from scheduler.store.rollups import DAY_MS, HOUR_MS, Piece, PieceColumns

QUANTILES = (0.1, 0.5, 0.9)


@dataclass
class Accumulator:
    """Pools pieces of one or more series into one distribution.

    Pieces come one by one (:meth:`add`, :meth:`add_piece`) or as columns
    (:meth:`add_columns`); either way each adds the same values and weights in the same order,
    so the statistics do not depend on which was used. ``values``/``weights`` hold what was
    added one by one since the last columns."""

    values: list[float] = field(default_factory=list)
    weights: list[float] = field(default_factory=list)
    lo: float = float("inf")
    hi: float = float("-inf")
    changes: int = 0
    covered_ms: int = 0
    lasts: list[float] = field(default_factory=list)
    series: int = 0
    chunks: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)

    def add(self, pieces: Iterable[Piece], changes: int = 0, divisor: float = 1.0,
            with_last: bool = True) -> None:
        """Add one series' pieces (prices divided by ``divisor``, e.g. its GPU count)."""
        pieces = list(pieces)
        if not pieces:
            return
        self.series += 1
        self.changes += changes
        for p in pieces:
            self.add_piece(p, divisor)
        if with_last:
            self.lasts.append(pieces[-1].last / divisor)

    def add_piece(self, p: Piece, divisor: float = 1.0, duration_ms: float | None = None) -> None:
        dur = float(p.end_ms - p.start_ms if duration_ms is None else duration_ms)
        lo, mean, hi = p.lo / divisor, p.mean / divisor, p.hi / divisor
        self.lo = min(self.lo, lo)
        self.hi = max(self.hi, hi)
        self.covered_ms += int(dur)
        if hi > lo:
            w_hi = min(1.0, max(0.0, (mean - lo) / (hi - lo)))
            self.values += [lo, hi]
            self.weights += [dur * (1 - w_hi), dur * w_hi]
        else:
            self.values.append(lo)
            self.weights.append(dur)

    def add_columns(self, pieces: PieceColumns, changes: int = 0, divisor: float = 1.0,
                    with_last: bool = True) -> None:
        """:meth:`add` for one series' pieces as columns: the same values, weights and
        totals (element-wise the same IEEE operations, in the same order)."""
        n = len(pieces)
        if not n:
            return
        self.series += 1
        self.changes += changes
        span = pieces.end_ms - pieces.start_ms
        dur = span.astype(float)
        lo, mean, hi = pieces.lo / divisor, pieces.mean / divisor, pieces.hi / divisor
        self.lo = min(self.lo, float(lo.min()))
        self.hi = max(self.hi, float(hi.max()))
        self.covered_ms += int(span.sum())
        split = hi > lo
        w_hi = np.zeros(n)
        w_hi[split] = np.minimum(1.0, np.maximum(0.0, (mean[split] - lo[split]) / (hi[split] - lo[split])))
        values = np.empty((n, 2))
        weights = np.empty((n, 2))
        values[:, 0], values[:, 1] = lo, hi
        weights[:, 0] = np.where(split, dur * (1 - w_hi), dur)
        weights[:, 1] = dur * w_hi
        keep = np.ones((n, 2), dtype=bool)
        keep[:, 1] = split
        self._flush()
        self.chunks.append((values[keep], weights[keep]))
        if with_last:
            self.lasts.append(float(pieces.last[-1]) / divisor)

    def _flush(self) -> None:
        if self.values:
            self.chunks.append((np.asarray(self.values, dtype=float),
                                np.asarray(self.weights, dtype=float)))
            self.values, self.weights = [], []

    def result(self) -> dict[str, Any] | None:
        """The statistics (see the module docstring), or ``None`` when nothing was added."""
        self._flush()
        if not self.chunks:
            return None
        if len(self.chunks) == 1:
            values, weights = self.chunks[0]
        else:
            values = np.concatenate([v for v, _ in self.chunks])
            weights = np.concatenate([w for _, w in self.chunks])
        if weights.sum() <= 0:  # snapshots only: every observation counts once
            weights = np.ones_like(values)
        p10, p50, p90 = np.quantile(values, QUANTILES, weights=weights, method="inverted_cdf")
        mean = float(np.average(values, weights=weights))
        std = float(np.sqrt(np.average((values - mean) ** 2, weights=weights)))
        return {
            "min": self.lo, "p10": float(p10), "p50": float(p50), "mean": mean,
            "p90": float(p90), "max": self.hi,
            "last": min(self.lasts) if self.lasts else None,
            "changes": self.changes, "volatility": std / mean if mean > 0 else 0.0,
            "hours": self.covered_ms / HOUR_MS, "series": self.series,
        }


def split_by_hour_of_day(pieces: Iterable[Piece]) -> dict[int, list[tuple[Piece, float]]]:
    """Each piece's duration split by UTC hour of day: ``hour → [(piece, ms in that hour)]``.

    Whole days inside a long piece add a day's hour to every hour of day at once, so a
    year-long constant price costs 24 entries, not 8,760.
    """
    out: dict[int, list[tuple[Piece, float]]] = {h: [] for h in range(24)}
    for p in pieces:
        start, end = p.start_ms, p.end_ms
        if end - start >= DAY_MS:
            days = (end - start) // DAY_MS
            for h in range(24):
                out[h].append((p, float(days * HOUR_MS)))
            start += days * DAY_MS
        while start < end:
            hour_end = min(end, start - start % HOUR_MS + HOUR_MS)
            out[(start % DAY_MS) // HOUR_MS].append((p, float(hour_end - start)))
            start = hour_end
    return out
