"""What a job's work costs: its units done and left, its rate on an offer and what 1,000
units cost there.

The one place ``status``, ``list`` (through :func:`scheduler.services.jobs.summary`),
``cost-report`` and ``plan`` get these figures from. The rate is the daemon's: the job's speed
model (:func:`scheduler.controller.policy_inputs.job_speeds`, the same
:func:`policies.throughput.estimate_rates` a placement ranks offers by: measured on that GPU
model and count, else declared in ``work.throughput``, else the GPU table's prior recalibrated
by what the job measured elsewhere). Rates are units per *market* hour of the whole offer;
money is USD at the offer's latest recorded price.

A job whose rate is not in its own units (nothing measured nor declared: the table alone gives
reference-hours, not samples) has no cost per unit; a job with neither a spec ``work`` nor a
progress report has no work figures at all (``None``): it is shown as before.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from datetime import datetime

from core.models import Job, Offer, utcnow
from policies.throughput import cost_per_1k
from policies.views import OfferTable
from scheduler.controller.policy_inputs import job_speeds, remaining_units


@dataclass(frozen=True)
class WorkCost:
    """A job's work and its cost on one offer (``None`` where unknown).

    - **unit**: ``samples`` | ``tokens`` | ``steps``.
    - **done**: units done in all (the latest progress report; 0 before any). **total**: the
      spec's ``work.total``, else the latest reported one. **remaining**: total − done (≥ 0).
    - **offer** / **gpu_model** / **gpu_count**: the offer the rate is for (series key),
      **price_usd_per_hour** its latest recorded price.
    - **rate_units_per_h**: units per market hour on that offer; **rate_source**: ``measured``
      | ``declared`` | ``prior``.
    - **hours_to_finish**: remaining ÷ rate (market hours, uninterrupted).
    - **cost_per_1k_usd**: price × nodes × 1,000 ÷ rate (a gang's ``nodes`` instances share
      the work). **cost_to_finish_usd**: hours to finish × price × nodes (uninterrupted, no
      launch).
    - **cost_so_far_usd**: what every placement was billed; **cost_so_far_per_1k_usd**: that
      ÷ units done × 1,000 (what the work done cost, restarts and rework included).
    """

    unit: str
    done: float
    total: float | None
    remaining: float | None
    offer: str | None = None
    gpu_model: str | None = None
    gpu_count: int | None = None
    price_usd_per_hour: float | None = None
    rate_units_per_h: float | None = None
    rate_source: str | None = None
    hours_to_finish: float | None = None
    cost_per_1k_usd: float | None = None
    cost_to_finish_usd: float | None = None
    cost_so_far_usd: float | None = None
    cost_so_far_per_1k_usd: float | None = None

    def as_dict(self) -> dict:
        return asdict(self)


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _unit(job: Job) -> str | None:
    latest = job.progress.latest
    if latest is not None:
        return latest.unit.value
    return job.spec.work.unit.value if job.spec.work is not None else None


def offer_of(job: Job) -> tuple[Offer, float] | None:
    """The offer a job's work is priced on and its latest recorded price (USD/h): the current
    placement's, else the last one's; ``None`` before any placement."""
    placed = job.all_placements()
    if not placed:
        return None
    p = placed[-1]
    return p.offer, p.price_usd_per_hour()


def rates_on(job: Job, offers: list[Offer]) -> tuple[list[float | None], list[str | None]]:
    """The job's rate (units per market hour, whole offer) and its source on each of
    ``offers``, in the job's units; ``None`` for every offer when the speed model is off or
    its rates are not in the job's units (reference-hours only)."""
    if not offers:
        return [], []
    speeds = job_speeds(job, OfferTable.from_offers(offers))
    if speeds is None or speeds.unit is None:
        return [None] * len(offers), [None] * len(offers)
    return ([_finite(float(r)) for r in speeds.rates.units_per_h], list(speeds.rates.source))


def work_cost(job: Job, now: datetime | None = None,
              offer: tuple[Offer, float] | None = None) -> WorkCost | None:
    """The :class:`WorkCost` of ``job`` on ``offer`` (an offer and its price, USD/h; default:
    :func:`offer_of`), at ``now`` for the cost so far. ``None`` when the job has no work unit
    (no spec ``work`` and no progress report)."""
    unit = _unit(job)
    if unit is None:
        return None
    now = now or utcnow()
    latest = job.progress.latest
    done = float(latest.done) if latest is not None else 0.0
    remaining = remaining_units(job)
    total = None if remaining is None else (
        float(job.spec.work.total) if job.spec.work is not None and job.spec.work.total
        else float(latest.total))
    spent = job.cost_usd(now) if job.all_placements() else None
    so_far_1k = spent * 1000.0 / done if spent is not None and done > 0 else None
    base = {"unit": unit, "done": done, "total": total, "remaining": remaining,
            "cost_so_far_usd": spent, "cost_so_far_per_1k_usd": so_far_1k}
    offer = offer or offer_of(job)
    if offer is None:
        return WorkCost(**base)
    o, price = offer
    [rate], [source] = rates_on(job, [o])
    where = {"offer": o.key.series(), "gpu_model": o.gpu_model, "gpu_count": o.gpu_count,
             "price_usd_per_hour": price}
    if rate is None:
        return WorkCost(**base, **where)
    hours = remaining / rate if remaining is not None else None
    paid = price * job.spec.resources.nodes  # a gang pays every node for the work they share
    return WorkCost(**base, **where, rate_units_per_h=rate, rate_source=source,
                    hours_to_finish=hours, cost_per_1k_usd=_finite(cost_per_1k(paid, rate)),
                    cost_to_finish_usd=None if hours is None else hours * paid)
