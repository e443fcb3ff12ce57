"""Waste rules: is a running job wasting the GPUs it pays for? Pure functions over plain data.

The data: the GPU samples an agent reports (NVML, :class:`core.models.work.GpuSample`), as a
:class:`GpuWindow` of arrays, oldest first, and the job's progress points as times and
cumulative units. The daemon keeps both for each running attempt
(:mod:`scheduler.controller.waste`) and raises one alert per episode of each condition.

Every duration here is **wall seconds** of the instance's behaviour (10 minutes of low
utilisation are 10 minutes of a real GPU's time, on a replayed market too), not market time.

The conditions and their thresholds:

- ``low-utilisation``: mean GPU utilisation under :data:`LOW_UTIL_PCT` for
  :data:`LOW_UTIL_S` without a break.
- ``idle``: every GPU at 0 % (the window's highest reading is 0) for :data:`IDLE_S`.
- ``slow-steps``: the recent step time is more than :data:`SLOW_FACTOR` times the job's
  own baseline (its rate over the recent :data:`RECENT_S` below baseline ÷ 1.2).
- ``vram-oversized``: the most memory used under :data:`VRAM_FRACTION` of the offer's for
  :data:`LOW_UTIL_S`; :func:`right_size` names the offer that would fit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from policies.views import NO_OFFER

LOW_UTIL_PCT = 65.0
LOW_UTIL_S = 600.0
IDLE_S = 300.0
SLOW_FACTOR = 1.2
# A slow-steps episode ends when the step time is back within this factor of the baseline
# (below SLOW_FACTOR, so a rate hovering at the threshold does not raise alert after alert).
SLOW_CLEAR_FACTOR = 1.1
RECENT_S = 300.0
VRAM_FRACTION = 0.5
# Memory a right-sized offer needs beyond the most the job used: 20 % + 1 GiB of headroom
# (allocator fragmentation, a larger batch at evaluation).
VRAM_MARGIN = 0.2
VRAM_MARGIN_GIB = 1.0
# Two samples further apart than this (wall s; the agent reports every few seconds and is
# presumed lost after 60 s of silence) do not make one unbroken run of a condition.
MAX_GAP_S = 120.0


@dataclass(frozen=True)
class GpuWindow:
    """GPU samples of one attempt, oldest first, every field ``(k,)``.

    - **end_s**: when each sample's window ended (wall seconds on any fixed epoch).
    - **window_s**: seconds each sample covers (its start is ``end_s - window_s``).
    - **util_pct** / **max_util_pct**: mean and highest utilisation in it (0–100).
    - **memory_used_gib** / **memory_total_gib**: most memory used, and capacity (all GPUs).
    """

    end_s: np.ndarray
    window_s: np.ndarray
    util_pct: np.ndarray
    max_util_pct: np.ndarray
    memory_used_gib: np.ndarray
    memory_total_gib: np.ndarray

    def __len__(self) -> int:
        return len(self.end_s)


def held_s(end_s: np.ndarray, window_s: np.ndarray, holds: np.ndarray,
           max_gap_s: float = MAX_GAP_S) -> tuple[float, int]:
    """How long a condition has held without a break up to the latest sample.

    Args:
        end_s, window_s: ``(k,)`` sample ends and lengths (wall s), oldest first.
        holds: ``(k,)`` bool, whether the condition holds in each sample.
        max_gap_s: a gap between one sample's end and the next one's start longer than this
            breaks the run.

    Returns:
        ``(seconds, first)``: from the start of the run's first sample to the latest sample's
        end, and the index of that first sample; ``(0.0, k)`` when the latest sample does not
        hold (or there is none).
    """
    k = len(end_s)
    if k == 0 or not holds[-1]:
        return 0.0, k
    start = end_s - window_s
    # Sample i breaks the run before it when it does not hold, or (i > 0) when it starts
    # more than max_gap_s after sample i-1 ended; the run starts after the last break.
    gap = np.zeros(k, dtype=bool)
    gap[1:] = start[1:] - end_s[:-1] > max_gap_s
    not_holding = np.flatnonzero(~np.asarray(holds, dtype=bool))
    gapped = np.flatnonzero(gap)
    first = max(int(not_holding[-1]) + 1 if not_holding.size else 0,
                int(gapped[-1]) if gapped.size else 0)
    return float(end_s[-1] - start[first]), first


def low_utilisation_s(w: GpuWindow) -> float:
    """Seconds the mean utilisation has been under :data:`LOW_UTIL_PCT`."""
    return held_s(w.end_s, w.window_s, w.util_pct < LOW_UTIL_PCT)[0]


def idle_s(w: GpuWindow) -> float:
    """Seconds every GPU has been idle (the highest reading of each sample 0)."""
    return held_s(w.end_s, w.window_s, w.max_util_pct <= 0.0)[0]


def vram_underused(w: GpuWindow) -> tuple[float, float, float]:
    """``(seconds, used_gib, total_gib)``: how long the memory used has stayed under
    :data:`VRAM_FRACTION` of the capacity, the most used over that run and the capacity
    (the latest sample's); ``(0, nan, nan)`` when it does not."""
    seconds, first = held_s(w.end_s, w.window_s,
                            w.memory_used_gib < VRAM_FRACTION * w.memory_total_gib)
    if seconds <= 0:
        return 0.0, float("nan"), float("nan")
    return seconds, float(w.memory_used_gib[first:].max()), float(w.memory_total_gib[-1])


def vram_needed_gib(used_gib: float) -> float:
    """GPU memory an offer needs for a job that used at most ``used_gib``: the use plus
    :data:`VRAM_MARGIN` of it plus :data:`VRAM_MARGIN_GIB`."""
    return used_gib * (1.0 + VRAM_MARGIN) + VRAM_MARGIN_GIB


def recent_rate(at_s: np.ndarray, done: np.ndarray, recent_s: float = RECENT_S,
                ) -> tuple[float, float]:
    """The job's rate over its most recent ``recent_s`` of progress.

    Args:
        at_s: ``(k,)`` times of the progress points (wall s), increasing.
        done: ``(k,)`` cumulative units at those times.

    Returns:
        ``(units_per_s, start_s)``: units per wall second from the last point at or before
        ``at_s[-1] - recent_s`` to the latest point, and that point's time; ``(nan, nan)``
        when the points do not span ``recent_s``.
    """
    if len(at_s) < 2 or at_s[-1] - at_s[0] < recent_s:
        return float("nan"), float("nan")
    i = int(np.searchsorted(at_s, at_s[-1] - recent_s, side="right")) - 1
    span = at_s[-1] - at_s[i]
    return float((done[-1] - done[i]) / span), float(at_s[i])


def step_time_ratio(recent_units_per_s: float, baseline_units_per_s: float) -> float:
    """Recent step time ÷ baseline step time (= baseline rate ÷ recent rate): 1.25 means
    steps take 25 % longer than the job's own baseline; ``nan`` without both rates, ``inf``
    when the job made no progress recently."""
    if not (baseline_units_per_s > 0) or not np.isfinite(recent_units_per_s) \
            or recent_units_per_s < 0:
        return float("nan")
    if recent_units_per_s == 0:
        return float("inf")
    return baseline_units_per_s / recent_units_per_s


def right_size(need_gib: float, vram_total_gib: np.ndarray, cost_to_finish_usd: np.ndarray,
               eligible: np.ndarray, current: int) -> int:
    """The offer to suggest for a job that needs ``need_gib`` of GPU memory in all.

    Args:
        need_gib: memory the job needs over all its GPUs (:func:`vram_needed_gib`).
        vram_total_gib: ``(m,)`` memory of each offer over all its GPUs.
        cost_to_finish_usd: ``(m,)`` expected USD to finish the job's remaining work on each
            offer (``nan`` unknown: such an offer is never suggested).
        eligible: ``(m,)`` bool, offers the job admits apart from its memory.
        current: the offer the job runs on (its index, or :data:`NO_OFFER`).

    Returns:
        The eligible offer with enough memory and the lowest cost to finish, when that cost
        is lower than the current offer's; else :data:`NO_OFFER`.
    """
    cost = np.where(eligible & (vram_total_gib >= need_gib) & np.isfinite(cost_to_finish_usd),
                    cost_to_finish_usd, np.inf)
    if len(cost) == 0:
        return NO_OFFER
    best = int(np.argmin(cost))
    if not np.isfinite(cost[best]) or best == current:
        return NO_OFFER
    if current != NO_OFFER and np.isfinite(cost_to_finish_usd[current]) \
            and cost[best] >= cost_to_finish_usd[current]:
        return NO_OFFER
    return best
