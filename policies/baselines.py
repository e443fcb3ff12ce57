"""Published policies our decisions (:mod:`policies.decisions`) are measured against, over the same data as
:func:`policies.decisions.decide` (``(jobs, market) -> Decision``), so the simulator runs them all
the same way. Re-implemented from their descriptions:

- **on-demand**: the cheapest on-demand offer, from start to finish.
- **greedy** (Wu et al., "Can't Be Late", NSDI '24, §3): spot whenever available; otherwise wait
  until the deadline forces on-demand, then stay on it.
- **uniform progress** (same paper, §4): keep progress on the line ``C·t/R`` (``C`` compute,
  ``R`` deadline, ``t`` elapsed): (1) behind the line with no spot → on-demand; (2) spot
  whenever available, and stay on it until reclaimed; (3) hysteresis: an on-demand instance
  is kept until progress reaches ``C·(t + 2d)/R`` (``d`` the restart overhead), and while
  there is no spot; (4) safety net: with ``C(t) + 2d`` or more of the time left used up, idle
  or on-demand jobs go on-demand; with ``C(t) + d``, a warm spot instance is kept until
  reclaimed, anything else goes on-demand. Times are rounded to decision intervals as in the
  authors' code (``rc_cr_threshold``).
- **uniform progress, no condition 2**: the authors' variant without the hysteresis of rule
  (3) (``rc_cr_threshold_no_condition2`` in their code): it leaves on-demand as soon as spot
  appears, and keeps on-demand only while there is no spot.
- **SkyPilot managed jobs** (``sky/jobs/recovery_strategy.py`` behaviour): no deadline; after a
  reclaim FAILOVER relaunches in the same zone/region first, EAGER_NEXT_REGION tries other
  regions first; it retries until capacity appears and never leaves a healthy instance.
  ``od_fallback`` models ``any_of: [spot, on-demand]`` resources (on-demand only when no spot
  can be launched).

In multi-zone markets the single-zone policies stay on their spot zone while it lasts and
otherwise take the cheapest available spot offer.

Speeds (:attr:`policies.views.MarketView.speed`): these policies choose by price per hour, as
published, whatever the speeds. Their deadline arithmetic honours them: the work left
(reference-hours) takes ``c / s`` hours on the on-demand offer they would launch (the cheapest
by price), and an interval on spot offer ``j`` progresses ``s_j / s`` of those hours per hour;
Uniform Progress's line stays in reference-hours. Without speeds every ``s`` is 1 (as before).
"""

from __future__ import annotations

import numpy as np

from policies.deadline import EPS_H, has_deadline
from policies.risk import speed_of
from policies.views import NO_OFFER, NO_ZONE, Decision, JobView, MarketView, Reason


def _cheapest(market: MarketView, mask: np.ndarray) -> np.ndarray:
    """Row-wise cheapest offer under ``mask`` (first in table order on ties), :data:`NO_OFFER`."""
    n = mask.shape[0]
    if mask.shape[1] == 0:
        return np.full(n, NO_OFFER)
    price = np.where(mask, np.broadcast_to(market.price_usd_per_hour, mask.shape), np.inf)
    idx = price.argmin(axis=1)
    return np.where(np.isfinite(price.min(axis=1)), idx, NO_OFFER)


def _masks(jobs: JobView, market: MarketView):
    n, m = len(jobs), len(market.offers)
    avail = np.broadcast_to(market.available, (n, m))
    is_spot = market.offers.is_spot[None, :]
    running = jobs.current != NO_OFFER
    cur = np.maximum(jobs.current, 0)
    on_spot = running & (market.offers.is_spot[cur] if m else False)
    return avail & is_spot, avail & ~is_spot, running, on_spot, running & ~on_spot


def _spot_choice(jobs: JobView, market: MarketView, spot: np.ndarray, on_spot: np.ndarray):
    """Stay on the current spot offer while it is available, else the cheapest spot."""
    n = len(jobs)
    still = on_spot & spot[np.arange(n), np.maximum(jobs.current, 0)]
    return np.where(still, jobs.current, _cheapest(market, spot)), still


def on_demand(jobs: JobView, market: MarketView) -> Decision:
    """All on-demand: keep the running on-demand instance, else the cheapest on-demand offer."""
    _, od, _, _, on_od = _masks(jobs, market)
    offer = np.where(on_od, jobs.current, _cheapest(market, od))
    reason = np.where(on_od, Reason.CONTINUE, Reason.ON_DEMAND_NEEDED)
    return Decision(offer, np.where(offer == NO_OFFER, Reason.NOTHING_AVAILABLE, reason))


def _speed_at(market: MarketView, idx: np.ndarray) -> np.ndarray | None:
    """``(n,)`` speed of offer ``idx[i]`` for job ``i`` (1 for :data:`NO_OFFER`), ``None``
    without speeds."""
    speed = speed_of(market)
    if speed is None:
        return None
    n = len(idx)
    row = np.broadcast_to(speed, (n, speed.shape[-1]))[np.arange(n), np.maximum(idx, 0)]
    return np.where(idx == NO_OFFER, 1.0, row)


def _od_hours(jobs: JobView, od_speed: np.ndarray | None) -> np.ndarray:
    """Hours the work left takes on the on-demand offer (``c / s``; ``c`` without speeds)."""
    c = jobs.remaining_compute_h
    if od_speed is None:
        return c
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(od_speed > 0, c / np.where(od_speed > 0, od_speed, 1.0), np.inf)


def _slack_h(jobs: JobView, od_speed: np.ndarray | None = None) -> np.ndarray:
    return jobs.time_to_deadline_h - _od_hours(jobs, od_speed)


def greedy(jobs: JobView, market: MarketView) -> Decision:
    """Greedy: spot whenever available and safe; wait while waiting one more interval still
    leaves time for on-demand (``r - g >= c + d``); on-demand otherwise."""
    spot, od, _, on_spot, on_od = _masks(jobs, market)
    g, d = jobs.decision_interval_h, jobs.restart_overhead_h
    od_pick = np.where(on_od, jobs.current, _cheapest(market, od))
    od_speed = _speed_at(market, od_pick)
    slack = np.where(has_deadline(jobs), _slack_h(jobs, od_speed), np.inf)
    spot_pick, still = _spot_choice(jobs, market, spot, on_spot)
    # A spot interval is safe when, reclaimed at its end, on-demand still fits (progress on a
    # new instance is max(0, g - d), on the current one max(0, g - o); with speeds, each of
    # its hours is worth s_spot / s_od hours of the on-demand offer).
    owed = np.where(still, jobs.overhead_left_h, d)
    progress = np.maximum(0.0, g - owed)
    if od_speed is not None:
        with np.errstate(divide="ignore", invalid="ignore"):
            progress = progress * np.where(od_speed > 0, _speed_at(market, spot_pick)
                                           / np.where(od_speed > 0, od_speed, 1.0), 0.0)
    spot_ok = slack - g + progress >= d - EPS_H
    wait_ok = slack - g >= d - EPS_H
    use_spot = (spot_pick != NO_OFFER) & spot_ok & ~(on_od & ~wait_ok)
    offer = np.where(use_spot, spot_pick, np.where(wait_ok, NO_OFFER, od_pick))
    reason = np.where(use_spot, Reason.SPOT,
                      np.where(wait_ok, Reason.WAIT_FOR_SPOT, Reason.SAFETY_NET))
    return Decision(offer, reason)


def _ceil_ticks(hours: np.ndarray, g: np.ndarray) -> np.ndarray:
    return np.ceil(hours / g - 1e-9) * g


def uniform_progress(jobs: JobView, market: MarketView) -> Decision:
    """Uniform Progress as the paper states it (rules 1-4 in the module docstring, with the
    on-demand hysteresis of rule 3: leave on-demand for spot only once progress is at least
    ``C·(t + 2d)/R``)."""
    return _uniform_progress(jobs, market, hysteresis=True)


def uniform_progress_no_condition2(jobs: JobView, market: MarketView) -> Decision:
    """The authors' "no condition 2" variant: rule 3 without the hysteresis (on-demand is
    left as soon as spot is available)."""
    return _uniform_progress(jobs, market, hysteresis=False)


def _uniform_progress(jobs: JobView, market: MarketView, hysteresis: bool) -> Decision:
    """Times are rounded to decision intervals: the time left down, the work left (plus
    overheads) up, as a tick-based scheduler sees them."""
    spot, od, running, on_spot, on_od = _masks(jobs, market)
    c_total, c = jobs.compute_h, jobs.remaining_compute_h
    t, r = jobs.elapsed_h, jobs.time_to_deadline_h
    d, g = jobs.restart_overhead_h, jobs.decision_interval_h
    timed = has_deadline(jobs)
    left = np.floor(r / g + 1e-9) * g
    done = c_total - c
    behind = timed & (done < c_total * t / (t + r) - EPS_H)
    # rule 3's hysteresis: below C·(t + 2d)/R an on-demand instance is kept (the authors'
    # condition2 >= 0, i.e. ties keep it)
    keep_od = on_od & timed & (done <= c_total * (t + 2 * d) / (t + r) + EPS_H) \
        if hysteresis else np.zeros(len(jobs), bool)
    spot_pick, still = _spot_choice(jobs, market, spot, on_spot)
    has_spot = spot_pick != NO_OFFER
    od_pick = np.where(on_od, jobs.current, _cheapest(market, od))
    c_od = _od_hours(jobs, _speed_at(market, od_pick))    # hours on the on-demand offer
    idle = ~running | (on_spot & ~still)
    net_2d = timed & (_ceil_ticks(c_od + 2 * d, g) >= left) & (idle | on_od)
    net_d = timed & (_ceil_ticks(c_od + d, g) >= left)
    keep_spot = net_d & on_spot & still & (jobs.overhead_left_h < 1e-9)
    offer = np.full(len(jobs), NO_OFFER)
    reason = np.full(len(jobs), int(Reason.WAIT_FOR_SPOT))
    rules = [  # first match wins
        (keep_spot, jobs.current, Reason.CONTINUE),
        (net_d | net_2d, od_pick, Reason.SAFETY_NET),
        (keep_od, jobs.current, Reason.CONTINUE),                 # rule 3: hysteresis
        (has_spot, spot_pick, Reason.SPOT),                       # rule 2
        (on_od | behind, od_pick, Reason.ON_DEMAND_NEEDED),       # rule 1; keep on-demand
    ]
    decided = np.zeros(len(jobs), bool)
    for mask, pick, why in rules:
        take = mask & ~decided
        offer[take], reason[take] = pick[take], why
        decided |= take
    reason = np.where((offer == jobs.current) & (offer != NO_OFFER) & (reason == Reason.SPOT),
                      Reason.CONTINUE, reason)
    return Decision(offer, reason)


def skypilot(jobs: JobView, market: MarketView, strategy: str = "failover",
             od_fallback: bool = False) -> Decision:
    """SkyPilot managed-job recovery (see the module docstring).

    Args:
        strategy: ``"failover"`` or ``"eager"`` (EAGER_NEXT_REGION).
        od_fallback: also consider on-demand offers (``any_of`` spot / on-demand).

    Raises:
        ValueError: unknown ``strategy``.
    """
    if strategy not in ("failover", "eager"):
        raise ValueError(f"strategy must be 'failover' or 'eager', got {strategy!r}")
    spot, od, running, _, _ = _masks(jobs, market)
    pool = spot | od if od_fallback else spot
    offers = market.offers
    lost = jobs.last_preempted_zone
    lost_region = np.where(lost != NO_ZONE, _zone_region(offers)[np.maximum(lost, 0)], -1)
    same_zone = offers.zone[None, :] == lost[:, None]
    same_region = offers.region[None, :] == lost_region[:, None]
    if strategy == "failover":
        tiers = [same_zone, same_region, np.ones_like(same_zone)]
    else:
        tiers = [~same_region, same_region & ~same_zone, np.ones_like(same_zone)]
    pick = np.full(len(jobs), NO_OFFER)
    for tier in tiers:
        spot_first = _cheapest(market, pool & tier & offers.is_spot[None, :])
        any_first = _cheapest(market, pool & tier)
        choice = np.where(spot_first != NO_OFFER, spot_first, any_first)
        pick = np.where(pick == NO_OFFER, choice, pick)
    offer = np.where(running, jobs.current, pick)
    reason = np.where(running, Reason.CONTINUE,
                      np.where(pick == NO_OFFER, Reason.WAIT_FOR_SPOT, Reason.SPOT))
    return Decision(offer, reason)


def _zone_region(offers) -> np.ndarray:
    """Region index of each zone index."""
    out = np.zeros(len(offers.zone_names), int)
    out[offers.zone] = offers.region
    return out
