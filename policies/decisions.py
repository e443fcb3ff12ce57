"""Placement and migration decisions: where each job should run during the next decision interval.

Two entry points, over the same plain data (:mod:`policies.views`), for the two moments the
controller decides:

- :func:`decide_placement` for jobs that run nothing (pending, or just reclaimed/migrating);
- :func:`should_migrate` for jobs running on an instance.

:func:`decide` answers both at once (the simulator calls it every tick). The rules, in order:

1. **Budget**: at 100 % of the job's or the user's limit, checkpoint and stop.
2. **Safety net** (deadline jobs): only choices that keep the on-demand fallback in time
   (:mod:`policies.deadline`); a deadline no longer feasible runs on-demand to finish earliest.
3. **Spot while it pays**: the offer with the lowest risk-aware expected cost to finish
   (:mod:`policies.risk`: price × inflation ÷ speed per reference-hour of the work left, plus
   the launch), never spot in the zone just reclaimed while it cools down and with
   correlated zones' hazard raised (:mod:`policies.zones`). With a deadline, only offers that
   would finish in time uninterrupted (``r >= d + c / speed``) compete: a slower offer that is
   cheaper to finish but would miss is not taken. When no spot offer in time is available, a
   slower safe one that costs less per reference-hour than the on-demand fallback is run
   instead of waiting: it makes progress until the safety net moves the job.
4. **Deadline**: within what is safe, spot, on-demand or waiting as the lookahead's table says
   (:mod:`policies.lookahead`: the expected cost to finish, minimised by dynamic programming
   over a model of the pool's spot availability). An idle job takes on-demand or waits when the
   table says so, a spot job commits to on-demand, an on-demand job leaves for spot only when
   the table says so. Jobs the table does not cover wait while the slack exceeds the end-game
   reserve; below it, fill gaps in spot with on-demand
   (:func:`policies.deadline.on_demand_needed`), and leave on-demand only for spot runs old
   enough to be worth the slack a round trip costs (:func:`policies.deadline.flip_age_h`).
5. **Migration**: move a running job when the expected saving over its remaining runtime exceeds
   the move's cost (overhead billed, lost progress) by ``migration_margin``; hysteresis: no
   price move within ``min_dwell_h`` of a start, never back to the offer just left within
   ``pingpong_cooldown_h``. The saving is per reference-hour, so a faster-per-dollar offer
   pays for its move as a cheaper one does.

**The on-demand fallback** (with speeds, :attr:`policies.views.MarketView.speed`): the
cheapest-to-finish available on-demand offer among those that finish in time from now with a
new launch (``r >= d + c / speed``); when none does, the one that finishes first (cheapest on a
tie); without a deadline, the cheapest to finish. It is the offer the safety net, "on-demand
needed" and "on-demand cheaper" launch, and its speed is the one every rule of
:mod:`policies.deadline` is given, so what is checked is what would run. A job already on
on-demand commits to its current instance (its speed, the overhead it still owes); when that
no longer finishes in time but the fallback does, it moves there (safety net); when nothing
finishes in time, a running job moves to the fallback only if that finishes strictly earlier.
Without speeds every offer is as fast and this is the cheapest on-demand offer, as before.
An offer whose speed is not a positive finite number makes no progress: it is never a
candidate (not for a launch, a move or the fallback), whatever is left to do.

**Gangs** (:attr:`policies.views.JobView.nodes` = ``N``): every cost is the gang's (``N ×``
the offer's price: the effective price, the launch, the move cost, the on-demand fallback) and
so is the risk (``N ×`` a node's hazard, a remaining uptime ``÷ N``): a gang is interrupted
when any of its nodes is (:mod:`policies.risk`). Offers without room for ``N`` instances are
not ``available`` to it (:mod:`policies.eligibility`).

Ties break on the static offer rank: on-demand before spot, lower interruption risk, series key.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, is_dataclass, replace

import numpy as np

from policies import budget, deadline, lookahead, risk, zones
from policies.availability import residual_up_h
from policies.pairs import Pairs
from policies.views import (
    NO_OFFER,
    NO_ZONE,
    AvailabilityStats,
    Decision,
    JobView,
    MarketView,
    MigrationDecision,
    OfferTable,
    Reason,
)


@dataclass(frozen=True)
class PolicyConfig:
    """Tunable knobs of the policy. Defaults were chosen on traces held out of the benchmark
    (``benchmarks/policies/TUNING.md``), which also showed that stopping an on-demand job
    ahead of schedule and leaving on-demand for spot runs of any age both cost more: neither
    is a knob. ``same_zone_cooldown_h`` made no difference there and is kept at 1 h for the
    "never the same zone right after a reclaim" rule.
    """

    # Scales the end-game slack reserve (:func:`deadline.reserve_h`).
    reserve_factor: float = 2.0
    # An on-demand job is let go only when this many hours ahead.
    on_demand_band_h: float = 0.5
    # A move needs saving > (1 + margin) × move cost.
    migration_margin: float = 0.5
    # No price-driven move sooner than this after an instance started.
    min_dwell_h: float = 1.0
    # Never move back to the offer just left within this.
    pingpong_cooldown_h: float = 6.0
    # After a reclaim, no spot in that zone for this long while another zone has spot;
    # ``same_zone_strict``: not even without an alternative.
    same_zone_cooldown_h: float = 1.0
    same_zone_strict: bool = False
    # How long correlated zones' hazard stays raised after a reclaim.
    correlation_window_h: float = 6.0
    # The lookahead's cost of a step spent waiting, in on-demand steps
    # (:data:`policies.lookahead.WAIT_COST`): near-ties go to progress.
    wait_cost: float = lookahead.WAIT_COST


DEFAULT_CONFIG = PolicyConfig()


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


def _candidates(jobs: JobView, market: MarketView, cfg: PolicyConfig,
                progress: np.ndarray | None) -> np.ndarray:
    """``(n, m)`` bool: offers each job may launch now (available, making progress, not in a
    zone cooling down after its reclaim). ``progress``: bool ``(m,)``/``(n, m)``, the speed is
    a positive number (``None``: no speeds, all make progress)."""
    n, m = len(jobs), len(market.offers)
    cand = np.broadcast_to(market.available, (n, m))
    if progress is not None:
        cand = cand & progress  # an offer that makes no progress (or a nonsense speed) is none
    if ((jobs.last_preempted_zone != NO_ZONE) & (jobs.since_preemption_h < cfg.same_zone_cooldown_h)).any():
        cand = cand & ~zones.cooling_zone_mask(jobs, market.offers, cand, cfg.same_zone_cooldown_h,
                                               cfg.same_zone_strict)
    return cand


def _context(jobs: JobView, market: MarketView, cfg: PolicyConfig) -> _Ctx:
    n, m = len(jobs), len(market.offers)
    offers = market.offers
    speed = risk.speed_of(market)
    cand = _candidates(jobs, market, cfg, None if speed is None else speed > 0)
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


def _at(values: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """``(n,)`` ``values[i, idx[i]]`` (``values`` ``(m,)`` or ``(n, m)``); ``nan`` for
    :data:`NO_OFFER`."""
    n = len(idx)
    if np.shape(values)[-1] == 0:
        return np.full(n, np.nan)
    picked = np.broadcast_to(values, (n, np.shape(values)[-1]))[np.arange(n), np.maximum(idx, 0)]
    return np.where(idx == NO_OFFER, np.nan, picked)


def _speed_at(speed: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """``(n,)`` speed of offer ``idx[i]`` for job ``i`` (``speed`` ``(m,)`` or ``(n, m)``); 1 for
    :data:`NO_OFFER`."""
    return np.where(idx == NO_OFFER, 1.0, _at(speed, idx))


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


def _advice(jobs: JobView, market: MarketView, cfg: PolicyConfig, running: np.ndarray,
            spot_up: np.ndarray, spot: np.ndarray, best_od: np.ndarray,
            fb: np.ndarray | None) -> np.ndarray:
    """``(n,)`` the cost-optimal choice of :mod:`policies.lookahead` for deadline jobs that have an
    on-demand fallback (:data:`lookahead.NO_ADVICE` for the others).

    ``running``: :data:`lookahead.WAIT` / ``SPOT`` / ``ON_DEMAND`` per job; ``spot_up``: a spot
    offer the job may use now exists; ``spot``: that offer (or the current spot instance;
    :data:`NO_OFFER`: spot is down, and the cheapest spot offer per hour of work stands for the
    price spot will have when it is back); ``best_od``/``fb``: the fallback and its speed."""
    n = len(jobs)
    timed = deadline.has_deadline(jobs) & (best_od != NO_OFFER)
    if not timed.any() or not market.offers.is_spot.any():
        return np.full(n, lookahead.NO_ADVICE, np.int8)
    speed = risk.speed_of(market)
    # USD per reference-hour of work on each offer (inf where it makes no progress)
    per_work = risk.per_reference_h(np.asarray(market.price_usd_per_hour, dtype=float), speed)
    cheapest = np.broadcast_to(np.where(market.offers.is_spot, per_work, np.inf),
                               (n, len(market.offers))).argmin(axis=1)
    spot = np.where(spot != NO_OFFER, spot, cheapest)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = _at(per_work, spot) / _at(per_work, best_od)
        sigma = None if speed is None else _at(speed, spot) / (1.0 if fb is None else fb)
    stats = market.pool_stats
    owed = np.where(running != lookahead.WAIT, jobs.overhead_left_h, 0.0)
    return lookahead.advise(
        np.where(timed, jobs.time_to_deadline_h, np.inf), deadline.fallback_h(jobs, fb) + owed,
        running, spot_up, np.where(spot_up, stats.up_age_h, stats.down_age_h),
        risk.gang_uptime(stats.mean_up_h, jobs), stats.mean_down_h, ratio,
        jobs.restart_overhead_h, sigma, jobs.decision_interval_h, cfg.wait_cost)


@dataclass(frozen=True)
class _Picks:
    """Per job ``(n,)``: the offers a placement chooses among (:data:`NO_OFFER`/``inf``: none)
    and their expected costs to finish; ``fb`` the speed committed to (``None`` without
    speeds)."""

    best_od: np.ndarray
    cost_od: np.ndarray
    best_spot: np.ndarray       # the spot offer to launch (safe, in time)
    cost_spot: np.ndarray
    any_spot: np.ndarray        # the spot offer when there is no on-demand fallback
    cost_any_spot: np.ndarray
    fb: np.ndarray | None


def _place(ctx: _Ctx) -> Decision:
    return _settle(ctx.jobs, ctx.market, ctx.cfg, lambda: ctx.rank, _dense_picks(ctx))


def _dense_picks(ctx: _Ctx) -> _Picks:
    jobs = ctx.jobs
    is_spot = ctx.market.offers.is_spot
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
    return _Picks(best_od, cost_od, best_spot, cost_spot, any_spot, cost_any_spot, fb)


def _settle(jobs: JobView, market: MarketView, cfg: PolicyConfig,
            rank: Callable[[], np.ndarray], picks: _Picks) -> Decision:
    """The placement rules (module docstring) per job, given its picks (``rank()``: the
    offers' :func:`tie_break_rank`, asked for only on a tie)."""
    n, is_spot = len(jobs), market.offers.is_spot
    offer, reason = np.full(n, NO_OFFER), np.full(n, -1)
    none = np.full(n, NO_OFFER)
    _choose(offer, reason, budget.must_stop(jobs.spent_usd, jobs.budget_usd, jobs.user_spent_usd,
                                            jobs.user_budget_usd), none, Reason.BUDGET_STOP)
    timed = deadline.has_deadline(jobs)
    best_od, cost_od, fb = picks.best_od, picks.cost_od, picks.fb
    best_spot, cost_spot = picks.best_spot, picks.cost_spot
    any_spot, cost_any_spot = picks.any_spot, picks.cost_any_spot
    spot_wins = cost_any_spot < cost_od
    # equal costs are both finite (two offers) or both none (inf): only the former need ranks
    tie = (cost_any_spot == cost_od) & (any_spot != NO_OFFER)
    if tie.any():
        order = rank()
        spot_wins |= tie & (order[np.maximum(any_spot, 0)] < order[np.maximum(best_od, 0)])
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


# Job fields the placement reads at every candidate pair.
_PAIR_FIELDS = ("compute_h", "remaining_compute_h", "time_to_deadline_h", "decision_interval_h",
                "restart_overhead_h", "checkpoint_interval_h", "checkpoint_age_h")


def _on_pairs(jobs: JobView, market: MarketView) -> bool:
    """The market has one row of prices and offer stats for all jobs and the jobs every field
    the pair computation reads: :func:`_place_pairs` applies."""
    m, n = len(market.offers), len(jobs)
    per_offer = [market.price_usd_per_hour, *market.offer_stats.__dict__.values()]
    return all(np.shape(v) == (m,) for v in per_offer) and all(
        getattr(jobs, f).shape == (n,) for f in (*_PAIR_FIELDS, "move_extra_h"))


def _correlation_active(jobs: JobView, market: MarketView, cfg: PolicyConfig) -> bool:
    recent = (jobs.last_preempted_zone != NO_ZONE) & \
        (jobs.since_preemption_h < cfg.correlation_window_h)
    return market.zone_correlation is not None and bool(recent.any())


def _pair_hazard(jobs: JobView, market: MarketView, cfg: PolicyConfig, pr: Pairs) -> np.ndarray:
    """:func:`_hazard` at the pairs (``(P,)``)."""
    offers = market.offers
    lam = pr.at(risk.hazard_per_h(market.offer_stats, offers.is_spot))
    if _correlation_active(jobs, market, cfg):
        recent = (jobs.last_preempted_zone != NO_ZONE) & \
            (jobs.since_preemption_h < cfg.correlation_window_h)
        corr = market.zone_correlation
        lost = pr.row(np.maximum(jobs.last_preempted_zone, 0))
        zone = offers.zone[pr.cols]
        rho = corr[pr.rows, lost, zone] if corr.ndim == 3 else corr[lost, zone]
        rho = np.maximum(rho, 0.0)
        lam = lam * (1.0 + np.where(pr.row(recent) & offers.is_spot[pr.cols], rho, 0.0))
    return lam


def _notices_matter(jobs: JobView, market: MarketView) -> bool:
    """Some offer's interruption notice may save the rework (:func:`risk.loss_per_reclaim_h`)."""
    return bool(market.offers.interruption_notice_s.size and (jobs.checkpoint_interval_h > 0).any())


def _usable(notice: np.ndarray, final_s: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return (notice > 0) & (notice >= final_s)


def _final_s(jobs: JobView) -> np.ndarray:
    return jobs.final_checkpoint_s if jobs.final_checkpoint_s.size else np.zeros(len(jobs))


def _pair_per_h(jobs: JobView, market: MarketView, cfg: PolicyConfig,
                pr: Pairs) -> tuple[np.ndarray, np.ndarray]:
    """``(USD per useful hour, USD per hour)`` at the pairs (``(P,)``): the price the job pays
    (``N ×`` for a gang) × the inflation of :func:`risk.effective_price`.

    Jobs alike in overhead, rework, final checkpoint and nodes share these figures over the
    offers, so when hazards are per offer they are tabled once per kind of job (``(K, m)``) and
    read at the pairs; else computed at every pair. The same operations either way."""
    rows, m = pr.rows, pr.m
    notices = _notices_matter(jobs, market)
    nodes = risk.gang_nodes(jobs)
    overhead, rework = jobs.restart_overhead_h, 0.5 * jobs.checkpoint_interval_h
    price = market.price_usd_per_hour
    if not _correlation_active(jobs, market, cfg):
        keys = np.stack([overhead, rework, _final_s(jobs) if notices else np.zeros(len(jobs)),
                         np.ones(len(jobs)) if nodes is None else nodes], axis=1)
        uniq, inv = np.unique(keys, axis=0, return_inverse=True)
        if len(uniq) * m <= max(len(rows), m):
            lam = risk.hazard_per_h(market.offer_stats, market.offers.is_spot)[None, :]
            loss = (uniq[:, 0] + uniq[:, 1])[:, None]
            if notices:
                loss = uniq[:, :1] + np.where(
                    _usable(market.offers.interruption_notice_s[None, :], uniq[:, 2:3]),
                    0.0, uniq[:, 1:2])
            paid = np.broadcast_to(price, (len(uniq), m))
            if nodes is not None:
                lam, paid = lam * uniq[:, 3:], paid * uniq[:, 3:]
            per_h = paid * risk.inflation(lam, loss)
            if len(uniq) == 1:
                return per_h[0][pr.cols], paid[0][pr.cols]
            flat = pr.row(inv.ravel()) * m + pr.cols
            return per_h.ravel()[flat], paid.ravel()[flat]
    lam = _pair_hazard(jobs, market, cfg, pr)
    rework_p = pr.row(rework)
    loss = pr.row(overhead) + rework_p
    if notices:
        usable = _usable(market.offers.interruption_notice_s[pr.cols], pr.row(_final_s(jobs)))
        loss = pr.row(overhead) + np.where(usable, 0.0, rework_p)
    paid = pr.at(price)
    if nodes is not None:
        lam, paid = lam * pr.row(nodes), paid * pr.row(nodes)
    return paid * risk.inflation(lam, loss), paid


def _pair_finish(jobs: JobView, market: MarketView, cfg: PolicyConfig, speed: np.ndarray | None,
                 pr: Pairs) -> np.ndarray:
    """:func:`risk.expected_cost_to_finish` of :func:`risk.effective_price` at the pairs, for
    jobs that run nothing (``(P,)``, USD); ``speed``: at the pairs (``None``: no speeds)."""
    per_h, paid = _pair_per_h(jobs, market, cfg, pr)
    eff = risk.per_reference_h(per_h, speed)
    remaining = risk.remaining_h(jobs)
    with np.errstate(invalid="ignore"):
        work = eff * pr.row(remaining)
    if (remaining <= 0).any():
        work = np.where(pr.row(remaining) > 0, work, 0.0)
    return work + paid * pr.row((jobs.restart_overhead_h + jobs.move_extra_h))


def _place_pairs(jobs: JobView, market: MarketView, cfg: PolicyConfig) -> Decision:
    """:func:`_place` of :func:`_context` for jobs that run nothing, computed on the candidate
    pairs only (:mod:`policies.pairs`), on-demand and spot apart: the same decisions, bit for
    bit."""
    offers = market.offers
    # The raw speeds, not risk.speed_of's copy (an (n, m) pass): every candidate pair has a
    # positive finite speed, where the two agree.
    speed = np.asarray(market.speed, dtype=float) if np.size(market.speed) else None
    progress = None
    if speed is not None:
        with np.errstate(invalid="ignore"):
            progress = (speed > 0) & (speed < np.inf)
    cand = _candidates(jobs, market, cfg, progress)
    side = np.empty(cand.shape, bool)      # one buffer for both sides' masks
    od = Pairs.of(np.logical_and(cand, ~offers.is_spot, out=side))
    sp = Pairs.of(np.logical_and(cand, offers.is_spot, out=side))
    od_s = None if speed is None else od.at(speed)
    s = None if speed is None else sp.at(speed)
    od_finish = _pair_finish(jobs, market, cfg, od_s, od)
    sp_finish = _pair_finish(jobs, market, cfg, s, sp)
    rank = functools.cache(lambda: tie_break_rank(offers))
    timed = deadline.has_deadline(jobs)
    if speed is None:
        best_od, cost_od = od.pick(od_finish, None, rank)
        launchable = deadline.spot_safe(jobs, jobs.restart_overhead_h) & \
            deadline.launch_sustainable(jobs)
        any_spot, cost_any_spot = sp.pick(sp_finish, None, rank)
        return _settle(jobs, market, cfg, rank, _Picks(
            best_od, cost_od, np.where(launchable, any_spot, NO_OFFER),
            np.where(launchable, cost_any_spot, np.inf), any_spot, cost_any_spot, None))
    od_in_time = _pair_in_time(jobs, od_s, od)
    best_od, cost_od = od.deadline_pick(jobs.remaining_compute_h, od_finish, od_s, od_in_time,
                                        None, rank)
    fb = _speed_at(speed, best_od)
    in_time = _pair_in_time(jobs, s, sp)
    pj = sp.jobs(jobs, _PAIR_FIELDS)
    safe = deadline.spot_safe(pj, pj.restart_overhead_h[:, None], s[:, None],
                              sp.row(fb))[:, 0] & sp.row(deadline.launch_sustainable(jobs, fb))
    best_spot, cost_spot = sp.pick(sp_finish, safe & in_time, rank)
    slow = timed & (best_spot == NO_OFFER) & sp.any(safe)
    if slow.any():
        idx, cost = sp.pick(sp_finish, safe & sp.row(slow), rank)
        cheaper = slow & (cost <= cost_od)
        best_spot, cost_spot = np.where(cheaper, idx, best_spot), np.where(cheaper, cost, cost_spot)
    any_spot, cost_any_spot = best_spot.copy(), cost_spot.copy()
    alone = timed & (best_od == NO_OFFER)
    if alone.any():
        idx, cost = sp.deadline_pick(jobs.remaining_compute_h, sp_finish, s, in_time,
                                     sp.row(alone), rank)
        any_spot, cost_any_spot = np.where(alone, idx, any_spot), np.where(alone, cost, cost_any_spot)
    fb = np.where(best_od == NO_OFFER, _speed_at(speed, any_spot), fb)
    return _settle(jobs, market, cfg, rank, _Picks(best_od, cost_od, best_spot, cost_spot,
                                                   any_spot, cost_any_spot, fb))


def _pair_in_time(jobs: JobView, speed: np.ndarray, pr: Pairs) -> np.ndarray:
    """``(P,)`` bool: a new launch at each pair (of speed ``speed``, ``(P,)``) finishes in time
    (:func:`deadline.in_time`)."""
    pj = pr.jobs(jobs, ("compute_h", "remaining_compute_h", "time_to_deadline_h"))
    return deadline.in_time(pj, speed[:, None], pr.row(jobs.restart_overhead_h)[:, None])[:, 0]


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
        Pure, deterministic. When prices and offer stats are one row for all jobs (the daemon's
        views) the figures are computed on the candidate (job, offer) pairs only
        (:mod:`policies.pairs`, bit for bit the dense grid's decisions), else on ``(n, m)``
        grids; either way ``O(n·m)`` boolean work for the candidates.
    """
    idle = JobView(**{**jobs.__dict__, "current": np.full(len(jobs), NO_OFFER),
                      "overhead_left_h": np.zeros(len(jobs))})
    if len(market.offers) == 0:
        return _empty_market(idle)
    if _on_pairs(idle, market):
        return _place_pairs(idle, market, cfg)
    return _place(_context(idle, market, cfg))


def _move_matrices(ctx: _Ctx) -> tuple[np.ndarray, np.ndarray]:
    """``(saving, move_cost)`` in USD for moving each job to each offer, ``(n, m)``.

    Saving: (current − target effective price, USD per reference-hour) × the reference-hours
    the target is expected to carry the job: its remaining compute, capped for a spot target by
    the expected useful part of its remaining run (hours) × the target's speed. Runs are
    modelled as Lomax (Pareto II) with shape 2, the heavy tail whose mean residual life is
    ``mean + age`` (:mod:`policies.availability`); with ``λ = mean + age`` the expected run
    left after paying the overhead ``d`` is ``λ² / (λ + d)`` hours. Move cost: the target's
    restart overhead and checkpoint transfer billed at its price, the progress not yet
    checkpointed (hours on the current instance) billed at the current price, and for a spot
    target the expected relaunch back onto the current kind of offer when it is reclaimed
    before the job is done (the work left takes ``c / speed`` hours there).
    """
    jobs = ctx.jobs
    is_spot = ctx.market.offers.is_spot[None, :]
    eff_cur = risk.current_column(ctx.eff, jobs)
    price_cur = risk.current_column(ctx.price, jobs)
    remaining = risk.remaining_h(jobs)[:, None]
    lam = ctx.resid_up
    with np.errstate(invalid="ignore", divide="ignore"):
        useful = lam * lam / (lam + jobs.restart_overhead_h[:, None])
        if ctx.speed is None:
            run_h = remaining
        else:
            useful = useful * ctx.speed
            run_h = deadline.finish_h(jobs, ctx.speed, np.zeros((len(jobs), 1)))
    carry_h = np.where(is_spot, np.minimum(remaining, np.nan_to_num(useful, nan=np.inf)), remaining)
    with np.errstate(invalid="ignore"):
        saving = (eff_cur[:, None] - ctx.eff) * carry_h
    overhead = (jobs.restart_overhead_h + jobs.move_extra_h)[:, None]
    lost = np.nan_to_num(price_cur * jobs.checkpoint_age_h)[:, None]
    with np.errstate(invalid="ignore", divide="ignore"):
        p_back = np.where(is_spot, np.minimum(1.0, run_h / ctx.resid_up), 0.0)
    back = np.nan_to_num(p_back * price_cur[:, None] * jobs.restart_overhead_h[:, None])
    return np.nan_to_num(saving, nan=-np.inf), ctx.price * overhead + lost + back


def _move_targets(ctx: _Ctx) -> np.ndarray:
    """``(n, m)`` bool: targets a running job may move to now (hysteresis and safety)."""
    jobs, cfg = ctx.jobs, ctx.cfg
    n, m = ctx.cand.shape
    is_spot = ctx.market.offers.is_spot[None, :]
    col = np.arange(m)[None, :]
    d = np.broadcast_to(jobs.restart_overhead_h[:, None], (n, m))
    fb = ctx.fb_speed
    if ctx.speed is None:
        safe = ~is_spot | (deadline.spot_safe(jobs, d) & deadline.launch_sustainable(jobs)[:, None])
    else:
        # A target must finish in time itself, and a spot one keep the fallback in time.
        safe = ctx.in_time & (~is_spot | (
            deadline.spot_safe(jobs, d[:, :1], ctx.speed, fb)
            & deadline.launch_sustainable(jobs, fb)[:, None]))
    back = (col == jobs.previous[:, None]) & (jobs.since_start_h < cfg.pingpong_cooldown_h)[:, None]
    dwell = (jobs.since_start_h >= cfg.min_dwell_h)[:, None] | (ctx.on_od[:, None] & is_spot)
    return ctx.cand & (col != jobs.current[:, None]) & safe & ~back & dwell


def _flip_allowed(ctx: _Ctx, advice: np.ndarray) -> np.ndarray:
    """``(n, m)`` bool: an on-demand job may leave for that spot offer by the price rule. Where
    :mod:`policies.lookahead` advises, it alone lets on-demand go (:func:`_migrate`); elsewhere,
    with little slack, only spot runs old enough to be among the longest the slack can pay
    for are taken (:func:`deadline.flip_age_h`)."""
    jobs = ctx.jobs
    n, m = ctx.cand.shape
    is_spot = ctx.market.offers.is_spot[None, :]
    stats = ctx.market.offer_stats
    old_enough = np.broadcast_to(stats.up_age_h, (n, m)) >= deadline.flip_age_h(
        jobs, ctx.market, np.broadcast_to(stats.mean_up_h, (n, m)), ctx.fb_speed)
    leaving = ctx.on_od[:, None] & is_spot
    return ~leaving | (old_enough & (advice == lookahead.NO_ADVICE)[:, None])


def _migrate(ctx: _Ctx) -> MigrationDecision:
    jobs, market, cfg = ctx.jobs, ctx.market, ctx.cfg
    n, is_spot = len(jobs), market.offers.is_spot
    running = jobs.current != NO_OFFER
    target, reason = jobs.current.copy(), np.full(n, -1)
    _choose(target, reason, running & budget.must_stop(
        jobs.spent_usd, jobs.budget_usd, jobs.user_spent_usd, jobs.user_budget_usd),
        np.full(n, NO_OFFER), Reason.BUDGET_STOP)
    timed = deadline.has_deadline(jobs)
    best_od = ctx.best_od
    if ctx.speed is None:
        infeasible = timed & running & ~deadline.feasible(jobs, ctx.on_od)
        unsafe = timed & ctx.on_spot & ~deadline.spot_safe(jobs, jobs.overhead_left_h)
    else:
        cur_speed = _speed_at(ctx.speed, jobs.current)
        # On on-demand the job commits to its current instance; otherwise to the fallback.
        commit = np.where(ctx.on_od, cur_speed, ctx.fb_speed)
        infeasible = timed & running & ~deadline.feasible(jobs, ctx.on_od, commit)
        has_od = best_od != NO_OFFER
        fb_in_time = has_od & deadline.feasible(jobs, np.zeros(n, bool), ctx.fb_speed)
        own_h = deadline.finish_h(jobs, cur_speed[:, None], jobs.overhead_left_h[:, None])[:, 0]
        fb_h = deadline.fallback_h(jobs, ctx.fb_speed) + jobs.restart_overhead_h
        _choose(target, reason, infeasible & fb_in_time, best_od, Reason.SAFETY_NET)
        _choose(target, reason, infeasible & has_od & (fb_h < own_h - deadline.EPS_H), best_od,
                Reason.DEADLINE_INFEASIBLE)
        unsafe = timed & ctx.on_spot & ~deadline.spot_safe(jobs, jobs.overhead_left_h, cur_speed,
                                                          ctx.fb_speed)
    _choose(target, reason, infeasible, jobs.current, Reason.DEADLINE_INFEASIBLE)
    _choose(target, reason, unsafe & (best_od != NO_OFFER), best_od, Reason.SAFETY_NET)
    saving, move_cost = _move_matrices(ctx)
    net = saving - (1.0 + cfg.migration_margin) * move_cost
    targets = _move_targets(ctx)
    spot_targets = targets & is_spot[None, :]
    # What the cost-optimal table says: a spot job may commit to on-demand, an on-demand job
    # leave for the spot offer cheapest to finish on (even at no immediate saving).
    flip_to, _ = _pick(ctx.finish, spot_targets & ctx.on_od[:, None], ctx.rank)
    mode = np.where(ctx.on_spot, lookahead.SPOT,
                    np.where(ctx.on_od, lookahead.ON_DEMAND, lookahead.WAIT))
    commit_od = np.where(ctx.on_od, jobs.current, best_od)
    commit_speed = None if ctx.speed is None else np.where(
        ctx.on_od, _speed_at(ctx.speed, jobs.current), ctx.fb_speed)
    advice = _advice(jobs, market, cfg, mode, ctx.on_spot | (flip_to != NO_OFFER),
                     np.where(ctx.on_spot, jobs.current, flip_to), commit_od, commit_speed)
    _choose(target, reason, timed & ctx.on_spot & (advice == lookahead.ON_DEMAND)
            & (best_od != NO_OFFER), best_od, Reason.ON_DEMAND_NEEDED)
    _choose(target, reason, timed & ctx.on_od & (advice == lookahead.SPOT) & (flip_to != NO_OFFER),
            flip_to, Reason.MIGRATE_TO_SPOT)
    best, _ = _pick(-net, targets & _flip_allowed(ctx, advice) & (net > 0), ctx.rank)
    moving = running & (best != NO_OFFER)
    _choose(target, reason, moving & ctx.on_od & _spot_at(best, is_spot), best,
            Reason.MIGRATE_TO_SPOT)
    _choose(target, reason, moving, best, Reason.MIGRATE_PRICE)
    _choose(target, reason, running, jobs.current, Reason.CONTINUE)
    _choose(target, reason, ~running, jobs.current, Reason.NOTHING_AVAILABLE)
    rows, cols = np.arange(n), np.maximum(target, 0)
    moved = running & (target != jobs.current) & (target != NO_OFFER)
    return MigrationDecision(
        move=running & (target != jobs.current), target=target, reason=reason,
        saving_usd=np.where(moved, saving[rows, cols] if saving.size else 0.0, 0.0),
        move_cost_usd=np.where(moved, move_cost[rows, cols] if move_cost.size else 0.0, 0.0),
    )


def should_migrate(jobs: JobView, market: MarketView,
                   cfg: PolicyConfig = DEFAULT_CONFIG) -> MigrationDecision:
    """Decide, for each running job, whether to stay, move (and where) or stop.

    Args:
        jobs: ``n`` jobs; ``current`` is the offer each runs on (:data:`NO_OFFER` rows are
            left alone with reason ``NOTHING_AVAILABLE``), ``since_start_h`` and ``previous``
            feed the hysteresis.
        market: the market now (see :func:`decide_placement`).
        cfg: policy knobs.

    Returns:
        A :class:`MigrationDecision`. A move happens when the deadline's safety net requires
        on-demand, or when the expected saving over the remaining runtime exceeds
        ``(1 + migration_margin)`` × the move cost; at 100 % budget the job stops (``target``
        :data:`NO_OFFER`).
        Pure, deterministic; ``O(n·m)``.
    """
    if len(market.offers) == 0:
        stay = _empty_market(jobs)
        zero = np.zeros(len(jobs))
        return MigrationDecision(stay.offer != jobs.current, stay.offer, stay.reason, zero, zero)
    return _migrate(_context(jobs, market, cfg))


def _same(a, b) -> bool:
    """Bit-for-bit equal values (arrays: dtype, shape and bytes; else ``==``)."""
    if a is b:
        return True
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    if is_dataclass(a) and is_dataclass(b):
        a, b = a.__dict__, b.__dict__
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


def _shared_key(jobs: JobView, market: MarketView) -> tuple:
    """What items must share to be decided in one call: the offers, prices, offer stats,
    correlation, the kind of speeds, and which optional job fields are filled."""
    speed = np.asarray(market.speed)
    return (market.offers, market.price_usd_per_hour, market.offer_stats.__dict__,
            market.zone_correlation, speed.size == 0,
            tuple(getattr(jobs, f.name).size == 0 for f in fields(JobView)))


def _stackable(jobs: JobView, market: MarketView) -> bool:
    m = len(market.offers)
    one_row = lambda a: np.ndim(a) == 1 and np.shape(a)[0] == m  # noqa: E731
    speed = np.asarray(market.speed)
    return m > 0 and one_row(market.price_usd_per_hour) and \
        all(one_row(v) for v in market.offer_stats.__dict__.values()) and \
        (speed.size == 0 or one_row(speed) or speed.shape == (len(jobs), m)) and \
        (market.zone_correlation is None or np.ndim(market.zone_correlation) == 2) and \
        all(np.shape(v) == (len(jobs),) for v in market.pool_stats.__dict__.values())


def _stack(items: list[tuple[JobView, MarketView]]) -> tuple[JobView, MarketView]:
    """One view of every item's jobs against their shared market (see :func:`_shared_key`)."""
    first = items[0][1]
    m = len(first.offers)
    jobs = JobView(**{f.name: np.concatenate([getattr(j, f.name) for j, _ in items])
                      for f in fields(JobView)})
    rows = lambda a, n: np.broadcast_to(a, (n, m))  # noqa: E731
    available = np.concatenate([rows(mk.available, len(j)) for j, mk in items])
    speed = np.asarray(first.speed)
    if speed.size:
        speed = np.concatenate([rows(np.asarray(mk.speed, dtype=float), len(j)) for j, mk in items])
    pool = AvailabilityStats(**{f: np.concatenate([getattr(mk.pool_stats, f) for _, mk in items])
                                for f in first.pool_stats.__dict__})
    return jobs, replace(first, available=available, pool_stats=pool, speed=speed)


def _split(decision: MigrationDecision, sizes: list[int]) -> list[MigrationDecision]:
    cuts = np.cumsum(sizes)[:-1]
    parts = {f.name: np.split(getattr(decision, f.name), cuts) for f in fields(MigrationDecision)}
    return [MigrationDecision(**{k: v[i] for k, v in parts.items()}) for i in range(len(sizes))]


def _decide_stacked(items: Sequence[tuple[JobView, MarketView]], batch: list[int],
                    out: list, cfg: PolicyConfig) -> None:
    jobs, market = _stack([items[b] for b in batch])
    parts = _split(should_migrate(jobs, market, cfg), [len(items[b][0]) for b in batch])
    for b, part in zip(batch, parts):
        out[b] = part


def should_migrate_many(items: Sequence[tuple[JobView, MarketView]],
                        cfg: PolicyConfig = DEFAULT_CONFIG,
                        max_rows: int = 256) -> list[MigrationDecision]:
    """:func:`should_migrate` for many ``(jobs, market)`` pairs at once (a pass over the running
    jobs, each with its own view), with the same results as one call per pair, bit for bit.

    Pairs whose markets share the offer table, prices, offer stats and zone correlation (equal
    values: a daemon snapshot's views do) and whose job views fill the same optional fields are
    stacked, each job keeping its own ``available`` row, pool stats and speeds, and decided
    together, ``max_rows`` jobs per call (bounded ``(rows, m)`` arrays); every per-job figure
    of the policy is row-wise, so stacking changes nothing. Other pairs are decided alone.

    Args:
        items: ``k`` pairs, each ``n_i`` jobs and the market they are decided against (as
            :func:`should_migrate` takes them).
        cfg: policy knobs.
        max_rows: jobs per stacked call (>= 1).

    Returns:
        ``k`` :class:`MigrationDecision`, the ``i``-th of ``n_i`` rows, in the order given.
    """
    out: list[MigrationDecision | None] = [None] * len(items)
    groups: list[tuple[tuple, list[int]]] = []
    for i, (jobs, market) in enumerate(items):
        if not _stackable(jobs, market):
            out[i] = should_migrate(jobs, market, cfg)
            continue
        key = _shared_key(jobs, market)
        for shared, members in groups:
            if len(shared) == len(key) and all(_same(a, b) for a, b in zip(shared, key)):
                members.append(i)
                break
        else:
            groups.append((key, [i]))
    for _, members in groups:
        batch: list[int] = []
        rows = 0
        for i in members:
            if batch and rows + len(items[i][0]) > max_rows:
                _decide_stacked(items, batch, out, cfg)
                batch, rows = [], 0
            batch.append(i)
            rows += len(items[i][0])
        if batch:
            _decide_stacked(items, batch, out, cfg)
    return out  # type: ignore[return-value]


def decide(jobs: JobView, market: MarketView, cfg: PolicyConfig = DEFAULT_CONFIG) -> Decision:
    """One decision interval for every job: :func:`should_migrate` for jobs that run something,
    :func:`decide_placement` for the others. Returns a :class:`Decision` whose ``offer`` equal to
    ``current`` means "keep it" and :data:`NO_OFFER` means "run nothing" (wait or stop)."""
    if len(market.offers) == 0:
        return _empty_market(jobs)
    ctx = _context(jobs, market, cfg)
    running = jobs.current != NO_OFFER
    if not running.any():
        return _place(ctx)
    moved = _migrate(ctx)
    if running.all():
        return Decision(moved.target, moved.reason)
    placed = _place(ctx)
    return Decision(np.where(running, moved.target, placed.offer),
                    np.where(running, moved.reason, placed.reason))
