"""Deadline awareness: what is safe, what is feasible, and when on-demand is needed.

Notation (all ``(n,)``): ``c`` remaining compute (reference-hours), ``r`` time to the deadline,
``d`` restart overhead, ``g`` decision interval, ``o`` overhead still to pay on the current
instance (hours). On offer ``j`` of speed ``s_j`` (:attr:`policies.views.MarketView.speed`) the
work left takes ``c / s_j`` hours, and an interval of ``g`` hours that still owes ``o`` makes
``(g - o)⁺ · s_j`` reference-hours of progress; overheads and the rework lost at a reclaim are
hours on that offer whatever its speed.

**The fallback** is the on-demand offer the job would commit to: for a job that runs on
on-demand, its current instance (it pays ``o``); otherwise the offer the safety net launches
(:func:`policies.decisions.decide_placement`): the cheapest-to-finish available on-demand
offer among those that still finish in time from now (``r >= c / s + d``), else, when none
does, the one that finishes first. Every rule here takes the fallback's speed ``s_f``
(``fallback_speed``, 1 when not given: the reference), so ``c_f = c / s_f`` is the hours the
fallback needs; progress and losses on a spot offer ``j`` count ``s_j / s_f`` fallback hours
per hour.

**The safety net.** Committing to the fallback now finishes at ``c_f + d`` (``c_f + o`` when
already on on-demand), and on-demand is never reclaimed. A choice for the next interval is
*safe* when, at its end and in the worst case (the spot instance reclaimed at that moment, its
unsaved progress lost), committing to the same fallback still finishes in time. A policy that
only ever takes safe choices, and on-demand that finishes in time otherwise, never misses a
deadline that was feasible at submission (some on-demand offer had ``r >= c / s + d``): by
induction every decision point keeps an on-demand offer that finishes in time (the fallback
of the previous point still does, so the new fallback, the cheapest such offer, exists).

**Spot while it pays.** Idle time (waiting for spot) spends slack; on-demand is *needed* to
fill gaps in spot capacity once the slack is down to what the end game needs
(:func:`on_demand_needed`). Until then the job waits for spot, so it uses every spot hour up to
the deadline instead of buying on-demand hours that spot would have covered later.
"""

from __future__ import annotations

import numpy as np

from policies.risk import gang_uptime
from policies.views import JobView, MarketView

EPS_H = 1e-9


def _cycle_h(jobs: JobView, market: MarketView) -> np.ndarray:
    """``(n,)`` hours between the starts of two spot runs of the job's pool: mean up + mean
    down. A gang's run ends at its first node's reclaim, so its mean up is a node's ÷ N."""
    return gang_uptime(market.pool_stats.mean_up_h, jobs) + market.pool_stats.mean_down_h


def has_deadline(jobs: JobView) -> np.ndarray:
    """``(n,)`` bool: the job has a finite deadline and a known remaining compute."""
    return np.isfinite(jobs.time_to_deadline_h) & np.isfinite(jobs.remaining_compute_h)


def progress_h(overhead_h: np.ndarray, interval_h: np.ndarray) -> np.ndarray:
    """Useful hours in one interval on an instance that still owes ``overhead_h`` (``× speed``
    for reference-hours)."""
    return np.maximum(0.0, interval_h - overhead_h)


def fallback_h(jobs: JobView, fallback_speed: np.ndarray | None = None) -> np.ndarray:
    """``(n,)`` hours the fallback needs for the work left, ``c / s_f`` (``c`` without speeds;
    ``inf`` for a speed of 0)."""
    c = jobs.remaining_compute_h
    if fallback_speed is None:
        return c
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(fallback_speed > 0, c / np.where(fallback_speed > 0, fallback_speed, 1.0),
                        np.inf)


def finish_h(jobs: JobView, speed: np.ndarray | None, overhead_h: np.ndarray) -> np.ndarray:
    """Hours to finish uninterrupted on each offer: ``overhead + c / speed``, ``(n, m)``.

    Args:
        jobs: ``n`` jobs.
        speed: ``(m,)`` or ``(n, m)`` reference-hours per hour (0: never; ``None``: all 1).
        overhead_h: overhead owed before progress starts, ``(n, 1)`` or ``(n, m)`` hours.
    """
    c = jobs.remaining_compute_h[:, None]
    if speed is None:
        return overhead_h + c
    with np.errstate(divide="ignore", invalid="ignore"):
        per_ref = np.where(speed > 0, 1.0 / np.where(speed > 0, speed, 1.0), np.inf)
        return overhead_h + c * per_ref


def in_time(jobs: JobView, speed: np.ndarray, overhead_h: np.ndarray) -> np.ndarray:
    """``(n, m)`` bool: finishing uninterrupted on each offer (:func:`finish_h`) meets the
    deadline, ``r >= overhead + c / speed`` (True without a deadline, False at speed 0).

    Args: ``speed`` ``(m,)`` or ``(n, m)``; ``overhead_h`` ``(n, 1)`` or ``(n, m)`` hours.
    """
    r = jobs.time_to_deadline_h[:, None]
    # (r - overhead)·s >= c: one multiplication per (job, offer), no division
    with np.errstate(invalid="ignore"):
        ok = (r - overhead_h + EPS_H) * speed >= jobs.remaining_compute_h[:, None]
    return ~has_deadline(jobs)[:, None] | ok


def feasible(jobs: JobView, on_demand_now: np.ndarray,
             fallback_speed: np.ndarray | None = None) -> np.ndarray:
    """``(n,)`` bool: committing to the fallback now still meets the deadline (always True
    without one). ``on_demand_now``: the job already runs on on-demand, its fallback, and pays
    ``o`` instead of ``d``. ``fallback_speed``: ``(n,)`` speed of the fallback (default 1)."""
    need = fallback_h(jobs, fallback_speed) + np.where(on_demand_now, jobs.overhead_left_h,
                                                       jobs.restart_overhead_h)
    return ~has_deadline(jobs) | (jobs.time_to_deadline_h >= need - EPS_H)


def wait_safe(jobs: JobView, fallback_speed: np.ndarray | None = None) -> np.ndarray:
    """``(n,)`` bool: running nothing for one interval keeps the on-demand fallback (of speed
    ``fallback_speed``, default 1) in time."""
    slack = jobs.time_to_deadline_h - jobs.decision_interval_h - fallback_h(jobs, fallback_speed) \
        - jobs.restart_overhead_h
    return ~has_deadline(jobs) | (slack >= -EPS_H)


def spot_safe(jobs: JobView, overhead_h: np.ndarray, speed: np.ndarray | None = None,
              fallback_speed: np.ndarray | None = None) -> np.ndarray:
    """Whether one interval on a spot instance is safe.

    Args:
        jobs: the jobs.
        overhead_h: overhead the spot instance still owes at the start of the interval,
            ``(n,)``, ``(n, 1)`` or ``(n, m)`` (``d`` for a new instance, ``o`` for the
            current one).
        speed: the spot offer's speed, ``(n,)`` with an ``(n,)`` overhead, else ``(m,)`` or
            ``(n, m)`` (default 1).
        fallback_speed: ``(n,)`` speed of the on-demand fallback (default 1).

    Returns:
        bool of the broadcast shape of ``overhead_h`` and ``speed``: either the job finishes within the interval and before
        the deadline, or, reclaimed at its end with the unsaved progress lost, it can still
        launch the fallback and finish in time. Progress and the lost rework are hours on the
        spot offer, worth ``speed / fallback_speed`` hours of the fallback each.
    """
    shape = np.shape(overhead_h)
    col = (lambda a: a[:, None]) if len(shape) == 2 else (lambda a: a)
    c, r = col(jobs.remaining_compute_h), col(jobs.time_to_deadline_h)
    g, d = col(jobs.decision_interval_h), col(jobs.restart_overhead_h)
    tau, age = col(jobs.checkpoint_interval_h), col(jobs.checkpoint_age_h)
    p = progress_h(overhead_h, g)
    lost = np.where(tau > 0, np.minimum(tau, age + p), 0.0)
    if speed is None and fallback_speed is None:
        finishes = p >= c
        ok_finish = r >= overhead_h + c - EPS_H
        ok_fallback = r - g >= c - np.minimum(p, c) + lost + d - EPS_H
        ok = np.where(finishes, ok_finish, ok_fallback)
    else:
        # The same tests, arranged so that only a few operations are (n, m): not finishing,
        # r - g - d - c_f >= (lost - p) · s / s_f; finishing (p·s >= c), (r - o)·s >= c.
        s = np.ones(shape) if speed is None else np.asarray(speed, dtype=float)
        s_f = np.ones(len(jobs)) if fallback_speed is None else fallback_speed
        with np.errstate(divide="ignore", invalid="ignore"):
            per_f = col(np.where(s_f > 0, 1.0 / np.where(s_f > 0, s_f, 1.0), np.inf))
            spare = r - g - d - col(fallback_h(jobs, fallback_speed)) + EPS_H
            ok = spare >= ((lost - p) * per_f) * s
        reach = p * np.max(s, initial=0.0) >= c     # some offer may finish in the interval
        if np.any(reach):
            finishes = p * s >= c
            ok_finish = (r - overhead_h + EPS_H) * s >= c
            ok = np.where(finishes, ok_finish, ok)
    return ~col(has_deadline(jobs)) | ok


def slack_h(jobs: JobView, fallback_speed: np.ndarray | None = None) -> np.ndarray:
    """``(n,)`` hours the job can still lose: ``r - c_f - d`` (one launch of the fallback of
    speed ``fallback_speed`` kept; default 1)."""
    return jobs.time_to_deadline_h - fallback_h(jobs, fallback_speed) - jobs.restart_overhead_h


def launch_sustainable(jobs: JobView, fallback_speed: np.ndarray | None = None) -> np.ndarray:
    """``(n,)`` bool: a new spot instance can pay its overhead and still keep the on-demand
    fallback for one more interval (``slack >= d + g``, :func:`slack_h`); otherwise a launch
    would be forced back to on-demand before making progress. True without a deadline."""
    return ~has_deadline(jobs) | (
        slack_h(jobs, fallback_speed) >= jobs.restart_overhead_h + jobs.decision_interval_h - EPS_H)


def reserve_h(jobs: JobView, market: MarketView, reserve_factor: float,
              fallback_speed: np.ndarray | None = None) -> np.ndarray:
    """Slack to keep for the end game, ``(n,)`` hours.

    Once the slack is down to this reserve the job runs spot when there is spot and on-demand
    when there is not ("fill" mode), so every hour of spot capacity up to the deadline is used.
    Each spot run it then uses costs ``2d`` of slack (launch onto spot, relaunch onto
    on-demand after the reclaim); spot runs start once per ``mean_up + mean_down`` hours of the
    job's spot pool, and fill mode lasts about ``c_f`` hours (the fallback's hours for the work
    left, :func:`fallback_h`). Plus one decision interval.
    """
    cycle = _cycle_h(jobs, market)
    with np.errstate(invalid="ignore", divide="ignore"):
        runs = np.where(np.isfinite(cycle) & (cycle > 0),
                        fallback_h(jobs, fallback_speed) / cycle, 0.0)
    return reserve_factor * 2.0 * jobs.restart_overhead_h * runs + jobs.decision_interval_h


def on_demand_needed(jobs: JobView, market: MarketView, on_demand_now: np.ndarray,
                     reserve_factor: float, band_h: float,
                     fallback_speed: np.ndarray | None = None) -> np.ndarray:
    """``(n,)`` bool: the slack is down to the end-game reserve (:func:`reserve_h`), so idle
    time is no longer affordable and gaps in spot capacity are filled with on-demand.

    Hysteresis: a job already on on-demand stays needed until the slack exceeds the reserve by
    ``band_h`` hours. False for jobs without a deadline. Slack and reserve are those of the
    fallback of speed ``fallback_speed`` (default 1).
    """
    spare = slack_h(jobs, fallback_speed) - reserve_h(jobs, market, reserve_factor, fallback_speed)
    need = np.where(on_demand_now, spare <= band_h, spare <= 0.0)
    return has_deadline(jobs) & need


def flip_age_h(jobs: JobView, market: MarketView, mean_up_h: np.ndarray,
               fallback_speed: np.ndarray | None = None) -> np.ndarray:
    """Minimum age of a spot run before an on-demand job leaves for it, ``(n, m)`` hours.

    Each round trip on-demand → spot → on-demand costs ``2d`` of slack, so the slack ``s``
    pays for ``K = s / 2d`` trips, while about ``N = c_f / (mean_up + mean_down)`` spot runs of
    the pool start before the job is done (``c_f``: the fallback's hours for the work left, of
    speed ``fallback_speed``, default 1). With run lengths Lomax(shape 2, scale λ) a run
    reaches age ``a`` with probability ``(1 + a/λ)^-2``; taking only runs that reach
    ``a* = λ·(sqrt(N/K) - 1)`` spends the slack on the ``K`` longest-lived runs. ``a* = 0`` when
    the slack covers every run (or without a deadline).
    """
    cycle = _cycle_h(jobs, market)
    with np.errstate(invalid="ignore", divide="ignore"):
        runs = np.where(np.isfinite(cycle) & (cycle > 0),
                        fallback_h(jobs, fallback_speed) / cycle, 0.0)
        trips = np.maximum(slack_h(jobs, fallback_speed), 0.0) / (2.0 * jobs.restart_overhead_h)
        ratio = np.where(trips > 0, runs / trips, np.inf)
    factor = np.maximum(np.sqrt(ratio) - 1.0, 0.0)[:, None]
    with np.errstate(invalid="ignore"):
        age = np.where(np.isfinite(factor), mean_up_h * factor, np.inf)
    return np.where(has_deadline(jobs)[:, None] & (jobs.restart_overhead_h > 0)[:, None], age, 0.0)
