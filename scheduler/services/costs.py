"""``schedctl cost-report``: what jobs cost, from what was recorded.

- **Compute**: what the market charged each placement: the held offer's price series
  integrated over its running time (:meth:`core.models.Placement.cost_usd`; the price at
  the decision, then every change the offer poller recorded in price history while it ran,
  each from the time it took effect), in market hours (wall time × the placement's
  ``time_scale``), per placement and in total; cost per GPU-hour; savings against the job's
  all-on-demand reference (the cheapest eligible on-demand price when it was first placed,
  over the same hours).
- **Checkpoint storage and transfer** (estimates, from the checkpoint manifests still in the
  checkpoint store, :func:`scheduler.checkpoints.checkpoints.list_checkpoints`): blobs are
  content-addressed, so a file is uploaded once per distinct content. Uploaded bytes = the
  distinct blobs' sizes; restored bytes = for every placement after the first, the size of
  the newest checkpoint committed before it started. Transfer = (uploaded + restored) GB ×
  ``transfer_usd_per_gb``. Storage = each distinct blob's GB × the months from its first
  checkpoint to the job's end (or now) × ``storage_usd_per_gb_month``, in the job's market
  time like compute. Checkpoints pruned from the store are not seen, so these are lower bounds.
- **Owned and rented**: compute on the team's own machines (placements whose provider is
  served by a ``kind: fleet`` adapter, priced at the hosts' amortised
  ``cost_per_gpu_hour_usd``) apart from compute rented from clouds and markets:
  ``owned_compute_usd``/``owned_gpu_hours`` and ``rented_compute_usd``/``rented_gpu_hours``,
  per job and in total, and ``owned`` on each placement. Which providers are owned is the
  caller's (:func:`scheduler.services.fleet.owned_provider_names`).
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from core.models import Job, utcnow
from core.units import HOURS_PER_MONTH
from scheduler.checkpoints.checkpoints import list_checkpoints
from scheduler.checkpoints.objectstore import CheckpointStoreError, ObjectStore
from scheduler.services import jobs as job_service
from scheduler.store import Store

log = logging.getLogger(__name__)

# S3 Standard storage and AWS internet egress list prices (us-east-1), USD.
STORAGE_USD_PER_GB_MONTH = 0.023
TRANSFER_USD_PER_GB = 0.09
BYTES_PER_GB = 1e9


def _checkpoint_bytes(job: Job, objects: ObjectStore | None) -> dict[str, Any]:
    """Uploaded, restored and stored bytes, and stored GB-hours (wall), of ``job``."""
    if objects is None:
        return {"available": False, "detail": "no checkpoint store"}
    try:
        manifests = sorted(list_checkpoints(objects, job.id), key=lambda m: m.created_at)
    except CheckpointStoreError as exc:
        return {"available": False, "detail": f"checkpoint store unreadable: {exc}"}
    end = job.updated_at if job.state.is_terminal() else utcnow()
    first_seen: dict[str, tuple[int, datetime]] = {}
    for m in manifests:
        for f in m.files:
            first_seen.setdefault(f.sha256, (f.size_bytes, m.created_at))
    uploaded = sum(size for size, _ in first_seen.values())
    gb_hours = sum(size / BYTES_PER_GB * max(0.0, (end - at).total_seconds()) / 3600
                   for size, at in first_seen.values())
    restored = 0
    for p in job.all_placements()[1:]:
        if p.started_at is None:
            continue
        before = [m for m in manifests if m.created_at <= p.started_at]
        if before:
            restored += before[-1].total_bytes
    return {"available": True, "checkpoints": len(manifests), "uploaded_bytes": uploaded,
            "restored_bytes": restored, "stored_bytes": uploaded, "stored_gb_hours": gb_hours}


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
    "checkpoints": {...}, "storage_usd", "transfer_usd", "total_usd"}``. A placement's row:
    ``price_usd_per_hour`` at the decision, ``last_price_usd_per_hour`` recorded,
    ``mean_price_usd_per_hour`` billed (``cost_usd / billed_hours``), ``price_changes``,
    ``owned``.
    """
    now = now or utcnow()
    placements = []
    for p in job.all_placements():
        hours, cost = p.billed_hours(now), p.cost_usd(now)
        placements.append({
            "attempt": p.attempt, "series": p.offer.key.series(), "market": p.offer.market.value,
            "owned": p.offer.provider in owned_providers,
            "gpu_model": p.offer.gpu_model, "gpu_count": p.offer.gpu_count,
            "price_usd_per_hour": p.offer.price_usd_per_hour,
            "last_price_usd_per_hour": p.price_usd_per_hour(),
            "mean_price_usd_per_hour": cost / hours if hours else None,
            "price_changes": len(p.price_changes), "billed_hours": hours,
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
    ckpt = _checkpoint_bytes(job, objects)
    storage = transfer = 0.0
    if ckpt["available"]:
        storage = ckpt["stored_gb_hours"] * scale / HOURS_PER_MONTH * storage_usd_per_gb_month
        transfer = (ckpt["uploaded_bytes"] + ckpt["restored_bytes"]) / BYTES_PER_GB * transfer_usd_per_gb
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
    }


def report(store: Store, objects: ObjectStore | None = None, *, job_id: str | None = None,
           since: datetime | None = None, limit: int = 1000,
           storage_usd_per_gb_month: float = STORAGE_USD_PER_GB_MONTH,
           transfer_usd_per_gb: float = TRANSFER_USD_PER_GB,
           owned_providers: frozenset[str] = frozenset(),
           now: datetime | None = None) -> dict[str, Any]:
    """Cost reports of one job (``job_id``) or of every job created since ``since`` (newest
    ``limit``), with totals; ``owned_providers`` as for :func:`job_costs`, also answered as
    ``owned_providers`` (sorted). Raises :class:`~scheduler.services.jobs.JobNotFound`."""
    if job_id:
        jobs = [job_service.get(store, job_id)]
    else:
        jobs = [j for j in store.jobs.list(limit) if since is None or j.created_at >= since]
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
