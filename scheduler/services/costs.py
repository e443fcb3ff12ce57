"""``schedctl cost-report``: what jobs cost, from what was recorded.

- **Compute**: what the market charged each placement: the held offer's price series
  integrated over its running time (:meth:`core.models.Placement.cost_usd`; the price at
  the decision, then every change the offer poller recorded in price history while it ran,
  each from the time it took effect), in market hours (wall time × the placement's
  ``time_scale``), per placement and in total; cost per GPU-hour; savings against the job's
  all-on-demand reference (the cheapest eligible on-demand price when it was first placed,
  over the same hours).
- **Checkpoint storage and transfer** (estimates, from the checkpoint manifests still in the
  checkpoint store, :func:`scheduler.checkpoints.checkpoints.list_checkpoints`, priced by
  :func:`scheduler.checkpoints.accounting.checkpoint_cost`): blobs are content-addressed, so a
  file is stored and uploaded once per distinct content, at its stored (compressed) size; each
  placement after the first restores the newest checkpoint committed before it started.
  Transfer = (uploaded + restored) GiB × ``transfer_usd_per_gb``; storage = each distinct
  blob's GiB × the months from its first checkpoint to the job's end (or now) ×
  ``storage_usd_per_gb_month``, in the job's market time like compute (AWS bills a "GB" of
  2**30 bytes). Checkpoints pruned from the store are not seen, so these are lower bounds.
- **Work** (jobs that report progress or state their ``work``,
  :func:`scheduler.services.work.work_cost`): units done, compute USD per 1,000 units done
  (``usd_per_1k_units``: what the work cost, rework after reclaims included) and the cost per
  1,000 units on the job's (last) offer at its rate there (``offer_usd_per_1k_units``).
- **Owned and rented**: compute on the team's own machines (placements whose provider is
  served by a ``kind: fleet`` adapter, priced at the hosts' amortised
  ``cost_per_gpu_hour_usd``) apart from compute rented from clouds and markets:
  ``owned_compute_usd``/``owned_gpu_hours`` and ``rented_compute_usd``/``rented_gpu_hours``,
  per job and in total, and ``owned`` on each placement. Which providers are owned is the
  caller's (:func:`scheduler.services.fleet.owned_provider_names`).
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from datetime import datetime
from typing import Any

from core.models import Job, utcnow
from scheduler.checkpoints.accounting import (
    EGRESS_USD_PER_GB,
    S3_STANDARD_USD_PER_GB_MONTH,
    checkpoint_cost,
)
from scheduler.checkpoints.checkpoints import list_checkpoints
from scheduler.checkpoints.objectstore import CheckpointStoreError, ObjectStore
from scheduler.services import jobs as job_service
from scheduler.services.work import work_cost
from scheduler.store import Store

log = logging.getLogger(__name__)

# S3 Standard storage and AWS internet egress list prices (us-east-1), USD per GiB
# (scheduler.checkpoints.accounting gives their sources).
STORAGE_USD_PER_GB_MONTH = S3_STANDARD_USD_PER_GB_MONTH
TRANSFER_USD_PER_GB = EGRESS_USD_PER_GB


def _checkpoints(job: Job, objects: ObjectStore | None, end: datetime, time_scale: float,
                 storage_usd_per_gb_month: float, transfer_usd_per_gb: float) -> dict[str, Any]:
    """The job's checkpoint figures (:class:`~scheduler.checkpoints.accounting.CheckpointCost`
    as a mapping, with ``available``), or why there are none (``available`` false, ``detail``)."""
    if objects is None:
        return {"available": False, "detail": "no checkpoint store"}
    try:
        manifests = list_checkpoints(objects, job.id)
    except CheckpointStoreError as exc:
        return {"available": False, "detail": f"checkpoint store unreadable: {exc}"}
    restores = [p.started_at for p in job.all_placements()[1:] if p.started_at is not None]
    cost = checkpoint_cost(manifests, end, restores, time_scale=time_scale,
                           storage_usd_per_gb_month=storage_usd_per_gb_month,
                           transfer_usd_per_gb=transfer_usd_per_gb)
    return {"available": True, **asdict(cost), "compression_ratio": cost.compression_ratio}


def job_costs(job: Job, objects: ObjectStore | None = None, *,
              storage_usd_per_gb_month: float = STORAGE_USD_PER_GB_MONTH,
              transfer_usd_per_gb: float = TRANSFER_USD_PER_GB,
              owned_providers: frozenset[str] = frozenset(),
              now: datetime | None = None) -> dict[str, Any]:
    """The cost report of one job (see the module docstring). Money in USD.

    ``owned_providers``: provider names whose placements ran on the team's own machines.

    Returns ``{"job", "state", "placements": [...], "compute_usd", "billed_hours",
    "gpu_hours", "usd_per_gpu_hour", "owned_compute_usd", "owned_gpu_hours",
    "rented_compute_usd", "rented_gpu_hours", "on_demand_usd", "savings_usd", "savings_pct",
    "checkpoints": {...}, "storage_usd", "transfer_usd", "total_usd", "work_unit",
    "work_done", "usd_per_1k_units", "offer_usd_per_1k_units", "rate_source"}`` (the work
    fields ``None`` for a job without a work unit or without units done). A placement's row:
    ``price_usd_per_hour`` at the decision, ``last_price_usd_per_hour`` recorded,
    ``mean_price_usd_per_hour`` billed (``cost_usd / billed_hours``), ``price_changes``,
    ``owned``, ``nodes`` (instances billed: a gang's launched nodes, else 1); its
    ``billed_hours`` are instance-hours (market hours × nodes).
    """
    now = now or utcnow()
    placements = []
    for p in job.all_placements():
        # A gang is billed for each of its nodes: instance-hours, and so GPU-hours, count them.
        hours, cost = p.instance_hours(now), p.cost_usd(now)
        placements.append({
            "attempt": p.attempt, "series": p.offer.key.series(), "market": p.offer.market.value,
            "owned": p.offer.provider in owned_providers,
            "gpu_model": p.offer.gpu_model, "gpu_count": p.offer.gpu_count,
            "price_usd_per_hour": p.offer.price_usd_per_hour,
            "last_price_usd_per_hour": p.price_usd_per_hour(),
            "mean_price_usd_per_hour": cost / hours if hours else None,
            "price_changes": len(p.price_changes), "billed_hours": hours,
            "nodes": p.billed_nodes(),
            "time_scale": p.time_scale, "cost_usd": cost,
            "end_reason": p.end_reason.value if p.end_reason else None})
    compute = sum(p["cost_usd"] for p in placements)
    billed = sum(p["billed_hours"] for p in placements)
    gpu_hours = sum(p["billed_hours"] * p["gpu_count"] for p in placements)
    owned = [p for p in placements if p["owned"]]
    owned_compute = sum(p["cost_usd"] for p in owned)
    owned_gpu_hours = sum(p["billed_hours"] * p["gpu_count"] for p in owned)
    on_demand = job.on_demand_cost_usd(now)
    scale = max((p.time_scale for p in job.all_placements()), default=1.0)
    end = job.updated_at if job.state.is_terminal() else now
    ckpt = _checkpoints(job, objects, end, scale, storage_usd_per_gb_month, transfer_usd_per_gb)
    storage = ckpt.get("storage_usd", 0.0)
    transfer = ckpt.get("transfer_usd", 0.0)
    work = work_cost(job, now)
    done = work.done if work is not None else 0.0
    return {
        "job": job.id, "state": job.state.value, "created_at": job.created_at.isoformat(),
        "placements": placements, "compute_usd": compute, "billed_hours": billed,
        "gpu_hours": gpu_hours, "usd_per_gpu_hour": compute / gpu_hours if gpu_hours else None,
        "owned_compute_usd": owned_compute, "owned_gpu_hours": owned_gpu_hours,
        "rented_compute_usd": compute - owned_compute,
        "rented_gpu_hours": gpu_hours - owned_gpu_hours,
        "on_demand_usd": on_demand,
        "savings_usd": None if on_demand is None else on_demand - compute,
        "savings_pct": (100 * (1 - compute / on_demand)) if on_demand else None,
        "checkpoints": ckpt, "storage_usd": storage, "transfer_usd": transfer,
        "total_usd": compute + storage + transfer,
        "work_unit": work.unit if work is not None else None,
        "work_done": done if work is not None else None,
        "usd_per_1k_units": compute * 1000.0 / done if done > 0 else None,
        "offer_usd_per_1k_units": work.cost_per_1k_usd if work is not None else None,
        "rate_source": work.rate_source if work is not None else None,
    }


SPEND_JOBS_SCANNED = 10_000
"""Jobs (newest first) :func:`billed_since` reads: older ones are assumed finished before."""


def billed_since(store: Store, since: datetime, *, owner: str | None = None,
                 now: datetime | None = None) -> dict[str, Any]:
    """What was billed from ``since`` (wall clock, UTC) to ``now``, over the newest
    :data:`SPEND_JOBS_SCANNED` jobs (of ``owner`` only, when given), whenever they were
    created: each placement's price series integrated over the part of its running time
    inside the window (:meth:`core.models.Job.cost_usd` with ``since``), in market hours like
    every cost. ``{"since", "until" (ISO 8601), "compute_usd", "on_demand_usd" (the same
    hours at each job's all-on-demand reference; ``None`` without one), "savings_usd",
    "savings_pct", "jobs" (jobs billed in the window)}``. Raises ``redis.RedisError``."""
    now = now or utcnow()
    compute = on_demand = compute_ref = 0.0
    billed = referenced = 0
    for job in store.jobs.list(SPEND_JOBS_SCANNED, owner=owner):
        cost = job.cost_usd(now, since)
        if cost <= 0:
            continue
        billed += 1
        compute += cost
        reference = job.on_demand_cost_usd(now, since)
        if reference:
            referenced += 1
            on_demand += reference
            compute_ref += cost
    return {"since": since.isoformat(), "until": now.isoformat(), "compute_usd": compute,
            "on_demand_usd": on_demand if referenced else None,
            "savings_usd": on_demand - compute_ref if referenced else None,
            "savings_pct": 100 * (1 - compute_ref / on_demand) if on_demand else None,
            "jobs": billed}


def report(store: Store, objects: ObjectStore | None = None, *, job_id: str | None = None,
           since: datetime | None = None, limit: int = 1000,
           storage_usd_per_gb_month: float = STORAGE_USD_PER_GB_MONTH,
           transfer_usd_per_gb: float = TRANSFER_USD_PER_GB,
           owned_providers: frozenset[str] = frozenset(),
           owner: str | None = None, now: datetime | None = None) -> dict[str, Any]:
    """Cost reports of one job (``job_id``) or of every job created since ``since`` (newest
    ``limit``), with totals; ``owned_providers`` as for :func:`job_costs`, also answered as
    ``owned_providers`` (sorted). ``owner``: only that user's jobs (another's ``job_id`` is
    answered as unknown). Raises :class:`~scheduler.services.jobs.JobNotFound`."""
    if job_id:
        job = job_service.get(store, job_id)
        if owner is not None and job.spec.owner != owner:
            raise job_service.JobNotFound(job_id)
        jobs = [job]
    else:
        jobs = [j for j in store.jobs.list(limit, owner=owner)
                if since is None or j.created_at >= since]
    rows = [job_costs(j, objects, storage_usd_per_gb_month=storage_usd_per_gb_month,
                      transfer_usd_per_gb=transfer_usd_per_gb, owned_providers=owned_providers,
                      now=now) for j in jobs]
    total = {k: sum(r[k] or 0 for r in rows)
             for k in ("compute_usd", "storage_usd", "transfer_usd", "total_usd",
                       "billed_hours", "gpu_hours", "owned_compute_usd", "owned_gpu_hours",
                       "rented_compute_usd", "rented_gpu_hours")}
    with_reference = [r for r in rows if r["on_demand_usd"]]
    on_demand = sum(r["on_demand_usd"] for r in with_reference)
    compute_ref = sum(r["compute_usd"] for r in with_reference)
    total.update({
        "jobs": len(rows), "on_demand_usd": on_demand if with_reference else None,
        "savings_usd": on_demand - compute_ref if with_reference else None,
        "savings_pct": 100 * (1 - compute_ref / on_demand) if on_demand else None,
        "usd_per_gpu_hour": total["compute_usd"] / total["gpu_hours"] if total["gpu_hours"] else None,
    })
    return {"jobs": rows, "totals": total, "owned_providers": sorted(owned_providers),
            "prices": {"storage_usd_per_gb_month": storage_usd_per_gb_month,
                       "transfer_usd_per_gb": transfer_usd_per_gb}}
