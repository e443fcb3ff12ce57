"""The placement path as it was before the batched one: :mod:`policies.decisions` with its dense
``(n, m)`` grids, kept verbatim as the reference the equivalence tests and the speed benchmark
compare with (placement only: migration still runs the dense path in the policy itself; the
knobs are the policy's own :class:`~policies.decisions.PolicyConfig`), plus the lookahead's
advice, which both paths take from the same function."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from policies import budget, deadline, lookahead, risk, zones
from policies.availability import residual_up_h
from policies.decisions import DEFAULT_CONFIG, PolicyConfig, _advice
from policies.views import (
    NO_OFFER,
    NO_ZONE,
    Decision,
    JobView,
    MarketView,
    OfferTable,
    Reason,
)


@dataclass(frozen=True)
class _Ctx:
    """Per-call precomputation shared by placement and migration (all ``(n, m)`` or ``(n,)``)."""

    jobs: JobView
    market: MarketView
    cfg: PolicyConfig
    cand: np.ndarray        # may be launched now (available, zone not cooling)
    price: np.ndarray       # USD/h the job pays there (N × the price for a gang of N nodes)
    eff: np.ndarray         # risk-aware USD per useful hour
    finish: np.ndarray      # expected USD to finish there
    resid_up: np.ndarray    # expected remaining uptime (inf on-demand; a gang's: ÷ N)
    rank: np.ndarray        # (m,) static tie-break rank
    on_spot: np.ndarray     # (n,) running on a spot instance
    on_od: np.ndarray       # (n,) running on an on-demand instance
    best_od: np.ndarray     # (n,) the on-demand fallback (NO_OFFER: none available)
    cost_od: np.ndarray     # (n,) its expected cost to finish (inf: none)
    # With speeds only (None without: every offer at the reference speed):
    speed: np.ndarray | None = None     # (m,) or (n, m) speeds, 0 where unusable
    in_time: np.ndarray | None = None   # (n, m) a new launch there would finish in time
    fb_speed: np.ndarray | None = None  # (n,) speed of the fallback (1 where none)


def tie_break_rank(offers: OfferTable) -> np.ndarray:
    """``(m,)`` static rank of each offer, 0 first: on-demand before spot, then lower
    interruption risk, then series key. Near-ties in cost are broken by it."""
    order = np.lexsort((np.array(offers.keys, dtype=object).astype(str),
                        offers.interruption_risk, offers.is_spot))
    rank = np.empty(len(offers), int)
    rank[order] = np.arange(len(offers))
    return rank


def _hazard(jobs: JobView, market: MarketView, cfg: PolicyConfig) -> np.ndarray:
    """Reclaims per hour, ``(m,)``/``(n, m)``: history, raised for zones correlated with a
    recent reclaim (only computed when some job had one)."""
    offers = market.offers
    lam = risk.hazard_per_h(market.offer_stats, offers.is_spot)
    recent = (jobs.last_preempted_zone != NO_ZONE) & \
        (jobs.since_preemption_h < cfg.correlation_window_h)
    if market.zone_correlation is not None and recent.any():
        lam = lam * zones.correlated_hazard_factor(jobs, offers, market.zone_correlation,
                                                   cfg.correlation_window_h)
    return lam


def _context(jobs: JobView, market: MarketView, cfg: PolicyConfig) -> _Ctx:
    n, m = len(jobs), len(market.offers)
    offers = market.offers
    cand = np.broadcast_to(market.available, (n, m))
    speed = risk.speed_of(market)
    if speed is not None:
        cand = cand & (speed > 0)  # an offer that makes no progress (or a nonsense speed) is none
    if ((jobs.last_preempted_zone != NO_ZONE) & (jobs.since_preemption_h < cfg.same_zone_cooldown_h)).any():
        cand = cand & ~zones.cooling_zone_mask(jobs, offers, cand, cfg.same_zone_cooldown_h,
                                               cfg.same_zone_strict)
    eff = risk.effective_price(jobs, market, _hazard(jobs, market, cfg))
    price = np.broadcast_to(market.price_usd_per_hour, (n, m))
    finish = risk.expected_cost_to_finish(jobs, price, eff)
    running = jobs.current != NO_OFFER
    resid = np.broadcast_to(np.where(offers.is_spot, residual_up_h(market.offer_stats), np.inf),
                            (n, m))
    # A gang pays every node and runs until its first node is reclaimed.
    price = risk.gang_price(price, jobs)
    resid = risk.gang_uptime(resid, jobs)
    cur_spot = offers.is_spot[np.maximum(jobs.current, 0)] if m else np.zeros(n, bool)
    rank = tie_break_rank(market.offers)
    od = cand & ~offers.is_spot[None, :]
    if speed is None:
        best_od, cost_od = _pick(finish, od, rank)
        return _Ctx(jobs, market, cfg, cand, price, eff, finish, resid, rank,
                    running & cur_spot, running & ~cur_spot, best_od, cost_od)
    in_time = deadline.in_time(jobs, speed, jobs.restart_overhead_h[:, None])
    best_od, cost_od = _deadline_pick(jobs.remaining_compute_h, finish, speed, in_time, od, rank)
    fb_speed = _speed_at(speed, best_od)
    return _Ctx(jobs, market, cfg, cand, price, eff, finish, resid, rank,
                running & cur_spot, running & ~cur_spot, best_od, cost_od,
                speed, in_time, fb_speed)


def _pick(values: np.ndarray, mask: np.ndarray, rank: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row-wise argmin of ``values`` over ``mask`` with near-ties broken by ``rank``.
    Returns ``(index, value)``, :data:`NO_OFFER`/``inf`` where a row has no candidate.
    Rows with a tie (several columns within 1e-9 of the best) are re-resolved by rank; the
    others keep the plain argmin, so the common no-tie case costs two passes plus a count."""
    n = values.shape[0]
    if values.shape[1] == 0:
        return np.full(n, NO_OFFER), np.full(n, np.inf)
    v = np.where(mask, values, np.inf)
    idx = v.argmin(axis=1)
    best = v[np.arange(n), idx]
    ok = np.isfinite(best)
    tol = 1e-9 * np.maximum(np.abs(np.where(ok, best, 0.0)), 1.0)
    near = v <= (best + tol)[:, None]
    tied = np.flatnonzero(ok & (near.sum(axis=1) > 1))
    if len(tied):
        idx[tied] = np.where(near[tied], rank[None, :], np.iinfo(np.int64).max).argmin(axis=1)
    return np.where(ok, idx, NO_OFFER), best


def _speed_at(speed: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """``(n,)`` speed of offer ``idx[i]`` for job ``i`` (``speed`` ``(m,)`` or ``(n, m)``); 1 for
    :data:`NO_OFFER`."""
    n = len(idx)
    picked = np.broadcast_to(speed, (n, speed.shape[-1]))[np.arange(n), np.maximum(idx, 0)]
    return np.where(idx == NO_OFFER, 1.0, picked)


def _deadline_pick(remaining: np.ndarray, finish: np.ndarray, speed: np.ndarray,
                   in_time: np.ndarray, mask: np.ndarray,
                   rank: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per job, the cheapest to finish under ``mask`` among the offers that finish in time
    (``in_time``, :func:`deadline.in_time`); for a job where none does, the cheapest of those
    that finish first with a new launch (the same overhead everywhere: the least
    ``remaining / speed``). ``(index, cost)`` as :func:`_pick`."""
    idx, cost = _pick(finish, mask & in_time, rank)
    late = (idx == NO_OFFER) & mask.any(axis=1)
    if late.any():
        rows = np.flatnonzero(late)
        sub = np.broadcast_to(speed, mask.shape)[rows]
        with np.errstate(divide="ignore", invalid="ignore"):
            hours = remaining[rows, None] / np.where(sub > 0, sub, np.nan)
        h = np.where(mask[late] & np.isfinite(hours), hours, np.inf)
        first = h.min(axis=1, keepdims=True)
        near = mask[late] & (h <= first + 1e-9 * np.maximum(np.abs(first), 1.0))
        idx[late], cost[late] = _pick(finish[late], near, rank)
    return idx, cost


def _choose(offer: np.ndarray, reason: np.ndarray, mask: np.ndarray, new_offer: np.ndarray,
            new_reason: Reason) -> None:
    """In place: where ``mask`` (and not yet decided, reason < 0), set offer and reason."""
    take = mask & (reason < 0)
    offer[take] = new_offer[take]
    reason[take] = new_reason


def _spot_at(idx: np.ndarray, is_spot: np.ndarray) -> np.ndarray:
    """``(n,)`` bool: the chosen offer index is a spot offer (False for :data:`NO_OFFER`)."""
    if len(is_spot) == 0:
        return np.zeros(len(idx), bool)
    return (idx != NO_OFFER) & is_spot[np.maximum(idx, 0)]


def _place(ctx: _Ctx) -> Decision:
    jobs, market, cfg = ctx.jobs, ctx.market, ctx.cfg
    n, is_spot = len(jobs), market.offers.is_spot
    offer, reason = np.full(n, NO_OFFER), np.full(n, -1)
    none = np.full(n, NO_OFFER)
    _choose(offer, reason, budget.must_stop(jobs.spent_usd, jobs.budget_usd, jobs.user_spent_usd,
                                            jobs.user_budget_usd), none, Reason.BUDGET_STOP)
    timed = deadline.has_deadline(jobs)
    fb = ctx.fb_speed
    spot = ctx.cand & is_spot[None, :]
    best_od, cost_od = ctx.best_od, ctx.cost_od
    if ctx.speed is None:
        launchable = deadline.spot_safe(jobs, jobs.restart_overhead_h) & \
            deadline.launch_sustainable(jobs)
        any_spot, cost_any_spot = _pick(ctx.finish, spot, ctx.rank)
        best_spot = np.where(launchable, any_spot, NO_OFFER)
        cost_spot = np.where(launchable, cost_any_spot, np.inf)
    else:
        # Each spot offer is judged at its own speed: one that would not finish in time, or
        # whose interval would leave the fallback late, is not a candidate.
        d = jobs.restart_overhead_h[:, None]
        safe = spot & deadline.spot_safe(jobs, d, ctx.speed, fb) & \
            deadline.launch_sustainable(jobs, fb)[:, None]
        best_spot, cost_spot = _pick(ctx.finish, safe & ctx.in_time, ctx.rank)
        # No spot offer in time: one that is not still makes progress while it is safe (the
        # fallback finishes), better than waiting when it costs less than the fallback.
        slow = np.flatnonzero(timed & (best_spot == NO_OFFER) & safe.any(axis=1))
        if len(slow):
            idx, cost = _pick(ctx.finish[slow], safe[slow], ctx.rank)
            cheaper = cost <= cost_od[slow]
            best_spot[slow[cheaper]], cost_spot[slow[cheaper]] = idx[cheaper], cost[cheaper]
        # Without a deadline every spot offer is safe and in time: the best is the best safe
        # one. With one, the unsafe spot offers matter only where there is no on-demand.
        any_spot, cost_any_spot = best_spot.copy(), cost_spot.copy()
        alone = np.flatnonzero(timed & (best_od == NO_OFFER))
        if len(alone):
            any_spot[alone], cost_any_spot[alone] = _deadline_pick(
                jobs.remaining_compute_h[alone], ctx.finish[alone],
                np.broadcast_to(ctx.speed, spot.shape)[alone], ctx.in_time[alone], spot[alone],
                ctx.rank)
        # Without on-demand the spot pick is what the job commits to.
        fb = np.where(best_od == NO_OFFER, _speed_at(ctx.speed, any_spot), fb)
    spot_wins = (cost_any_spot < cost_od) | ((cost_any_spot == cost_od) & (
        ctx.rank[np.maximum(any_spot, 0)] < ctx.rank[np.maximum(best_od, 0)]))
    best_any = np.where(spot_wins | (best_od == NO_OFFER), any_spot, best_od)
    has_od, has_spot = best_od != NO_OFFER, best_spot != NO_OFFER
    # No deadline (or unknown duration): the lowest expected cost available now, never wait.
    untimed = ~timed & (best_any != NO_OFFER)
    _choose(offer, reason, untimed & _spot_at(best_any, is_spot), best_any, Reason.SPOT)
    _choose(offer, reason, untimed, best_any, Reason.ON_DEMAND_CHEAPER)
    infeasible = timed & ~deadline.feasible(jobs, np.zeros(n, bool), fb)
    _choose(offer, reason, infeasible & has_od, best_od, Reason.DEADLINE_INFEASIBLE)
    advice = _advice(jobs, market, cfg, np.full(n, lookahead.WAIT), any_spot != NO_OFFER,
                     any_spot, best_od, fb)
    _choose(offer, reason, timed & has_od & (advice == lookahead.ON_DEMAND), best_od,
            Reason.ON_DEMAND_NEEDED)
    _choose(offer, reason, timed & has_od & (advice == lookahead.WAIT)
            & deadline.wait_safe(jobs, fb), none, Reason.WAIT_FOR_SPOT)
    _choose(offer, reason, timed & has_spot & (cost_spot <= cost_od), best_spot, Reason.SPOT)
    _choose(offer, reason, timed & has_od & ~deadline.wait_safe(jobs, fb), best_od,
            Reason.SAFETY_NET)
    _choose(offer, reason, timed & has_od & has_spot, best_od, Reason.ON_DEMAND_CHEAPER)
    needed = deadline.on_demand_needed(jobs, market, np.zeros(n, bool), cfg.reserve_factor,
                                       cfg.on_demand_band_h, fb)
    _choose(offer, reason, timed & has_od & needed, best_od, Reason.ON_DEMAND_NEEDED)
    # Without an on-demand fallback the safety net does not exist: any spot beats waiting.
    no_od_spot = timed & ~has_od & (any_spot != NO_OFFER)
    _choose(offer, reason, no_od_spot & infeasible, any_spot, Reason.DEADLINE_INFEASIBLE)
    _choose(offer, reason, no_od_spot, any_spot, Reason.SPOT)
    _choose(offer, reason, timed & has_od, none, Reason.WAIT_FOR_SPOT)
    _choose(offer, reason, np.ones(n, bool), none, Reason.NOTHING_AVAILABLE)
    return Decision(offer, reason)


def _empty_market(jobs: JobView) -> Decision:
    """No offers at all: nothing new can start; a running job keeps its instance (an empty
    offer list says nothing about it) unless its budget is spent."""
    stop = budget.must_stop(jobs.spent_usd, jobs.budget_usd, jobs.user_spent_usd,
                            jobs.user_budget_usd)
    keep = (jobs.current != NO_OFFER) & ~stop
    reason = np.where(stop, Reason.BUDGET_STOP,
                      np.where(keep, Reason.CONTINUE, Reason.NOTHING_AVAILABLE))
    return Decision(np.where(keep, jobs.current, NO_OFFER), reason)


def decide_placement(jobs: JobView, market: MarketView,
                     cfg: PolicyConfig = DEFAULT_CONFIG) -> Decision:
    """Choose an offer (or to wait) for each job that runs nothing now.

    Args:
        jobs: ``n`` jobs; ``current`` is ignored (taken as :data:`NO_OFFER`).
        market: the market now, ``m`` offers; ``available`` must already exclude offers the
            job's constraints refuse (:func:`policies.constraints.filter_offers`).
        cfg: policy knobs.

    Returns:
        A :class:`Decision`: per job an offer index into ``market.offers`` or :data:`NO_OFFER`
        (wait / nothing fits / budget stop), with the :class:`Reason`. Jobs without a deadline
        (or an unknown duration) never wait: they take the lowest expected cost available.
        Pure, deterministic; ``O(n·m)`` numpy work.
    """
    idle = JobView(**{**jobs.__dict__, "current": np.full(len(jobs), NO_OFFER),
                      "overhead_left_h": np.zeros(len(jobs))})
    if len(market.offers) == 0:
        return _empty_market(idle)
    return _place(_context(idle, market, cfg))
