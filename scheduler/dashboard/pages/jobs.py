"""The Jobs table and the job page.

- ``GET /ui/jobs?state=&owner=&q=&limit=``: the jobs the user may see (an admin: all, and
  may filter by ``owner``), newest first, filtered by state (a :class:`~core.models.JobState`
  value, ``active`` or ``finished``) and by ``q`` (case-insensitive text in the name or id).
- ``GET /ui/jobs/{id}``: one job: its money line, timeline, placements on a time axis with
  the price paid, a gang's nodes (instance, zone, state, last heartbeat, cost per node and in
  all), moves and preemptions with their reasons, checkpoints, GPU utilisation
  reported by its agents, the tail of its log and its live events. 404 for an unknown job
  or another user's.
- ``POST /ui/jobs/{id}/cancel`` (form with ``csrf_token``): :func:`scheduler.services.jobs.cancel`,
  then 303 back to the job page.

Every figure comes from the job summary the API answers (:func:`scheduler.services.jobs.view`):
cost so far, all-on-demand cost, savings, the price per placement and the cost per 1,000
units of work (:mod:`scheduler.services.work`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from core.models import Job, JobState, utcnow
from scheduler.checkpoints.checkpoints import list_checkpoints
from scheduler.checkpoints.objectstore import CheckpointStoreError, ObjectStore
from scheduler.dashboard.render import page_user, render
from scheduler.services import jobs as job_service
from scheduler.store import Store
from scheduler.store.events import EventStream
from scheduler.store.users import Principal

LOG_TAIL_LINES = 200
EVENTS_SHOWN = 50
CHECKPOINTS_SHOWN = 50
# Jobs read for the table at most (newest first), and the default.
JOBS_MAX = 1000
JOBS_DEFAULT = 200
QUERY_MAX_CHARS = 100
STATE_FILTERS = ("", "active", "finished", *(s.value for s in JobState))
# Placement ends that moved the job on, with the word the page uses.
MOVE_ENDS = {"preempted": "preempted", "moved": "moved (cheaper offer or price cap)",
             "lost": "lost (agent stopped reporting)", "stopped": "stopped",
             "launch-failed": "launch failed"}


def _placed(s: dict[str, Any]) -> list[dict[str, Any]]:
    return s["placements"] + ([s["placement"]] if s["placement"] else [])


def where(offer: dict[str, Any]) -> str:
    """``provider/region/zone instance_type`` of an offer (a summary's ``offer`` mapping)."""
    return f"{offer['provider']}/{offer['region']}/{offer['zone']} {offer['instance_type']}"


def job_row(s: dict[str, Any]) -> dict[str, Any]:
    """One table row of a job summary (:func:`scheduler.services.jobs.summary`): ``id``,
    ``name``, ``state``, ``owner``, ``where`` (latest placement, ``-`` before any),
    ``market``, ``price`` (its latest recorded USD/h, ``None`` before any),
    ``running`` (its current placement's instance started and bills), ``cost_usd``,
    ``on_demand_usd``, ``saved_usd`` and ``saved_pct`` (``None`` without an on-demand
    reference), ``per_1k`` (USD per 1,000 units on its offer, else what the units done cost
    per 1,000; ``None`` when unknown) and its ``unit``."""
    d = s["derived"]
    placed = _placed(s)
    row: dict[str, Any] = {"id": s["id"], "name": s["spec"]["name"], "state": s["state"],
                           "owner": s["spec"]["owner"], "where": "-", "market": None,
                           "price": None, "cost_usd": d["cost_usd"],
                           "on_demand_usd": d["on_demand_cost_usd"],
                           "saved_pct": d["savings_pct"], "saved_usd": None,
                           "per_1k": None, "unit": None, "cancel_requested":
                           s.get("cancel_requested", False), "running": False}
    if placed:
        offer = placed[-1]["offer"]
        costs = d.get("placement_costs") or []
        row.update(where=where(offer), market=offer["market"],
                   price=costs[-1]["price_usd_per_hour"] if costs else offer["price_usd_per_hour"],
                   running=bool(s["placement"] and s["placement"].get("started_at")
                                and not s["placement"].get("ended_at")))
    if d["on_demand_cost_usd"] is not None:
        row["saved_usd"] = d["on_demand_cost_usd"] - d["cost_usd"]
    work = d.get("work") or {}
    if work:
        per_1k = work.get("cost_per_1k_usd")
        row["per_1k"] = per_1k if per_1k is not None else work.get("cost_so_far_per_1k_usd")
        row["unit"] = work.get("unit")
    return row


def visible_jobs(store: Store, principal: Principal, limit: int = JOBS_MAX,
                 owner: str | None = None) -> list[Job]:
    """The newest ``limit`` jobs ``principal`` may see (of ``owner`` when given), newest
    first: :func:`scheduler.services.jobs.list_jobs`, as ``GET /v1/jobs`` lists them."""
    return [j for j in job_service.list_jobs(store, principal, limit, owner=owner)
            if principal.may_see(j.spec.owner)]


def matches(job: Job, state: str, owner: str, text: str) -> bool:
    """Whether ``job`` passes the table's filters (empty filters pass everything)."""
    if state == "active" and job.state.is_terminal():
        return False
    if state == "finished" and not job.state.is_terminal():
        return False
    if state not in ("", "active", "finished") and job.state.value != state:
        return False
    if owner and job.spec.owner != owner:
        return False
    text = text.lower()
    return not text or text in job.spec.name.lower() or text in job.id.lower()


def table_context(store: Store, principal: Principal, state: str, owner: str, q: str,
                  limit: int) -> dict[str, Any]:
    """What ``jobs.html`` shows: the filtered rows and the filters (normalised)."""
    state = state if state in STATE_FILTERS else ""
    owner = owner.strip() if principal.is_admin else ""
    q = q.strip()[:QUERY_MAX_CHARS]
    jobs = visible_jobs(store, principal, limit, owner or None)
    rows = [job_row(job_service.summary(j)) for j in jobs if matches(j, state, owner, q)]
    # Users, and owners no user record names (jobs submitted before users existed).
    owners = sorted({u.name for u in store.users.list()} | {j.spec.owner for j in jobs}) \
        if principal.is_admin else []
    return {"rows": rows, "states": STATE_FILTERS, "owners": owners,
            "filters": {"state": state, "owner": owner, "q": q, "limit": limit}}


def _ts(at: datetime) -> float:
    return at.timestamp()


def placements_chart(job: Job, now: datetime) -> dict[str, Any]:
    """The chart contract (``static/charts.js``) of the price each placement paid: one step
    series per placement, USD/h over unix seconds, from its start through each recorded price
    change to its end (or ``now``), null outside it."""
    spans = []
    for p in job.all_placements():
        if p.started_at is None:
            continue
        end = p.ended_at or now
        points = [(_ts(p.started_at), p.offer.price_usd_per_hour)]
        for change in p.price_changes:
            if change.at >= end:
                break
            points.append((max(_ts(change.at), _ts(p.started_at)), change.price_usd_per_hour))
        points.append((_ts(end), points[-1][1]))
        label = (f"#{p.attempt} {p.offer.provider}/{p.offer.zone} {p.offer.instance_type} "
                 f"{p.offer.market.value}")
        spans.append((label, dict(points)))
    xs = sorted({x for _, pts in spans for x in pts})
    series = []
    for label, pts in spans:
        first, last = min(pts), max(pts)
        values: list[float | None] = []
        held = None
        for x in xs:
            held = pts.get(x, held) if first <= x <= last else None
            values.append(held)
        series.append({"label": label, "values": values, "step": True})
    return {"x": xs, "y_label": "USD/h", "series": series,
            "empty": "no placement has started yet"}


def gpu_chart(store: Store, job: Job) -> dict[str, Any]:
    """The chart contract of the GPU use its agents reported: the newest report of each
    attempt that carried a GPU sample (utilisation % and memory used %)."""
    reports = store.agents.last_reports([(job.id, p.attempt) for p in job.all_placements()])
    samples = sorted((r.gpu.at, r.gpu) for r in reports.values() if r is not None and r.gpu)
    return {"x": [_ts(at) for at, _ in samples], "y_label": "%", "series": [
        {"label": "GPU utilisation %", "values": [g.util_pct for _, g in samples], "step": False},
        {"label": "GPU memory used %", "values": [
            round(100.0 * g.memory_used_gib / g.memory_total_gib, 2) for _, g in samples],
         "step": False}], "empty": "no GPU utilisation reported"}


def moves(job: Job) -> list[dict[str, Any]]:
    """Placements that ended and moved the job on (or stopped it), each with its reason:
    the latest timeline event at or before its end that is not a ``running`` one."""
    out = []
    for p in job.placements:
        if p.end_reason is None or p.end_reason.value not in MOVE_ENDS:
            continue
        end = p.ended_at or p.decided_at
        why = [e for e in job.events if e.at <= end and e.state is not JobState.RUNNING]
        out.append({"attempt": p.attempt, "where": f"{p.offer.provider}/{p.offer.zone} "
                    f"{p.offer.instance_type}", "at": end,
                    "end": MOVE_ENDS[p.end_reason.value],
                    "reason": why[-1].message if why else "-"})
    return out


def checkpoints(objects: ObjectStore, job: Job) -> tuple[list[dict[str, Any]], str | None]:
    """The job's committed checkpoints (newest first, at most :data:`CHECKPOINTS_SHOWN`), or
    why they cannot be read."""
    try:
        manifests = list_checkpoints(objects, job.id)
    except CheckpointStoreError as exc:
        return [], f"checkpoint store unreadable: {exc}"
    return [{"id": m.checkpoint_id, "attempt": m.attempt, "at": m.created_at,
             "bytes": m.total_bytes, "stored_bytes": m.stored_bytes, "final": m.final}
            for m in manifests[:CHECKPOINTS_SHOWN]], None


def events_context(store: Store, principal: Principal, job_id: str | None = None,
                   limit: int = EVENTS_SHOWN) -> dict[str, Any]:
    """The stream's newest events ``principal`` may see (of ``job_id`` when given; newest
    first, at most ``limit``), as ``GET /v1/events`` answers them, and the stream cursor the
    page's script follows on from (``GET /v1/events?after=``)."""
    owner = None if principal.is_admin else principal.user
    page = EventStream(store.redis).read(None, limit, job_id, owner)
    events = [e for e in reversed(page.events)
              if principal.is_admin or e.get("owner") == principal.user]
    return {"events": events, "cursor": page.next}


def job_context(store: Store, objects: ObjectStore, principal: Principal,
                job: Job) -> dict[str, Any]:
    """What ``job.html`` shows of ``job``."""
    now = utcnow()
    s = job_service.view(store, job)
    saved, checkpoint_error = checkpoints(objects, job)
    placed = []
    for p, billed in zip(_placed(s), s["derived"]["placement_costs"], strict=False):
        nodes = billed.get("node_count", 1)
        placed.append({**p, **billed,
                       "where": where(p["offer"]) + (f" ×{nodes}" if nodes > 1 else "")})
    return {"job": s, "row": job_row(s), "placements": placed, "moves": moves(job),
            "checkpoints": saved, "checkpoint_error": checkpoint_error,
            "logs": store.jobs.logs(job.id, -LOG_TAIL_LINES),
            "chart_placements": placements_chart(job, now), "chart_gpu": gpu_chart(store, job),
            "may_cancel": not job.state.is_terminal() and not job.cancel_requested,
            "time_scale": max((p.time_scale for p in job.all_placements()), default=1.0),
            **events_context(store, principal, job.id)}


def router(store: Store, objects: ObjectStore) -> APIRouter:
    """The Jobs pages over ``store`` and ``objects`` (checkpoint manifests)."""
    pages = APIRouter()

    def visible(principal: Principal, job_id: str) -> Job | None:
        try:
            job = job_service.get(store, job_id, principal)
        except job_service.JobNotFound:
            return None
        return job if principal.may_see(job.spec.owner) else None

    def missing(request: Request, job_id: str) -> HTMLResponse:
        return render(request, "_jobs_missing.html", status_code=404, title="No such job",
                      job_id=job_id)

    @pages.get("/ui/jobs", response_class=HTMLResponse)
    def jobs_table(request: Request, principal: Principal = Depends(page_user),
                   state: str = "", owner: str = "", q: str = "",
                   limit: int = Query(JOBS_DEFAULT, ge=1, le=JOBS_MAX)) -> HTMLResponse:
        return render(request, "jobs.html", title="Jobs",
                      **table_context(store, principal, state, owner, q, limit))

    @pages.get("/ui/jobs/{job_id}", response_class=HTMLResponse)
    def job_page(request: Request, job_id: str,
                 principal: Principal = Depends(page_user)) -> HTMLResponse:
        job = visible(principal, job_id)
        if job is None:
            return missing(request, job_id)
        return render(request, "job.html", title=job.id,
                      **job_context(store, objects, principal, job))

    @pages.post("/ui/jobs/{job_id}/cancel")
    def cancel(request: Request, job_id: str, principal: Principal = Depends(page_user)):
        if visible(principal, job_id) is None:
            return missing(request, job_id)
        try:
            job_service.cancel(store, job_id, principal)
        except job_service.JobNotFound:
            return missing(request, job_id)
        return RedirectResponse(f"/ui/jobs/{quote(job_id, safe='')}", status_code=303)

    return pages
