"""What the policy decides on, read from the store: the launchable offers, their per-poll
availability samples, and one job's view (:mod:`policies.daemon_views`).

The controller and ``schedctl plan`` (:mod:`scheduler.services.plans`) both build their inputs
here (:func:`read_snapshot`, :func:`inputs_at`), so a plan shows the decision a placement takes.
The market part is read once per reconcile pass (kept in the controller's state while
``ctx.observed`` is the pass's observation, and for at most
:data:`~scheduler.timing.RECONCILE_INTERVAL_S`), the job part per job. Every hour handed to the
policy is a market hour: wall durations are multiplied by the market's ``time_scale`` (1 on
real clouds), like costs and ``expected_hours``.

Speeds (the speed model, on for a job whose spec has ``work`` or ``reference_gpu`` or that
has reported progress, :func:`speed_model_on`): each offer's rate for the job is estimated
from its measured rates (:mod:`scheduler.controller.learning`), its declared throughput and
the package's GPU table (:func:`policies.throughput.estimate_rates`); the market view gets
``speed`` = rate ÷ the rate of one reference GPU, and every compute hour handed to the policy
(``compute_h``, ``remaining_compute_h``, the checkpoint's age) is a reference-hour. Without
the speed model every speed is 1 and the inputs are as before.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

import numpy as np

from core.models import Job, Offer, PlacementEnd
from policies.daemon_views import job_view, market_view, offer_speeds
from policies.eligibility import eligible_matrix
from policies.throughput import (
    Measurement,
    RateEstimates,
    WorkModel,
    reference_hours,
    scaling,
)
from policies.views import JobView, MarketView, OfferTable, with_speed
from scheduler.budgets import budget_settings, owner_spent
from scheduler.controller.context import Context, ProviderRegistry
from scheduler.controller.learning import measurements
from scheduler.store import Store
from scheduler.store.budgets import BudgetSettings
from scheduler.timing import (
    LEFT_OFFER_COOLDOWN_H,
    OFFER_POLL_S,
    RECONCILE_INTERVAL_S,
    REPLAY_OFFER_POLL_S,
    RESTART_OVERHEAD_H,
)


@dataclass(frozen=True)
class MarketSnapshot:
    """The market one reconcile pass decides on.

    - **offers**: latest offers of launchable providers (``m``); offer ``i`` is row ``i``.
    - **table** / **prices**: their :class:`OfferTable` and ``(m,)`` USD/hour.
    - **unavailable**: ``(m,)`` bool, offers marked unavailable (capacity error, reclaim).
    - **samples**: ``(m, T)`` bool availability at the last ``T`` polls, or ``None``.
    - **gap_h**: market hours between two samples. **time_scale**: market s per wall s.
    - **budgets**: per-user limits and the webhook switch (:class:`BudgetSettings`).
    - **poll_s**: wall seconds between offer polls (prices change no more often).

    Market views are cached per distinct eligibility row: jobs with the same constraints share
    one (building a view from 288 samples per offer is the costly part); offers are indexed
    by series on first use (:meth:`listed`).
    """

    offers: list[Offer]
    table: OfferTable
    prices: np.ndarray
    unavailable: np.ndarray
    samples: np.ndarray | None
    gap_h: float
    time_scale: float
    budgets: BudgetSettings
    poll_s: float = OFFER_POLL_S
    views: dict[bytes, tuple[OfferTable, MarketView]] = field(default_factory=dict)
    by_series: dict[str, Offer] = field(default_factory=dict)

    def market(self, eligible: np.ndarray) -> tuple[OfferTable, MarketView]:
        """:func:`market_view` for one job's ``(1, m)`` eligibility, cached."""
        key = np.packbits(eligible).tobytes()
        if key not in self.views:
            self.views[key] = market_view(self.offers, eligible, self.samples, self.gap_h)
        return self.views[key]

    def listed(self, series: str) -> Offer | None:
        """The offer of ``series`` (:meth:`~core.models.OfferKey.series`) in this snapshot,
        or ``None`` when it is not listed."""
        if self.offers and not self.by_series:
            self.by_series.update((o.key.series(), o) for o in self.offers)
        return self.by_series.get(series)


@dataclass(frozen=True)
class JobSpeeds:
    """One job's speed model over ``m`` offers.

    - **speed**: ``(m,)`` rate on each offer ÷ ``ref_rate`` (reference-hours per market hour).
    - **rates**: the :class:`~policies.throughput.RateEstimates` behind it (whole offer, per
      market hour; ``source`` per offer: measured | declared | prior).
    - **ref_rate**: the rate of one reference GPU (``reference_gpu``, default A100-80GB).
    - **unit**: the job's work unit when the rates are in it (the job measured or declared a
      rate), else ``None``: the rates are then reference-hours per hour (the GPU table's
      relatives alone).
    """

    speed: np.ndarray
    rates: RateEstimates
    ref_rate: float
    unit: str | None


@dataclass(frozen=True)
class JobInputs:
    """One job's decision inputs: ``market`` and ``jobs`` (``n = 1``) for the engine, the
    job's ``eligible`` row ``(m,)``, and its ``speeds`` (``None``: speed model off). A group's
    (:func:`inputs_many`): ``jobs`` has ``k`` rows and ``eligible`` is ``(k, m)``."""

    table: OfferTable
    market: MarketView
    jobs: JobView
    eligible: np.ndarray
    speeds: JobSpeeds | None = None


def speed_model_on(job: Job) -> bool:
    """Whether offers are ranked by the job's speed on them: its spec has ``work`` or
    ``reference_gpu``, or the job has measured its rate."""
    spec = job.spec
    return spec.work is not None or spec.reference_gpu is not None \
        or any(r.hours > 0 for r in job.progress.measured())


def _work_unit(job: Job) -> str | None:
    latest = job.progress.latest
    if latest is not None:
        return latest.unit.value
    return job.spec.work.unit.value if job.spec.work is not None else None


def work_model(job: Job, measured: list[Measurement]) -> WorkModel:
    """The job's :class:`~policies.throughput.WorkModel`. A job that declared no rate but
    measured some has its measured models declared at their measured per-GPU rates: the
    table's priors are in reference-hours, the measurements in the job's own units, and
    without a declaration the model would take the (arbitrary) ratio of the two for how this
    job differs from the benchmarks and shrink it toward 1, leaving every unmeasured offer
    hundreds of times slower than the measured one; declared, they set the job's units and
    scale every other GPU model's prior by the measured ratio."""
    model = WorkModel.from_spec(job.spec)
    if model.declared or not measured:
        return model
    evidence: dict[str, list[float]] = {}
    for m in measured:
        per_gpu = m.units_per_h / float(scaling(m.gpu_count, model.scaling_efficiency))
        if not (m.hours > 0 and math.isfinite(per_gpu) and per_gpu > 0):
            continue  # no rate (learning keeps none such; a caller may pass one)
        acc = evidence.setdefault(m.gpu_model.lower(), [0.0, 0.0])
        acc[0] += m.hours * math.log(per_gpu)
        acc[1] += m.hours
    declared = {k: math.exp(s / h) for k, (s, h) in evidence.items() if h > 0}
    return replace(model, declared=declared)


def job_speeds(job: Job, table: OfferTable) -> JobSpeeds | None:
    """The job's :class:`JobSpeeds` over ``table``; ``None`` when its speed model is off."""
    if not speed_model_on(job):
        return None
    measured = measurements(job)
    model = work_model(job, measured)
    speed, rates, ref = offer_speeds(model, table, measured)
    in_units = bool(measured) or bool(model.declared)
    return JobSpeeds(speed=speed, rates=rates, ref_rate=float(ref),
                     unit=_work_unit(job) if in_units else None)


def offer_speed(job: Job, offer: Offer | None = None) -> float:
    """The job's speed (reference-hours per market hour) on ``offer`` (default: its current
    placement's); 1 when the speed model is off or there is no offer."""
    if offer is None:
        offer = job.placement.offer if job.placement is not None else None
    if offer is None or not speed_model_on(job):
        return 1.0
    speeds = job_speeds(job, OfferTable.from_offers([offer]))
    return float(speeds.speed[0]) if speeds is not None else 1.0


def remaining_units(job: Job) -> float | None:
    """Units still to do: the total (``work.total``, else the latest reported one) minus the
    latest reported ``done`` (0 before any report), at least 0; ``None`` without a total."""
    latest = job.progress.latest
    work = job.spec.work
    total = work.total if work is not None and work.total is not None \
        else (latest.total if latest is not None else None)
    if total is None:
        return None
    return max(0.0, total - (latest.done if latest is not None else 0.0))


def compute_hours(job: Job, speeds: JobSpeeds | None) -> tuple[float, float]:
    """``(compute_h, remaining_compute_h)`` of ``job``, ``nan`` when unknown. With rates in
    the job's units and a total: the total, and what is left of it (:func:`remaining_units`;
    before any report, the total less the reference-hours saved in checkpoints), ÷ the
    reference rate (:func:`policies.throughput.reference_hours`, which the simulator uses
    too); else ``expected_hours`` and ``expected_hours`` − ``progress_h``."""
    units = remaining_units(job)
    if speeds is not None and speeds.unit is not None and units is not None \
            and speeds.ref_rate > 0:
        latest = job.progress.latest
        work = job.spec.work
        total = work.total if work is not None and work.total is not None else latest.total
        total_h = reference_hours(WorkModel.from_spec(job.spec), total, None,
                                  ref_rate=speeds.ref_rate)
        left_h = total_h * units / total if latest is not None and total > 0 \
            else max(0.0, total_h - job.progress_h)
        return total_h, left_h
    remaining = job.remaining_hours()
    return _or(job.spec.expected_hours, math.nan), _or(remaining, math.nan)


def launchable(providers: ProviderRegistry | None, provider: str) -> bool:
    """Offers of display-only sources (public catalogs: not a
    :class:`~providers.base.Compute`) and of providers no longer configured are shown by
    ``schedctl offers`` but never placed on. Without a registry (an API app built without the
    daemon's providers) every provider counts as launchable."""
    if providers is None:
        return True
    try:
        providers.compute(provider)
    except KeyError:
        return False
    return True


def sample_matrix(rings: list[str | None]) -> np.ndarray | None:
    """``(m, T)`` bool from per-offer rings of ``"0"``/``"1"`` (oldest first). Shorter rings are
    padded on the left with their oldest sample; an offer never sampled counts as available
    (it is listed now). ``None`` when no offer has samples."""
    if not any(rings):
        return None
    width = max(len(r) for r in rings if r)
    rows = [(r[0] * (width - len(r)) + r) if r else "1" * width for r in rings]
    return np.array([[c == "1" for c in row] for row in rows], dtype=bool).reshape(len(rows), width)


def snapshot(ctx: Context) -> MarketSnapshot:
    """The pass's :class:`MarketSnapshot`, read from Redis once per pass: kept in
    ``ctx.state`` with the pass's observation (the per-job contexts of a pass are copies
    sharing it) and for at most RECONCILE_INTERVAL_S."""
    hit = ctx.state.market
    if hit is not None and hit[0] is ctx.observed \
            and time.monotonic() - hit[1] < RECONCILE_INTERVAL_S:
        return hit[2]
    snap = read_snapshot(ctx.store, ctx.providers)
    ctx.state.market = (ctx.observed, time.monotonic(), snap)
    return snap


def read_snapshot(store: Store, providers: ProviderRegistry | None,
                  offers: list[Offer] | None = None) -> MarketSnapshot:
    """The market the policy decides on now: ``offers`` (default: the latest offers in the
    store) of launchable providers, with the store's unavailable marks, availability samples
    and budget settings; the time scale is the fastest configured adapter's (1 without any).
    Raises ``redis.RedisError``."""
    listed = store.offers.all_offers() if offers is None else offers
    offers = [o for o in listed if launchable(providers, o.provider)]
    gone = store.offers.unavailable()
    table = OfferTable.from_offers(offers)
    adapters = providers.adapters() if providers is not None else []
    scale = max((a.time_scale for a in adapters), default=1.0)
    poll_s = REPLAY_OFFER_POLL_S if scale > 1 else OFFER_POLL_S
    return MarketSnapshot(
        offers=offers, table=table,
        prices=np.array([o.price_usd_per_hour for o in offers], dtype=float),
        unavailable=np.array([o.key in gone for o in offers], dtype=bool),
        samples=sample_matrix(store.offers.samples([o.key.series() for o in offers])),
        gap_h=poll_s * scale / 3600.0, time_scale=scale,
        budgets=budget_settings(store), poll_s=poll_s,
    )


def _or(value: float | None, default: float) -> float:
    return default if value is None else value


def job_inputs(ctx: Context, snap: MarketSnapshot, job: Job) -> JobInputs:
    """The views of ``job`` at the context's clock (:func:`inputs_at`)."""
    return inputs_at(ctx.store, snap, job, ctx.clock())


def cooling_down(job: Job, now: datetime) -> tuple[str, datetime] | None:
    """The offer series ``job`` chose to leave (its last placement ended ``moved``) and when
    it may be placed there again, while that is within LEFT_OFFER_COOLDOWN_H market hours
    of leaving; else ``None``."""
    if job.placement is not None or not job.placements:
        return None
    last = job.placements[-1]
    if last.end_reason is not PlacementEnd.MOVED or last.ended_at is None:
        return None
    until = last.ended_at + timedelta(hours=LEFT_OFFER_COOLDOWN_H / max(last.time_scale, 1e-9))
    return (last.offer.key.series(), until) if now < until else None


def inputs_at(store: Store, snap: MarketSnapshot, job: Job, now: datetime) -> JobInputs:
    """The views of ``job`` at ``now`` (aware UTC). Remaining compute: :func:`compute_hours`
    (reference-hours with the speed model, :func:`job_speeds`, whose speeds the market view
    gets); progress since the last checkpoint (lost by a move) is estimated from the current
    attempt's running hours × its offer's speed. The job's final checkpoint after a notice is
    taken to need its ``grace_s`` (the time the agent gives it to save). The owner's spend is
    read from the store when the owner has a limit."""
    ((_, inputs),) = inputs_many(store, snap, [job], now)
    return replace(inputs, eligible=inputs.eligible[0])


def inputs_many(store: Store, snap: MarketSnapshot, jobs: list[Job],
                now: datetime) -> list[tuple[list[int], JobInputs]]:
    """The views of ``jobs`` at ``now``, grouped for one policy call per group: each
    ``(indices into jobs, inputs)``, where ``inputs`` holds those jobs' :class:`JobView` rows
    in that order over the group's one market view and ``eligible`` is ``(k, m)`` for a group
    of ``k``. Jobs without the speed model and with the same eligible offers share a group (the
    policy's rows are independent, so each row is what :func:`inputs_at` gives the job alone);
    a job with the speed model is a group of its own (``eligible`` then ``(1, m)``). Every job
    is in exactly one group. Raises ``redis.RedisError`` (an owner's spend)."""
    eligible = eligible_matrix([job.spec for job in jobs], snap.table, snap.prices,
                               snap.unavailable)
    for i, job in enumerate(jobs):
        cooling = cooling_down(job, now)
        if cooling is not None:
            eligible[i, [j for j, o in enumerate(snap.offers) if o.key.series() == cooling[0]]] \
                = False
    out: list[tuple[list[int], JobInputs]] = []
    shared: dict[bytes, tuple[OfferTable, MarketView, list[int]]] = {}
    for i, job in enumerate(jobs):
        table, market = snap.market(eligible[i:i + 1])
        speeds = job_speeds(job, table)
        if speeds is None:
            shared.setdefault(np.packbits(eligible[i]).tobytes(), (table, market, []))[2].append(i)
            continue
        view = _job_view(store, snap, [job], [speeds], table, now)
        out.append(([i], JobInputs(table, with_speed(market, speeds.speed), view,
                                   eligible[i:i + 1], speeds)))
    for table, market, members in shared.values():
        view = _job_view(store, snap, [jobs[i] for i in members], [None] * len(members),
                         table, now)
        out.append((members, JobInputs(table, market, view, eligible[members], None)))
    return out


def _job_view(store: Store, snap: MarketSnapshot, jobs: list[Job],
              speeds: list[JobSpeeds | None], table: OfferTable, now: datetime) -> JobView:
    """:func:`job_view` of ``jobs`` (each with its :class:`JobSpeeds`) over ``table``."""
    cols: dict[str, list[float]] = {k: [] for k in (
        "compute_h", "remaining_compute_h", "budget_usd", "user_spent_usd", "user_budget_usd",
        "checkpoint_interval_h", "checkpoint_age_h", "final_checkpoint_s")}
    for job, job_speed in zip(jobs, speeds, strict=True):
        user_limit = snap.budgets.users.get(job.spec.owner)
        placement = job.placement
        age_h = 0.0
        if placement is not None and placement.instance_id is not None:
            # (an offer's estimate does not depend on which other offers are listed)
            speed = offer_speed(job) if job_speed is not None else 1.0
            age_h = max(0.0, placement.progress_at_start_h + placement.billed_hours(now) * speed
                        - job.progress_h)
        compute_h, remaining_h = compute_hours(job, job_speed)
        cols["compute_h"].append(compute_h)
        cols["remaining_compute_h"].append(remaining_h)
        cols["budget_usd"].append(_or(job.spec.budget_usd, math.inf))
        cols["user_spent_usd"].append(owner_spent(store, snap.budgets, job.spec.owner))
        cols["user_budget_usd"].append(_or(user_limit, math.inf))
        cols["checkpoint_interval_h"].append(
            job.spec.checkpoint.sync_interval_s * snap.time_scale / 3600.0)
        cols["checkpoint_age_h"].append(age_h)
        cols["final_checkpoint_s"].append(job.spec.checkpoint.grace_s)
    return job_view(
        jobs, table, now, restart_overhead_h=RESTART_OVERHEAD_H,
        decision_interval_h=RECONCILE_INTERVAL_S * snap.time_scale / 3600.0,
        time_scale=snap.time_scale, **cols,
    )
