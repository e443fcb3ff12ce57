"""Risk-aware effective cost: what a reference-hour of useful progress costs on an offer.

A spot offer that is reclaimed every ``1/λ`` hours loses, at each reclaim, the restart overhead
(launch, setup, restore) and the progress made since the last checkpoint. Over a run of ``W``
useful hours the instance must therefore be billed ``T = W / (1 - λ·loss)`` hours (each billed
hour suffers ``λ`` reclaims, each costing ``loss`` hours), so the price per useful hour is
``price / (1 - λ·loss)``; a new instance also pays one restart overhead up front. On-demand
offers have ``λ = 0``. When ``λ·loss >= 1`` the offer cannot make progress (infinite cost).
A market whose interruption notice is long enough for a final checkpoint loses no progress at
a reclaim, only the restart (:func:`loss_per_reclaim_h`); one that gives no notice (Vast.ai)
loses the progress since the last periodic checkpoint.

Units (:mod:`policies.views`): ``λ`` is per clock hour, and the loss at a reclaim is clock
hours on that offer (the overhead and the rework are time, whatever the GPU), so the inflation
``1 / (1 - λ·loss)`` is billed hours per useful hour on that offer. A useful hour on offer ``j``
does ``speed[j]`` reference-hours of work, so the **effective price** is
``price × inflation ÷ speed`` USD per reference-hour, and the expected cost to finish is
``remaining reference-hours ÷ speed × price × inflation`` plus the launch overhead billed at the
offer's price. Without speeds (all 1) these are the per-hour figures they always were.

A **gang** of ``N`` nodes (:attr:`policies.views.JobView.nodes`) runs ``N`` instances of one
offer: it pays ``N × price`` and is interrupted when any node is, so its hazard is ``N × λ``
(independent reclaims: rates add; a monthly risk ``p`` per node is ``1 - (1 - p)^N`` for the
gang, :func:`gang_interruption_risk`). Every figure here (effective price, expected cost to
finish, the launch billed) is the gang's; one-node jobs are computed exactly as before.
"""

from __future__ import annotations

import numpy as np

from policies.availability import residual_up_h
from policies.views import NO_OFFER, AvailabilityStats, JobView, MarketView, OfferTable

# λ·loss is clipped below 1 by this much: an offer that loses 99 % of its time is useless anyway.
_MAX_LOSS_SHARE = 0.99
DEFAULT_RUNTIME_H = 1.0
"""Reference-hours used to amortise the launch overhead when a job's duration is unknown."""


def gang_nodes(jobs: JobView) -> np.ndarray | None:
    """``(n,)`` float nodes per job, or ``None`` when every job runs on one node (then no
    array is scaled, so one-node figures stay bit for bit what they were)."""
    nodes = jobs.nodes
    if nodes.size == 0 or bool(np.all(nodes == 1)):
        return None
    return np.asarray(nodes, dtype=float)


def gang_interruption_risk(risk: np.ndarray | float, nodes: np.ndarray | float) -> np.ndarray:
    """Monthly interruption risk of a gang of ``nodes`` instances whose nodes each have
    monthly risk ``risk`` (in [0, 1]): ``1 - (1 - risk)^nodes``, the risk whose Poisson rate
    (:func:`policies.availability.risk_to_mean_up_h`) is ``nodes ×`` a node's. Broadcasts."""
    p = np.clip(np.asarray(risk, dtype=float), 0.0, 1.0)
    return -np.expm1(np.asarray(nodes, dtype=float) * np.log1p(-np.minimum(p, 1.0 - 1e-300)))


def gang_price(price: np.ndarray, jobs: JobView) -> np.ndarray:
    """USD per hour each job pays on each offer: ``price`` (``(m,)`` or ``(n, m)``, per
    instance) × the job's nodes, ``(n, m)``; ``price`` itself when every job is one node."""
    nodes = gang_nodes(jobs)
    price = np.asarray(price)
    return price if nodes is None else price * nodes[:, None]


def gang_uptime(up: np.ndarray, jobs: JobView) -> np.ndarray:
    """A gang's expected (remaining) uptime: a node's ``up`` (``(n,)`` per job or ``(n, m)``
    per job and offer) ÷ the job's nodes, as its hazard is ``N ×`` a node's; ``up`` itself
    when every job is one node."""
    nodes = gang_nodes(jobs)
    if nodes is None:
        return up
    return np.asarray(up) / nodes.reshape((-1,) + (1,) * (np.ndim(up) - 1))


def gang_hazard(lam: np.ndarray, jobs: JobView) -> np.ndarray:
    """A gang's reclaims per hour on each offer: a node's ``lam`` (``(m,)``/``(n, m)``) × the
    job's nodes (any node's reclaim stops the gang); ``lam`` itself when every job is one
    node."""
    nodes = gang_nodes(jobs)
    return lam if nodes is None else lam * nodes[:, None]


def hazard_per_h(stats: AvailabilityStats, is_spot: np.ndarray) -> np.ndarray:
    """Expected reclaims per hour: ``1 / expected remaining uptime`` for spot, 0 on-demand.

    Args:
        stats: per-offer availability stats, ``(n, m)`` or ``(m,)``.
        is_spot: ``(m,)`` bool.

    Returns:
        Reclaims per hour, the broadcast shape of the inputs.
    """
    with np.errstate(divide="ignore"):
        lam = 1.0 / residual_up_h(stats)
    return np.where(is_spot, lam, 0.0)


def loss_per_reclaim_h(jobs: JobView, offers: OfferTable | None = None) -> np.ndarray:
    """Hours lost at a reclaim: the restart overhead, plus the expected rework (half a
    checkpoint interval) unless the offer's interruption notice leaves time for a final
    checkpoint.

    The rework is saved on an offer whose ``interruption_notice_s`` is known, positive and at
    least the job's ``final_checkpoint_s`` (the agent stops the job on the notice and commits
    its checkpoint). With no notice (0: the instance just stops), a notice too short, or none
    known (``nan``, or ``offers`` not given) the half interval is lost, as it always was.

    Args:
        jobs: ``n`` jobs.
        offers: the ``m`` offers (:class:`OfferTable`), optional.

    Returns:
        ``(n, 1)`` when no offer has a usable notice (it broadcasts over offers), else
        ``(n, m)``.
    """
    overhead = jobs.restart_overhead_h[:, None]
    rework = 0.5 * jobs.checkpoint_interval_h[:, None]
    notice = offers.interruption_notice_s if offers is not None else np.zeros(0)
    if notice.size == 0 or not (rework > 0).any():
        return overhead + rework
    final_s = jobs.final_checkpoint_s if jobs.final_checkpoint_s.size else np.zeros(len(jobs))
    with np.errstate(invalid="ignore"):
        usable = (notice[None, :] > 0) & (notice[None, :] >= final_s[:, None])
    if not usable.any():
        return overhead + rework
    return overhead + np.where(usable, 0.0, rework)


def inflation(hazard: np.ndarray, loss_h: np.ndarray) -> np.ndarray:
    """Expected billed hours per useful hour, ``1 / (1 - λ·loss)`` (``inf`` if ``λ·loss >= 0.99``).

    Args: ``hazard`` reclaims/hour and ``loss_h`` hours per reclaim, broadcastable arrays.
    """
    share = hazard * loss_h
    with np.errstate(divide="ignore"):
        out = 1.0 / (1.0 - np.minimum(share, _MAX_LOSS_SHARE))
    return np.where(share >= _MAX_LOSS_SHARE, np.inf, out)


def speed_of(market: MarketView) -> np.ndarray | None:
    """The market's speeds (:attr:`MarketView.speed`, ``(m,)`` or ``(n, m)``) with every value
    that is not a positive finite number set to 0 (the offer cannot make progress), or ``None``
    when the view has none (every offer at the reference speed)."""
    speed = np.asarray(market.speed, dtype=float)
    if speed.size == 0:
        return None
    return np.where(np.isfinite(speed) & (speed > 0), speed, 0.0)


def per_reference_h(per_h: np.ndarray, speed: np.ndarray | None) -> np.ndarray:
    """USD per useful hour → USD per reference-hour (``inf`` where the speed is 0)."""
    if speed is None:
        return per_h
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(speed > 0, per_h / np.where(speed > 0, speed, 1.0), np.inf)


def effective_price(jobs: JobView, market: MarketView,
                    hazard: np.ndarray | None = None) -> np.ndarray:
    """Risk-aware USD per reference-hour of useful progress for every (job, offer), shape
    ``(n, m)``: ``price × inflation(λ, loss) ÷ speed`` with the loss of
    :func:`loss_per_reclaim_h` on each offer and the market's :attr:`MarketView.speed`
    (1 when it has none: USD per useful hour).

    Args:
        jobs, market: ``n`` jobs, ``m`` offers.
        hazard: reclaims per hour ``λ`` of one node, ``(m,)`` or ``(n, m)``; default
            :func:`hazard_per_h` of the market's availability (the decisions raise it for
            zones correlated with a recent reclaim). A gang's is ``N × λ`` and its price
            ``N × price`` (:func:`gang_hazard`, :func:`gang_price`).

    When hazards and prices are shared by all jobs (one market, the common case) the row is
    computed once per distinct row of losses; the result may then be a read-only broadcast
    view.
    """
    n, m = len(jobs), len(market.offers)
    lam = hazard_per_h(market.offer_stats, market.offers.is_spot) if hazard is None else hazard
    loss = loss_per_reclaim_h(jobs, market.offers)
    lam = gang_hazard(lam, jobs)
    price = gang_price(market.price_usd_per_hour, jobs)
    speed = speed_of(market)
    if lam.ndim == 1 and price.ndim == 1 and (speed is None or speed.ndim == 1):
        uniq, inv = np.unique(loss, axis=0, return_inverse=True)
        rows = per_reference_h(price[None, :] * inflation(lam[None, :], uniq), speed)
        return np.broadcast_to(rows[0], (n, m)) if len(uniq) == 1 else rows[inv.ravel()]
    return np.broadcast_to(per_reference_h(np.broadcast_to(price, (n, m)) * inflation(lam, loss),
                                            speed), (n, m))


def remaining_h(jobs: JobView) -> np.ndarray:
    """Reference-hours of compute each job has left, ``(n,)``; :data:`DEFAULT_RUNTIME_H` where
    unknown (so offers are still ranked by effective price, launch included)."""
    return np.where(np.isnan(jobs.remaining_compute_h), DEFAULT_RUNTIME_H,
                    jobs.remaining_compute_h)


def expected_cost_to_finish(jobs: JobView, price: np.ndarray, eff: np.ndarray) -> np.ndarray:
    """Expected USD to finish each job on each offer, ``(n, m)``.

    The effective price × the reference-hours left (:func:`remaining_h`; nothing for a job with
    none left), i.e. ``remaining ÷ speed × price × inflation``, plus the launch billed at the
    offer's price: on the offer the job runs on, the overhead it still owes there; on any
    other, one restart overhead and the move's transfer time (clock hours: the same on every
    GPU).

    Args:
        jobs: ``n`` jobs.
        price: USD per hour of one instance, ``(m,)`` or ``(n, m)`` (a gang's launch is billed
            for its ``N`` nodes, :func:`gang_price`).
        eff: risk-aware USD per useful reference-hour, ``(n, m)`` (:func:`effective_price`).
    """
    n, m = eff.shape
    remaining = remaining_h(jobs)
    launch_h = (jobs.restart_overhead_h + jobs.move_extra_h)[:, None]
    running = jobs.current != NO_OFFER
    if running.any():
        is_current = np.arange(m)[None, :] == jobs.current[:, None]
        launch_h = np.where(is_current, jobs.overhead_left_h[:, None], launch_h)
    with np.errstate(invalid="ignore"):
        work = eff * remaining[:, None]
    if (remaining <= 0).any():
        work = np.where(remaining[:, None] > 0, work, 0.0)
    return work + np.broadcast_to(gang_price(price, jobs), (n, m)) * launch_h


def current_column(values: np.ndarray, jobs: JobView, fill: float = np.nan) -> np.ndarray:
    """``values[i, current[i]]`` for each job (``fill`` where the job runs nothing), ``(n,)``."""
    n = len(jobs)
    values = np.broadcast_to(values, (n, values.shape[-1]))
    idx = np.maximum(jobs.current, 0)
    picked = values[np.arange(n), idx]
    return np.where(jobs.current == NO_OFFER, fill, picked)
