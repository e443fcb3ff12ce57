"""Job routes (user token required): submit, list, read, cancel, and read a job's output.

Every route answers by who is calling (:mod:`scheduler.services.jobs`): a user sees, follows
and cancels only the jobs they own; an admin every job. Another user's job answers 404
``no job 'ID'`` exactly as an unknown id does.

- ``POST /v1/jobs`` (201): ``{"spec": {...}, "bundle_b64"?: "<gzip tar of the workdir>"}``;
  the job's owner is the caller. A spec ``owner`` naming someone else answers 422 naming
  ``owner`` unless the caller is an admin and the user exists (an admin's job without one is
  the admin's own). An invalid spec or bundle answers 422 with every problem, an owner over
  budget 409 (:func:`scheduler.services.jobs.submit`).
- ``GET /v1/jobs?limit=N&owner=NAME`` (1–1000), newest first: a user's own jobs, an admin's
  view of every job or of ``owner``'s (a user's ``owner`` naming another user gives ``[]``);
  ``GET /v1/jobs/{id}``; ``POST /v1/jobs/{id}/cancel`` (idempotent): each answers the job
  summary (:func:`scheduler.services.jobs.view`: with a gang's nodes, their states and last
  heartbeats in ``derived.gang``), 404 for an unknown job.
- ``GET /v1/jobs/{id}/logs?start=N``: ``{"start", "next", "lines"}``, the job's output lines
  from index ``start`` on, across all its placements.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, Field

from scheduler.api.auth import current_user, require_user
from scheduler.checkpoints.objectstore import ObjectStore
from scheduler.services import jobs as job_service
from scheduler.store import Store
from scheduler.store.users import Principal

# Highest log index a reader may start from: far above any job's (JOB_LOG_MAX_LINES kept) and
# within Redis's 64-bit range, so no ``start`` reaches Redis as an error.
MAX_LOG_START = 10**9


class SubmitRequest(BaseModel):
    spec: dict[str, Any]
    bundle_b64: str | None = Field(default=None, description="gzip tar of the job's workdir")


def router(store: Store, objects: ObjectStore) -> APIRouter:
    """The job routes over ``store`` and ``objects`` (where code bundles are kept)."""
    api = APIRouter(dependencies=[Depends(require_user)])

    @api.post("/v1/jobs", status_code=201)
    def submit(body: SubmitRequest, who: Principal = Depends(current_user)) -> dict[str, Any]:
        job = job_service.submit(store, objects, body.spec, body.bundle_b64, principal=who)
        return job_service.summary(job)

    @api.get("/v1/jobs")
    def list_jobs(limit: int = Query(100, ge=1, le=1000),
                  owner: str | None = Query(None, min_length=1, max_length=63,
                                            description="only this user's jobs"),
                  who: Principal = Depends(current_user)) -> list[dict[str, Any]]:
        return job_service.views(store, job_service.list_jobs(store, who, limit, owner=owner))

    @api.get("/v1/jobs/{job_id}")
    def get_job(job_id: str, who: Principal = Depends(current_user)) -> dict[str, Any]:
        return job_service.view(store, job_service.get(store, job_id, who))

    @api.post("/v1/jobs/{job_id}/cancel")
    def cancel_job(job_id: str, who: Principal = Depends(current_user)) -> dict[str, Any]:
        return job_service.view(store, job_service.cancel(store, job_id, who))

    @api.get("/v1/jobs/{job_id}/logs")
    def job_logs(job_id: str, start: int = Query(0, ge=0, le=MAX_LOG_START),
                 who: Principal = Depends(current_user)) -> dict[str, Any]:
        job_service.get(store, job_id, who)
        lines = store.jobs.logs(job_id, start)
        return {"start": start, "next": start + len(lines), "lines": lines}

    return api
