"""Build the decision views from the daemon's models (jobs, offers, observed availability).

Pure helpers for the controller: no I/O and no clock (``now`` is passed in). The controller
reads the latest offers and each job from the store, then::

    table, market = market_view(offers, eligible, samples, gap_h)
    jobs_view = job_view(jobs, table, now, restart_overhead_h=..., decision_interval_h=...)
    speed, rates, ref = offer_speeds(WorkModel.from_spec(job.spec), table, measurements)
    market = with_speed(market, speed)        # per job; the cached view itself is not copied
    decision = policies.decisions.decide_placement(jobs_view, market)      # pending / migrating
    moves = policies.decisions.should_migrate(jobs_view, market)           # running

Offer ``i`` of the decision is ``offers[i]``. ``remaining_compute_h`` is then in
reference-hours (remaining units ÷ ``ref``); a job without a speed model keeps the market view
without speeds (every offer at the reference speed). The controller calls these in
:mod:`scheduler.controller.policy_inputs`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import numpy as np

from core.models import Job, Offer, PlacementEnd
from policies.availability import (
    always_available,
    availability_stats,
    risk_to_mean_up_h,
)
from policies.throughput import (
    Measurement,
    RateEstimates,
    WorkModel,
    estimate_rates,
    reference_rate,
)
from policies.views import (
    NO_OFFER,
    NO_ZONE,
    AvailabilityStats,
    JobView,
    MarketView,
    OfferTable,
    with_speed,
)

__all__ = ["job_view", "market_view", "offer_speeds", "with_speed"]

_FIELDS = AvailabilityStats.__dataclass_fields__


def _last(stats: AvailabilityStats) -> AvailabilityStats:
    return AvailabilityStats(**{f: getattr(stats, f)[..., -1] for f in _FIELDS})


def _offer_stats(table: OfferTable, samples: np.ndarray | None, gap_h: float) -> AvailabilityStats:
    """Per offer: from its samples when given, else from its interruption risk (age 0)."""
    m = len(table)
    mean_up = np.minimum(risk_to_mean_up_h(table.interruption_risk), 1e6)
    prior = AvailabilityStats(up_age_h=np.zeros(m), down_age_h=np.zeros(m), mean_up_h=mean_up,
                              mean_down_h=np.ones(m), frac=np.full(m, 0.9))
    if samples is not None and samples.shape[1] > 0:
        prior = _last(availability_stats(samples, gap_h, prior_up_h=mean_up[:, None]))
    full = always_available((m,))
    return AvailabilityStats(**{f: np.where(table.is_spot, getattr(prior, f), getattr(full, f))
                                for f in _FIELDS})


def market_view(offers: Sequence[Offer], eligible: np.ndarray, samples: np.ndarray | None = None,
                gap_h: float = 1.0, zone_correlation: np.ndarray | None = None,
                ) -> tuple[OfferTable, MarketView]:
    """The :class:`MarketView` of the latest offers for ``n`` jobs.

    Args:
        offers: the latest offers of every provider (``m``), as the store returns them.
        eligible: ``(n, m)`` bool, offers each job admits and that are not marked unavailable
            (:func:`policies.eligibility.eligible_matrix`).
        samples: ``(m, T)`` bool availability of each offer at the last ``T`` polls, oldest
            first, 1 = offered (one sample per offer poll), or ``None``: spot offers are
            then judged by their ``interruption_risk`` alone.
        gap_h: hours between samples.
        zone_correlation: optional ``(z, z)`` over the table's ``zone_names``.

    Returns:
        ``(table, market)``. Pool stats per job are those of "any eligible spot offer". The
        view has no speeds; attach a job's with :func:`~policies.views.with_speed`.

    Raises:
        ValueError: shapes do not match.
    """
    table = OfferTable.from_offers(offers)
    n, m = eligible.shape
    if m != len(table) or (samples is not None and samples.shape[0] != m):
        raise ValueError(f"eligible {eligible.shape} / samples do not match {len(table)} offers")
    stats = _offer_stats(table, samples, gap_h)
    spot = eligible & table.is_spot[None, :]
    if samples is not None and samples.shape[1] > 0:
        union = (spot.astype(np.int32) @ samples.astype(np.int32)) > 0
        pool = _last(availability_stats(union, gap_h))
    else:
        best = np.where(spot, stats.mean_up_h[None, :], 0.0).max(axis=1, initial=0.0)
        pool = AvailabilityStats(up_age_h=np.zeros(n), down_age_h=np.zeros(n), mean_up_h=best,
                                 mean_down_h=np.ones(n), frac=np.where(spot.any(axis=1), 0.9, 0.0))
    no_spot = ~spot.any(axis=1)
    pool = AvailabilityStats(**{**pool.__dict__, "frac": np.where(no_spot, 0.0, pool.frac)})
    prices = np.array([o.price_usd_per_hour for o in offers], dtype=float)
    return table, MarketView(offers=table, price_usd_per_hour=prices, available=eligible,
                             offer_stats=stats, pool_stats=pool, zone_correlation=zone_correlation)


def offer_speeds(model: WorkModel, table: OfferTable, measurements: Sequence[Measurement] = (),
                 ) -> tuple[np.ndarray, RateEstimates, float]:
    """The job's speed on each offer of ``table`` (:attr:`MarketView.speed`).

    Args:
        model: what is known of the job's speed (:meth:`WorkModel.from_spec`).
        table: the offers (their lower-cased GPU model and GPU count).
        measurements: the job's measured rates (:class:`~policies.throughput.Measurement`).

    Returns:
        ``(speed, rates, ref)``: ``(m,)`` rate on each offer ÷ the rate on one reference GPU
        (reference-hours per hour, finite and > 0), the :class:`RateEstimates` behind it
        (units per market hour, source, rel_sd), and ``ref``, units per hour on one reference
        GPU (divide remaining units by it for ``remaining_compute_h``).
    """
    names = table.vocab.get("gpu_model", ())
    models = [names[c] for c in table.labels["gpu_model"]] if names else [""] * len(table)
    rates = estimate_rates(model, models, table.gpu_count if table.gpu_count.size
                           else np.ones(len(table), int), measurements)
    ref, _ = reference_rate(model, measurements)
    return rates.units_per_h / ref, rates, ref


def _index(table: OfferTable) -> dict[str, int]:
    return {key: i for i, key in enumerate(table.keys)}


def _hours(later: datetime, earlier: datetime | None, scale: float = 1.0) -> float:
    if earlier is None:
        return np.inf
    return max(0.0, (later - earlier).total_seconds() / 3600.0) * scale


def _job_fields(job: Job, table: OfferTable, index: dict[str, int], now: datetime,
                scale: float) -> dict:
    current = job.placement
    cur = index.get(current.offer.key.series(), NO_OFFER) if current and current.instance_id \
        else NO_OFFER
    reclaimed = [p for p in job.placements if p.end_reason is PlacementEnd.PREEMPTED]
    lost = reclaimed[-1] if reclaimed else None
    lost_zone = f"{lost.offer.provider}/{lost.offer.region}/{lost.offer.zone}" if lost else None
    left = [p for p in job.placements if p.end_reason is PlacementEnd.MOVED]
    previous = index.get(left[-1].offer.key.series(), NO_OFFER) if left else NO_OFFER
    deadline = job.spec.deadline
    return {
        "current": cur,
        "since_start_h": _hours(now, current.started_at, scale) if cur != NO_OFFER else np.inf,
        "last_preempted_zone": table.zone_names.index(lost_zone)
        if lost_zone in table.zone_names else NO_ZONE,
        "since_preemption_h": _hours(now, lost.ended_at, scale) if lost else np.inf,
        "previous": previous,
        "elapsed_h": _hours(now, job.created_at, scale),
        "time_to_deadline_h": np.inf if deadline is None
        else (deadline - now).total_seconds() / 3600 * scale,
        "spent_usd": job.cost_usd(now),
        "nodes": job.spec.resources.nodes,
    }


def job_view(jobs: Sequence[Job], table: OfferTable, now: datetime, *,
             restart_overhead_h: float, decision_interval_h: float,
             compute_h: Sequence[float] | None = None,
             remaining_compute_h: Sequence[float] | None = None,
             budget_usd: Sequence[float] | None = None,
             user_spent_usd: Sequence[float] | None = None,
             user_budget_usd: Sequence[float] | None = None,
             checkpoint_interval_h: Sequence[float] | None = None,
             checkpoint_age_h: Sequence[float] | None = None,
             final_checkpoint_s: Sequence[float] | None = None,
             time_scale: float = 1.0) -> JobView:
    """The :class:`JobView` of ``jobs`` at ``now`` (aware UTC).

    Read from each :class:`~core.models.Job`: the current placement (offer index in
    ``table``, time since its instance started), the last reclaim (zone, time since), the
    deadline, the spend so far (``Job.cost_usd``), the gang size (``resources.nodes``). Not in
    the models today, so passed in (one
    value per job; ``nan``/``inf`` = unknown/none): ``compute_h`` and ``remaining_compute_h``
    (without them deadline reasoning is off), budgets, the user's spend over all their jobs,
    the hours between checkpoints and the progress since the last committed one, and the wall
    seconds a final checkpoint takes after a notice (compared with each offer's
    ``interruption_notice_s``, also wall seconds, so never scaled).
    ``previous`` is the offer of the last placement that ended ``moved`` (left by choice).

    ``time_scale`` is market seconds per wall second (1 on real clouds, >1 on a replayed
    market): wall durations (since start, since a reclaim, to the deadline) are multiplied by
    it so that every hour of the view is a market hour, like costs, ``compute_h`` and the
    availability samples' gap.
    """
    n = len(jobs)
    index = _index(table)
    rows = [_job_fields(job, table, index, now, time_scale) for job in jobs]
    cols = {k: [row[k] for row in rows] for k in rows[0]} if rows else {}

    def per_job(values, default):
        return default if values is None else list(values)

    return JobView.build(
        n, **cols, restart_overhead_h=restart_overhead_h, decision_interval_h=decision_interval_h,
        compute_h=per_job(compute_h, np.nan),
        remaining_compute_h=per_job(remaining_compute_h, np.nan),
        budget_usd=per_job(budget_usd, np.inf), user_spent_usd=per_job(user_spent_usd, 0.0),
        user_budget_usd=per_job(user_budget_usd, np.inf),
        checkpoint_interval_h=per_job(checkpoint_interval_h, 0.0),
        checkpoint_age_h=per_job(checkpoint_age_h, 0.0),
        final_checkpoint_s=per_job(final_checkpoint_s, 0.0),
    )
