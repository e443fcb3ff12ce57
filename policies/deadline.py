"""Deadline awareness: what is safe, what is feasible, and when on-demand is needed.

Notation (all ``(n,)`` hours): ``c`` remaining compute, ``r`` time to the deadline, ``d`` restart
overhead, ``g`` decision interval, ``o`` overhead still to pay on the current instance.

**The safety net.** Committing to on-demand now finishes at ``c + d`` (``c + o`` when already on
on-demand), and on-demand is never reclaimed. A choice for the next interval is *safe* when, at
its end and in the worst case (the spot instance reclaimed at that moment, its unsaved progress
lost), committing to on-demand still finishes in time. A policy that only ever takes safe
choices, and on-demand otherwise, never misses a deadline that was feasible at submission
(``r >= c + d``): by induction every decision point keeps ``r >= c + d``.

**Spot while it pays.** Idle time (waiting for spot) spends slack; on-demand is *needed* to
fill gaps in spot capacity once the slack is down to what the end game needs
(:func:`on_demand_needed`). Until then the job waits for spot, so it uses every spot hour up to
the deadline instead of buying on-demand hours that spot would have covered later.
"""

from __future__ import annotations

import numpy as np

from policies.views import JobView, MarketView

EPS_H = 1e-9


def has_deadline(jobs: JobView) -> np.ndarray:
    """``(n,)`` bool: the job has a finite deadline and a known remaining compute."""
    return np.isfinite(jobs.time_to_deadline_h) & np.isfinite(jobs.remaining_compute_h)


def progress_h(overhead_h: np.ndarray, interval_h: np.ndarray) -> np.ndarray:
    """Useful hours in one interval on an instance that still owes ``overhead_h``."""
    return np.maximum(0.0, interval_h - overhead_h)


def feasible(jobs: JobView, on_demand_now: np.ndarray) -> np.ndarray:
    """``(n,)`` bool: committing to on-demand now still meets the deadline (always True without
    one). ``on_demand_now``: the job already runs on on-demand (pays ``o`` instead of ``d``)."""
    need = jobs.remaining_compute_h + np.where(on_demand_now, jobs.overhead_left_h,
                                               jobs.restart_overhead_h)
    return ~has_deadline(jobs) | (jobs.time_to_deadline_h >= need - EPS_H)


def wait_safe(jobs: JobView) -> np.ndarray:
    """``(n,)`` bool: running nothing for one interval keeps the on-demand fallback in time."""
    slack = jobs.time_to_deadline_h - jobs.decision_interval_h - jobs.remaining_compute_h \
        - jobs.restart_overhead_h
    return ~has_deadline(jobs) | (slack >= -EPS_H)


def spot_safe(jobs: JobView, overhead_h: np.ndarray) -> np.ndarray:
    """Whether one interval on a spot instance is safe.

    Args:
        jobs: the jobs.
        overhead_h: overhead the spot instance still owes at the start of the interval,
            ``(n,)`` or ``(n, m)`` (``d`` for a new instance, ``o`` for the current one).

    Returns:
        bool of ``overhead_h``'s shape: either the job finishes within the interval and before
        the deadline, or, reclaimed at its end with the unsaved progress lost, it can still
        launch on-demand and finish in time.
    """
    shape = np.shape(overhead_h)
    col = (lambda a: a[:, None]) if len(shape) == 2 else (lambda a: a)
    c, r = col(jobs.remaining_compute_h), col(jobs.time_to_deadline_h)
    g, d = col(jobs.decision_interval_h), col(jobs.restart_overhead_h)
    tau, age = col(jobs.checkpoint_interval_h), col(jobs.checkpoint_age_h)
    p = progress_h(overhead_h, g)
    finishes = p >= c
    lost = np.where(tau > 0, np.minimum(tau, age + p), 0.0)
    ok_finish = r >= overhead_h + c - EPS_H
    ok_fallback = r - g >= c - np.minimum(p, c) + lost + d - EPS_H
    ok = np.where(finishes, ok_finish, ok_fallback)
    return ~col(has_deadline(jobs)) | ok


def slack_h(jobs: JobView) -> np.ndarray:
    """``(n,)`` hours the job can still lose: ``r - c - d`` (one on-demand launch kept)."""
    return jobs.time_to_deadline_h - jobs.remaining_compute_h - jobs.restart_overhead_h


def launch_sustainable(jobs: JobView) -> np.ndarray:
    """``(n,)`` bool: a new spot instance can pay its overhead and still keep the on-demand
    fallback for one more interval (``slack >= d + g``); otherwise a launch would be forced
    back to on-demand before making progress. True without a deadline."""
    return ~has_deadline(jobs) | (
        slack_h(jobs) >= jobs.restart_overhead_h + jobs.decision_interval_h - EPS_H)


def reserve_h(jobs: JobView, market: MarketView, reserve_factor: float) -> np.ndarray:
    """Slack to keep for the end game, ``(n,)`` hours.

    Once the slack is down to this reserve the job runs spot when there is spot and on-demand
    when there is not ("fill" mode), so every hour of spot capacity up to the deadline is used.
    Each spot run it then uses costs ``2d`` of slack (launch onto spot, relaunch onto
    on-demand after the reclaim); spot runs start once per ``mean_up + mean_down`` hours of the
    job's spot pool, and fill mode lasts about ``c`` hours. Plus one decision interval.
    """
    cycle = market.pool_stats.mean_up_h + market.pool_stats.mean_down_h
    with np.errstate(invalid="ignore", divide="ignore"):
        runs = np.where(np.isfinite(cycle) & (cycle > 0),
                        jobs.remaining_compute_h / cycle, 0.0)
    return reserve_factor * 2.0 * jobs.restart_overhead_h * runs + jobs.decision_interval_h


def on_demand_needed(jobs: JobView, market: MarketView, on_demand_now: np.ndarray,
                     reserve_factor: float, band_h: float) -> np.ndarray:
    """``(n,)`` bool: the slack is down to the end-game reserve (:func:`reserve_h`), so idle
    time is no longer affordable and gaps in spot capacity are filled with on-demand.

    Hysteresis: a job already on on-demand stays needed until the slack exceeds the reserve by
    ``band_h`` hours. False for jobs without a deadline.
    """
    spare = slack_h(jobs) - reserve_h(jobs, market, reserve_factor)
    need = np.where(on_demand_now, spare <= band_h, spare <= 0.0)
    return has_deadline(jobs) & need


def flip_age_h(jobs: JobView, market: MarketView, mean_up_h: np.ndarray) -> np.ndarray:
    """Minimum age of a spot run before an on-demand job leaves for it, ``(n, m)`` hours.

    Each round trip on-demand → spot → on-demand costs ``2d`` of slack, so the slack ``s``
    pays for ``K = s / 2d`` trips, while about ``N = c / (mean_up + mean_down)`` spot runs of
    the pool start before the job is done. With run lengths Lomax(shape 2, scale λ) a run
    reaches age ``a`` with probability ``(1 + a/λ)^-2``; taking only runs that reach
    ``a* = λ·(sqrt(N/K) - 1)`` spends the slack on the ``K`` longest-lived runs. ``a* = 0`` when
    the slack covers every run (or without a deadline).
    """
    cycle = market.pool_stats.mean_up_h + market.pool_stats.mean_down_h
    with np.errstate(invalid="ignore", divide="ignore"):
        runs = np.where(np.isfinite(cycle) & (cycle > 0), jobs.remaining_compute_h / cycle, 0.0)
        trips = np.maximum(slack_h(jobs), 0.0) / (2.0 * jobs.restart_overhead_h)
        ratio = np.where(trips > 0, runs / trips, np.inf)
    factor = np.maximum(np.sqrt(ratio) - 1.0, 0.0)[:, None]
    with np.errstate(invalid="ignore"):
        age = np.where(np.isfinite(factor), mean_up_h * factor, np.inf)
    return np.where(has_deadline(jobs)[:, None] & (jobs.restart_overhead_h > 0)[:, None], age, 0.0)
