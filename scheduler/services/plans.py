"""``schedctl plan job.yaml``: what a job will cost and how long it will take, before it runs,
and where the daemon would place it now.

The decision and the costs are the daemon's: the market is read and the policy inputs are
built by :mod:`scheduler.controller.policy_inputs` (as a placement does), the offer is chosen
by :func:`policies.decisions.decide_placement` and every cost is the policy's risk-aware cost to
finish (:mod:`policies.risk`): with ``H`` compute hours, an offer's reclaim rate ``λ`` (from its
interruption risk and the per-poll availability samples) and the hours a reclaim loses
(restart overhead + half a checkpoint sync interval), the instance is billed
``T = H / (1 - λ·loss)`` hours plus one restart overhead; the expected cost is ``T`` at the
current price (what the policy ranks offers by). ``low``/``high`` price the same hours at the
offer's ``p10``/``p90`` over a lookback window of its history (the current price when it has
none or when it lies outside); ``duration_hours.low`` is ``H`` plus the launch, without
reclaims. An offer whose reclaims leave no progress (``λ·loss ≥ 0.99``) never finishes
(``None``).

Work (a spec's ``work`` with a total, or the ``work`` option: ``N`` samples, tokens or steps ×
``epochs``, the planning formula GPU-hours = data × epochs ÷ per-GPU throughput): the job's
speed model gives its rate on every offer (:func:`scheduler.services.work.rates_on`, the
daemon's :func:`~scheduler.controller.policy_inputs.job_speeds`: declared in
``work.throughput``, else the GPU table's prior scaled by the declared models), ``H`` is then
the work ÷ the rate of one reference GPU (reference-hours) and an offer of speed ``s`` needs
``H ÷ s`` hours; each estimate names its rate, the rate's source (measured | declared | prior)
and the cost of 1,000 units there (price ÷ rate). Without the speed model every speed is 1.

Three scenarios: all **on-demand** (the cheapest fitting on-demand offer, ignoring the job's
market, price and risk limits, as the savings baseline does), **spot** (the fitting spot offer
of lowest expected cost) and the **policy** (what a placement would choose now, with its
reason), plus the five fitting offers of lowest expected cost.

Offers: with a daemon, its latest offers (the API route passes its providers); without one,
what the configured providers list now (:func:`plan_without_daemon`: ``GA_HOME/config.yaml`` or
the embedded replayed example market, as the daemon resolves it; a replayed market is read
from its file without starting its cloud). When no provider lists anything, the latest prices
in history give the estimates and the policy scenario says the daemon would wait.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from core.models import Job, JobSpec, Market, MarketChoice, Offer, utcnow
from core.models.jobs import JobProgress
from core.models.specs import WorkSpec
from core.models.work import WORK_MAX_UNITS, ProgressPoint, WorkUnit
from policies import risk
from policies.constraints import explain_no_fit
from policies.decisions import decide_placement, tie_break_rank
from policies.eligibility import eligible_matrix
from policies.priors import UNKNOWN_SPOT_RISK
from policies.throughput import REFERENCE_GPU, cost_per_1k
from policies.views import NO_OFFER, Reason
from scheduler.controller.context import ProviderRegistry
from scheduler.controller.policy_inputs import (
    JobInputs,
    MarketSnapshot,
    inputs_at,
    read_snapshot,
)
from scheduler.services import jobs as job_service
from scheduler.services.history import parse_when
from scheduler.services.history_stats import Accumulator
from scheduler.store import Store
from scheduler.store.history import from_ms, to_ms
from scheduler.store.known_names import KnownNames


class PlanError(ValueError):
    """A plan request the service refuses; ``field`` names the request's field (``work``,
    ``work.unit``, ``work.amount``, ``work.epochs``, ``compute_hours``, ``like_job``)."""

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        super().__init__(f"{field}: {problem}")


@dataclass(frozen=True)
class WorkOption:
    """The work to plan for instead of the spec's: ``amount`` units of ``unit`` (e.g. the
    dataset's samples) × ``epochs``."""

    unit: WorkUnit
    amount: float
    epochs: float = 1.0

    @property
    def total(self) -> float:
        return self.amount * self.epochs


def _row(offer: Offer, prices: dict[str, float], compute_hours: float, inflation: float,
         launch_h: float, reclaims_per_h: float) -> dict[str, Any]:
    """One offer's estimate (see the module docstring). ``compute_hours``: hours of work on
    this offer; ``inflation``: billed hours per useful hour (``inf``: never finishes);
    ``reclaims_per_h``: the policy's hazard on the offer."""
    row: dict[str, Any] = {
        "series": offer.key.series(), "provider": offer.provider, "region": offer.region,
        "zone": offer.zone, "instance_type": offer.instance_type, "market": offer.market.value,
        "gpu_model": offer.gpu_model, "gpu_count": offer.gpu_count,
        "price_now": offer.price_usd_per_hour, "price_p10": prices["p10"],
        "price_mean": prices["mean"], "price_p90": prices["p90"],
        "history_hours": prices["hours"], "interruption_risk": offer.interruption_risk,
    }
    if not math.isfinite(inflation):
        return {**row, "expected_interruptions": None, "rework_hours": None,
                "duration_hours": None, "cost_usd": None, "hours_to_finish": None,
                "cost_to_finish_usd": None}
    billed_h = compute_hours * inflation
    expected_h = billed_h + launch_h
    now = offer.price_usd_per_hour
    return {**row, "expected_interruptions": reclaims_per_h * billed_h,
            "rework_hours": billed_h - compute_hours,
            "duration_hours": {"low": compute_hours + launch_h, "expected": expected_h,
                               "high": expected_h},
            "cost_usd": {"low": expected_h * min(prices["p10"], now), "expected": expected_h * now,
                         "high": expected_h * max(prices["p90"], now)},
            "hours_to_finish": expected_h, "cost_to_finish_usd": expected_h * now}


def _draft(spec: JobSpec, now: datetime, like: Job | None = None,
           with_total: bool = True) -> Job:
    """The job as submit would store it (never stored): what a fresh placement decides for.
    With ``like``, a job whose throughput to plan with: the draft carries its measured rates
    (as evidence of earlier attempts) and a progress point of 0 units done in its unit, so the
    speed model ranks offers in that unit as it would for ``like`` itself (and its reported
    total, unless ``with_total`` is false: the hours are given). Raises
    :class:`PlanError` when ``like`` measured nothing or counts another unit than the spec."""
    job = Job(id=f"{spec.name}-plan", spec=spec, created_at=now, updated_at=now)
    if like is None:
        return job
    measured = [r for r in like.progress.measured() if r.hours > 0]
    latest = like.progress.latest
    if not measured or latest is None:
        raise PlanError("like_job", f"{like.id} has measured no throughput yet (no two "
                                    "progress reports on an offer)")
    if spec.work is not None and spec.work.unit is not latest.unit:
        raise PlanError("like_job", f"{like.id} counts {latest.unit.value}, the spec's work "
                                    f"{spec.work.unit.value}")
    job.progress = JobProgress(closed=measured, latest=ProgressPoint(
        unit=latest.unit, done=0, total=latest.total if with_total else None, at=now))
    return job


def _policy_reason(inputs: JobInputs, snap: MarketSnapshot, spec: JobSpec, store: Store,
                   index: int, reason: Reason, explanation: str) -> str:
    """The reason a placement would record (:mod:`scheduler.controller.placing`)."""
    from scheduler.controller.placing import why

    if index != NO_OFFER:
        return why(inputs, index, explanation)
    if reason is Reason.BUDGET_STOP or np.any(inputs.eligible):
        return explanation
    return explain_no_fit(spec, snap.offers, store.offers.unavailable(),
                          KnownNames(store.redis).names())


def _history_prices(store: Store, offers: list[Offer], start_ms: int, end_ms: int) -> dict[str, dict[str, float]]:
    history = store.offers.history
    names = sorted({o.key.series() for o in offers})
    metas = history.metas(names)
    live = history.live(list(metas))
    out = {}
    for series, meta in metas.items():
        hi = end_ms if series in live else min(end_ms, meta.last_seen_ms)
        lo = max(start_ms, meta.first_ms)
        if lo > hi:
            continue
        acc = Accumulator()
        acc.add(*history.pieces(meta, lo, hi))
        stats = acc.result()
        if stats:
            out[series] = stats
    return out


def _offers_from_history(store: Store) -> list[Offer]:
    """Offers rebuilt from each series' latest price (hardware from the map)."""
    from scheduler.services.history import select_series
    from scheduler.store.history_sources import REAL

    history = store.offers.history
    matched = [(s, k, hw) for s, k, hw in select_series(store) if hw]
    # select_series lists real history: read those series there, whatever lists them now.
    metas = history.metas([s for s, _, _ in matched], REAL)
    # Every point is at or before the newest last_seen: one batch gives each series' last price.
    latest = history.prices_at(list(metas), max((m.last_seen_ms for m in metas.values()), default=0),
                               REAL)
    out = []
    for series, key, hw in matched:
        meta, found = metas.get(series), latest.get(series)
        if meta is None or found is None:
            continue
        out.append(Offer(
            provider=key.provider, region=key.region, zone=key.zone,
            instance_type=key.instance_type, market=key.market, gpu_model=str(hw["gpu_model"]),
            gpu_count=int(hw["gpu_count"]), vram_gib=float(hw["vram_gib"]),
            vcpus=int(hw.get("vcpus") or 0), memory_gib=float(hw.get("memory_gib") or 0),
            price_usd_per_hour=found[0], observed_at=from_ms(meta.last_seen_ms),
            interruption_risk=UNKNOWN_SPOT_RISK if key.market is Market.SPOT else 0.0))
    return out


def _hours(spec: JobSpec, compute_hours: float | None,
           work: WorkOption | None = None) -> tuple[JobSpec, float, str]:
    """The spec to decide for, the compute hours to plan for and where they come from (see
    :func:`plan`): an explicit ``compute_hours`` (set as ``expected_hours``; a spec's work
    total is then not used), the ``work`` option (set as ``work.total``; hours from the
    rates, :func:`_work_hours`), the spec's ``work.total``, its ``expected_hours``, else 1."""
    if compute_hours is not None and work is not None:
        raise PlanError("work", "give the work (samples, tokens or steps) or compute_hours, "
                                "not both")
    if work is not None:
        return _with_work(spec, work), math.nan, "option"
    if compute_hours is not None:
        hours = float(compute_hours)
        if not hours > 0:
            raise PlanError("compute_hours", f"got {compute_hours}; must be > 0")
        update: dict[str, Any] = {"expected_hours": hours}
        if spec.work is not None and spec.work.total is not None:
            update["work"] = spec.work.model_copy(update={"total": None})
        return spec.model_copy(update=update), hours, "option"
    if spec.work is not None and spec.work.total is not None:
        return spec, math.nan, "work"
    if spec.expected_hours is not None:
        return spec, float(spec.expected_hours), "spec"
    return spec, 1.0, "default"


def _with_work(spec: JobSpec, work: WorkOption) -> JobSpec:
    """``spec`` with ``work.total`` = the option's total in its unit (the rest of the spec's
    ``work`` kept). Raises :class:`PlanError` for a total out of bounds, and for another
    unit than the spec's ``work.unit`` when the spec declares a throughput (``work.unit``)."""
    for name, value in (("amount", work.amount), ("epochs", work.epochs)):
        if not (math.isfinite(value) and value > 0):
            raise PlanError(f"work.{name}", f"got {value}; must be a number > 0")
    if work.total > WORK_MAX_UNITS:
        raise PlanError("work", f"{work.amount:g} × {work.epochs:g} epochs = {work.total:g} "
                                f"{work.unit.value}; at most {WORK_MAX_UNITS:g}")
    if spec.work is not None and spec.work.throughput and work.unit is not spec.work.unit:
        # The declared rates count the spec's unit: other units cannot be converted.
        unit = spec.work.unit.value
        raise PlanError("work.unit", f"got {work.unit.value}, but the spec's work is in {unit} "
                                     f"(work.unit; its work.throughput is {unit} per second): "
                                     f"give the work in {unit}")
    base = spec.work or WorkSpec()
    return spec.model_copy(update={"work": base.model_copy(
        update={"unit": work.unit, "total": work.total})})


def _work_hours(inputs: JobInputs, unit: str) -> float:
    """Reference-hours of the spec's work (the daemon's ``remaining_compute_h``). Raises
    :class:`PlanError` when the job's rates are not in its units (nothing declared)."""
    speeds = inputs.speeds
    hours = float(inputs.jobs.remaining_compute_h[0])
    if speeds is not None and speeds.unit is not None and math.isinf(hours):
        raise PlanError("work", f"at the declared throughput the work in {unit} would take "
                                "longer than any hours can count (work.total ÷ "
                                "work.throughput overflows): it never finishes")
    if speeds is None or speeds.unit is None or not math.isfinite(hours):
        raise PlanError("work", f"the spec declares no throughput in {unit} "
                                "(work.throughput: units per second on one GPU of a model, e.g. "
                                "{A100-80GB: 2400}), so its work cannot be turned into hours; "
                                "declare one, plan like a job that measured one (like_job), "
                                "or plan by compute hours")
    return hours


def _market(store: Store, providers: ProviderRegistry | None, offers: list[Offer] | None,
            offers_source: str) -> tuple[MarketSnapshot, str, bool]:
    """The market to plan on, what it is (shown) and whether it is live: the given or latest
    offers, else offers rebuilt from the latest prices in history (not live)."""
    snap = read_snapshot(store, providers, offers)
    if not snap.offers:
        rebuilt = _offers_from_history(store)
        if rebuilt:
            return read_snapshot(store, None, rebuilt), "latest prices in history", False
    return snap, offers_source, True


@dataclass(frozen=True)
class _Estimates:
    """Every offer's estimate for one job (see the module docstring), ranked by the policy's
    expected cost to finish, ties by :func:`policies.decisions.tie_break_rank`."""

    snap: MarketSnapshot
    spec: JobSpec
    hours: float
    stats: dict[str, dict[str, float]]   # series -> price quantiles over the lookback
    lam: np.ndarray                      # (m,) reclaims per hour
    inflation: np.ndarray                # (m,) billed hours per useful hour
    launch_h: float
    finish: np.ndarray                   # (m,) expected USD to finish
    rank: np.ndarray                     # (m,)
    speed: np.ndarray                    # (m,) reference-hours per hour (1 without speeds)
    rates: np.ndarray | None             # (m,) units per market hour (or A100-80GB-hours)
    sources: tuple[str, ...] | None      # (m,) measured | declared | prior
    unit: str | None                     # the rates' unit (None: reference-hours)

    @classmethod
    def of(cls, store: Store, snap: MarketSnapshot, inputs: JobInputs, spec: JobSpec,
           hours: float, since: datetime, now: datetime) -> _Estimates:
        market, jobs = inputs.market, inputs.jobs
        lam = risk.hazard_per_h(market.offer_stats, inputs.table.is_spot)
        finish = risk.expected_cost_to_finish(jobs, market.price_usd_per_hour,
                                              risk.effective_price(jobs, market))[0]
        speeds = inputs.speeds
        m = len(snap.offers)
        return cls(snap, spec, hours, _history_prices(store, snap.offers, to_ms(since), to_ms(now)),
                   lam, risk.inflation(lam, risk.loss_per_reclaim_h(jobs, inputs.table)[0]),
                   float(jobs.restart_overhead_h[0] + jobs.move_extra_h[0]), finish,
                   tie_break_rank(inputs.table),
                   speeds.speed if speeds is not None else np.ones(m),
                   speeds.rates.units_per_h if speeds is not None else None,
                   speeds.rates.source if speeds is not None else None,
                   speeds.unit if speeds is not None else None)

    def row(self, i: int) -> dict[str, Any]:
        """Offer ``i``'s estimate; with a budget, whether it overruns it (``over_budget``)."""
        o = self.snap.offers[i]
        s = self.stats.get(o.key.series())
        prices = ({"p10": s["p10"], "mean": s["mean"], "p90": s["p90"], "hours": s["hours"]} if s
                  else {"p10": o.price_usd_per_hour, "mean": o.price_usd_per_hour,
                        "p90": o.price_usd_per_hour, "hours": 0.0})
        speed = float(self.speed[i])
        hours = self.hours / speed if speed > 0 else math.inf
        row = _row(o, prices, hours, float(self.inflation[i]) if math.isfinite(hours)
                   else math.inf, self.launch_h, float(self.lam[i]))
        row.update(self._work(i, hours))
        if self.spec.budget_usd is not None:
            # A job that never finishes overruns any budget.
            row["over_budget"] = row["cost_usd"] is None or \
                row["cost_usd"]["expected"] > self.spec.budget_usd
        return row

    def _work(self, i: int, hours: float) -> dict[str, Any]:
        """Offer ``i``'s speed, rate, its source and the cost of 1,000 units there (price now
        ÷ rate; ``None`` without rates in the job's units), its GPU-hours and the expected
        hours and cost to finish (the ``expected`` duration and cost)."""
        o = self.snap.offers[i]
        rate = float(self.rates[i]) if self.rates is not None else None
        if rate is not None and self.unit is None:
            # The table's rates are relative to an A100-80GB; the plan's hours are on the
            # job's reference GPU: a rate in its reference-hours is the offer's speed.
            rate = float(self.speed[i])
        return {
            "speed": float(self.speed[i]),
            "rate_per_h": rate, "rate_unit": self.unit or ("reference-hours"
                                                           if rate is not None else None),
            "throughput_source": self.sources[i] if self.sources is not None else None,
            "cost_per_1k_usd": (cost_per_1k(o.price_usd_per_hour, rate)
                                if rate is not None and self.unit is not None else None),
            "gpu_hours": hours * max(o.gpu_count, 1) if math.isfinite(hours) else None,
        }

    def best(self, mask: np.ndarray) -> list[dict[str, Any]]:
        """The estimates of the offers in ``mask``, lowest expected cost first."""
        picked = sorted(np.flatnonzero(mask), key=lambda i: (self.finish[i], self.rank[i]))
        return [self.row(int(i)) for i in picked]


def _scenarios(store: Store, snap: MarketSnapshot, inputs: JobInputs, spec: JobSpec,
               est: _Estimates, live: bool) -> dict[str, Any]:
    """The ``on-demand``, ``spot`` and ``policy`` scenarios (see :func:`plan`)."""
    as_spot = spec.model_copy(update={"market": MarketChoice.SPOT})
    as_on_demand = spec.model_copy(update={"market": MarketChoice.ON_DEMAND,
                                           "max_price_usd_per_hour": None,
                                           "max_interruption_risk": None})
    masks = eligible_matrix([as_spot, as_on_demand], snap.table, snap.prices, snap.unavailable)
    if live:
        decision = decide_placement(inputs.jobs, inputs.market)
        index, reason = int(decision.offer[0]), Reason(int(decision.reason[0]))
        text = _policy_reason(inputs, snap, spec, store, index, reason, decision.explain())
    else:
        index, text = NO_OFFER, ("no provider lists an offer now: the daemon would wait (these "
                                 "estimates use the latest prices in history)")
    policy = est.row(index) if index != NO_OFFER else {}
    return {"on-demand": next(iter(est.best(masks[1])), None),
            "spot": next(iter(est.best(masks[0])), None),
            "policy": {**policy, "reason": text}}


def plan(store: Store, raw_spec: Any, compute_hours: float | None = None, lookback: str = "30d",
         now: datetime | None = None, *, providers: ProviderRegistry | None = None,
         offers: list[Offer] | None = None, offers_source: str = "latest offers",
         problems: list[str] | None = None, work: WorkOption | None = None,
         like_job: str | None = None) -> dict[str, Any]:
    """The plan of a job spec (a mapping, as submitted).

    Args:
        compute_hours: instance-hours the job needs without interruptions on its reference
            GPU (default: from its work, else the spec's ``expected_hours``, else 1: the
            result is then per compute hour). The decision is taken as for the spec with
            ``expected_hours`` set to it (and no ``work.total``).
        work: the work to plan for (:class:`WorkOption`), set as the spec's ``work.total``;
            not with ``compute_hours``. Its hours come from the job's rates: the spec must
            declare a throughput (``work.throughput``), or ``like_job`` have measured one.
        like_job: the id of a job whose measured throughput to plan with (its rates on the
            GPU models it ran on, the others' priors recalibrated by them): every estimate's
            rate is then in that job's unit (``measured`` where it ran). Unknown: JobNotFound.
        lookback: history window for the price quantiles (``30d``, ``1y``, an ISO date).
        providers: the daemon's adapters (which offers are launchable, the market's time
            scale); ``None`` counts every provider launchable at time scale 1.
        offers: the market to decide on (default: the latest offers in the store), named by
            ``offers_source``; ``problems``: why some provider listed nothing (shown).

    Returns:
        ``{"job", "compute_hours" (reference-hours: hours on one reference GPU, or on every
        offer without the speed model), "compute_hours_source" ("option", "work" (the
        spec's), "spec", "default"), "work" (``None``, or ``{"unit", "total", "amount",
        "epochs", "source": "option" | "spec", "reference_gpu", "reference_rate_per_h"}``),
        "unplanned_work" (``{"unit", "total"}``: the spec's ``work.total`` when no rate in
        its unit turns it into hours, so the hours are ``expected_hours`` or the default;
        else ``None``), "reference_gpu" (the one GPU every ``speed`` and reference-hour is
        relative to: the spec's ``reference_gpu``, else A100-80GB; ``None`` without the speed
        model) and "reference_gpu_source" ("spec" | "default" | ``None``),
        "gpu_hours", "budget_usd" (the spec's, or None), "over_budget" (scenario names whose
        expected cost exceeds it), "lookback_since", "offers_source", "offers_problems",
        "eligible", "scenarios": {"on-demand", "spot", "policy"}, "best_offers",
        "assumptions"}``; a scenario is an offer's estimate (``series``, prices, ``risk``,
        ``expected_interruptions``, ``rework_hours``, ``duration_hours`` and ``cost_usd`` as
        ``{"low", "expected", "high"}`` or ``None`` when it never finishes) or ``None`` when
        nothing fits; the policy scenario carries the placement's ``reason`` (alone when it
        would wait). Every estimate also carries ``hours_to_finish`` and ``cost_to_finish_usd``
        (the expected ones), ``gpu_hours``, ``speed``, ``rate_per_h`` in ``rate_unit``,
        ``throughput_source`` (measured | declared | prior; ``None`` without the speed model;
        without rates in the job's units ``rate_per_h`` is the ``speed``: reference-hours per
        hour on one ``reference_gpu``)
        and ``cost_per_1k_usd`` (``None`` without rates in the job's units). With a budget,
        every estimate carries ``over_budget``.

    Raises:
        SpecError: the spec is invalid. QueryError: a bad ``lookback``.
        PlanError (a ValueError): ``compute_hours`` is not positive, the work option is out
        of bounds, given with ``compute_hours``, or for a spec that declares no throughput.
        ``redis.RedisError``.
    """
    spec, hours, hours_source = _hours(job_service.parse_spec(raw_spec), compute_hours, work)
    now = now or utcnow()
    since = parse_when(lookback, "lookback", now) or now - timedelta(days=30)
    snap, source, live = _market(store, providers, offers, offers_source)
    like = job_service.get(store, like_job) if like_job else None
    draft = _draft(spec, now, like, with_total=compute_hours is None)
    inputs = inputs_at(store, snap, draft, now)
    hours, hours_source = _planned_hours(inputs, spec, hours, hours_source, work)
    est = _Estimates.of(store, snap, inputs, spec, hours, since, now)
    scenarios = _scenarios(store, snap, inputs, spec, est, live)
    summary = _work_summary(inputs, draft, work)
    return {
        "job": spec.name, "compute_hours": hours, "compute_hours_source": hours_source,
        "work": summary, "like_job": like_job,
        "unplanned_work": _unplanned_work(spec, summary, hours_source),
        "reference_gpu": None if inputs.speeds is None else spec.reference_gpu or REFERENCE_GPU,
        "reference_gpu_source": None if inputs.speeds is None else (
            "spec" if spec.reference_gpu else "default"),
        "gpu_hours": hours * spec.resources.gpu_count, "budget_usd": spec.budget_usd,
        "over_budget": [name for name, e in scenarios.items() if (e or {}).get("over_budget")],
        "lookback_since": since.isoformat(), "offers_source": source,
        "offers_problems": list(problems or []), "eligible": int(inputs.eligible.sum()),
        "scenarios": scenarios,
        "best_offers": est.best(inputs.eligible)[:5],
        "assumptions": {"sync_interval_s": spec.checkpoint.sync_interval_s,
                        "restart_overhead_h": est.launch_h, "time_scale": snap.time_scale,
                        "unknown_spot_risk": UNKNOWN_SPOT_RISK},
    }


def _planned_hours(inputs: JobInputs, spec: JobSpec, hours: float, source: str,
                   work: WorkOption | None) -> tuple[float, str]:
    """The hours :func:`_hours` left to the rates: the work option's (refused without rates
    in its unit); without given hours, the work total's when the rates are in its units (as
    the daemon's inputs take it: a spec's ``work.total``, or the total ``like_job`` reported),
    else ``expected_hours`` or the default."""
    if work is not None:
        return _work_hours(inputs, work.unit.value), "option"
    if source == "option":
        return hours, source
    speeds, left = inputs.speeds, float(inputs.jobs.remaining_compute_h[0])
    if speeds is not None and speeds.unit is not None and not math.isnan(left):
        return _work_hours(inputs, speeds.unit), "work"
    if source != "work":
        return hours, source
    if spec.expected_hours is not None:
        return float(spec.expected_hours), "spec"
    return 1.0, "default"


def _unplanned_work(spec: JobSpec, summary: dict | None, source: str) -> dict | None:
    """The spec's work total when the plan could not use it (no rates in its unit: the hours
    are the spec's ``expected_hours`` or the default), else ``None``."""
    work = spec.work
    if summary is not None or source not in ("spec", "default") or work is None \
            or work.total is None:
        return None
    return {"unit": work.unit.value, "total": float(work.total)}


def _work_summary(inputs: JobInputs, draft: Job, work: WorkOption | None) -> dict | None:
    """The work planned for (see :func:`plan`), ``None`` without a work total in units."""
    spec, latest = draft.spec, draft.progress.latest
    total, source = None, "spec"
    if spec.work is not None and spec.work.total is not None:
        total = float(spec.work.total)
    elif latest is not None and latest.total is not None:
        total, source = float(latest.total), "like_job"
    if total is None or inputs.speeds is None or inputs.speeds.unit is None:
        return None
    return {"unit": inputs.speeds.unit, "total": total,
            "amount": work.amount if work else total,
            "epochs": work.epochs if work else 1.0, "source": "option" if work else source,
            "reference_gpu": spec.reference_gpu or REFERENCE_GPU,
            "reference_rate_per_h": inputs.speeds.ref_rate}


def plan_without_daemon(store: Store, home: Path, raw_spec: Any, compute_hours: float | None = None,
                        lookback: str = "30d", config: Path | None = None,
                        work: WorkOption | None = None,
                        like_job: str | None = None) -> dict[str, Any]:
    """:func:`plan` on what the configured providers list now (no daemon runs): the providers
    of ``config``, else ``GA_HOME/config.yaml``, else the replayed example market, as the
    daemon resolves them (:mod:`scheduler.services.configured_market`). Raises what
    :func:`plan` raises and ``scheduler.daemon_config.ConfigError`` for a bad config."""
    from scheduler.services.configured_market import configured_providers, offers_now

    with configured_providers(home, config) as providers:
        listed, problems = offers_now(store, providers)
        return plan(store, raw_spec, compute_hours, lookback, providers=providers,
                    offers=listed, offers_source="listed now by the configured providers (no "
                                                 "daemon running)", problems=problems,
                    work=work, like_job=like_job)
