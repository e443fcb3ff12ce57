"""HTTP routes for price history, plans and cost reports (user token required).

- ``GET /v1/history``: statistics per series or group (:func:`scheduler.services.history.query`).
- ``GET /v1/history/points``: one series' step function, for plots.
- ``POST /v1/plans``: a job spec's cost and duration estimate (:mod:`scheduler.services.plans`):
  ``{"spec", "compute_hours"?, "lookback"?, "work"?: {"unit": "samples" | "tokens" | "steps",
  "amount", "epochs"?}}`` (``work``: plan for ``amount × epochs`` units instead of the spec's
  work; not with ``compute_hours``, and only for a spec that declares a throughput: else 422
  naming ``work``; in the spec's ``work.unit`` when it declares one: else 422 naming
  ``work.unit``; ``like_job``: plan with the throughput that job measured, 404 when unknown,
  422 when it measured none or counts another unit).
- ``GET /v1/spend?since=TIME``: what was billed from ``since`` to now, whenever the jobs were
  created (:func:`scheduler.services.costs.billed_since`): the caller's jobs, or an admin's
  every job (``owner=`` narrows it).
- ``GET /v1/cost-report``: recorded costs of a job or of the jobs since a time
  (:mod:`scheduler.services.costs`), by who is calling: a user's own jobs only (another
  user's ``job`` answers 404 as an unknown one), an admin's every job.

Any authenticated user may call every route here; ``like_job`` of a plan must be a job the
caller may see (404 otherwise).

``GET /v1/offers?at=TIME`` (the market as it was, from history) is served by the offers
route of :mod:`scheduler.api.offers` through :func:`scheduler.services.history.offers_at`.
Every history route takes ``source``: ``auto`` (default: real history when it covers the
question, else the replayed markets'), ``real``, ``replay``, ``replay:<market name>`` or
``all`` (:mod:`scheduler.store.history_sources`); every answer says the source of each row.
Bad parameters answer 422 with ``{"detail": "<field>: <problem and what is allowed>"}``; an
invalid job spec as ``POST /v1/jobs`` does.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from core.models.work import WORK_MAX_UNITS, WorkUnit
from scheduler.api.auth import current_user, require_user
from scheduler.checkpoints.objectstore import ObjectStore
from scheduler.services import costs as cost_service
from scheduler.services import history as history_service
from scheduler.services import jobs as job_service
from scheduler.services import plans as plan_service
from scheduler.services.fleet import owned_provider_names
from scheduler.store import Store
from scheduler.store.users import Principal


class PlanWork(BaseModel):
    """The work to plan for: ``amount`` units (e.g. the dataset's samples) × ``epochs``."""

    model_config = ConfigDict(extra="forbid")

    unit: WorkUnit
    amount: float = Field(gt=0, le=WORK_MAX_UNITS)
    epochs: float = Field(default=1.0, gt=0, le=1_000_000)


class PlanRequest(BaseModel):
    spec: dict[str, Any]
    compute_hours: float | None = Field(default=None, gt=0, le=1_000_000)
    lookback: str = "30d"
    work: PlanWork | None = Field(default=None, description="plan for this work instead of "
                                                            "the spec's (not with compute_hours)")
    like_job: str | None = Field(default=None, min_length=1, max_length=200,
                                 description="plan with the throughput this job measured")


def query_error(exc: history_service.QueryError) -> HTTPException:
    return HTTPException(422, str(exc))


def router(store: Store, objects: ObjectStore | None = None) -> APIRouter:
    """The routes over ``store`` (and ``objects``, the checkpoint store, for cost reports)."""
    api = APIRouter(dependencies=[Depends(require_user)])

    @api.get("/v1/history")
    def history(gpu: str | None = None, provider: str | None = None, region: str | None = None,
                zone: str | None = None, instance_type: str | None = None,
                market: str | None = None, since: str = "30d", until: str | None = None,
                by: str = "series", per_gpu: bool = False,
                source: str = "auto") -> dict[str, Any]:
        try:
            return history_service.query(store, since=since, until=until, by=by, per_gpu=per_gpu,
                                         gpu=gpu, provider=provider, region=region, zone=zone,
                                         instance_type=instance_type, market=market,
                                         source=source)
        except history_service.QueryError as exc:
            raise query_error(exc) from None

    @api.get("/v1/history/points")
    def history_points(series: str, since: str = "30d", until: str | None = None,
                       source: str = "auto") -> dict[str, Any]:
        try:
            return history_service.points(store, series, since, until, source=source)
        except history_service.QueryError as exc:
            raise query_error(exc) from None

    @api.post("/v1/plans")
    def make_plan(body: PlanRequest, request: Request,
                  who: Principal = Depends(current_user)) -> dict[str, Any]:
        if body.like_job is not None:
            job_service.get(store, body.like_job, who)  # 404 for another user's job
        # The daemon's adapters (set by scheduler.daemon): which offers a placement may use.
        providers = getattr(request.app.state, "providers", None)
        work = None if body.work is None else plan_service.WorkOption(
            body.work.unit, body.work.amount, body.work.epochs)
        try:
            return plan_service.plan(store, body.spec, body.compute_hours, body.lookback,
                                     providers=providers, work=work, like_job=body.like_job)
        except (history_service.QueryError, plan_service.PlanError) as exc:
            raise HTTPException(422, str(exc)) from None

    @api.get("/v1/spend")
    def spend(since: str = Query(..., description="a time (ISO 8601) or an age like 1d"),
              owner: str | None = Query(None, description="an admin's filter"),
              who: Principal = Depends(current_user)) -> dict[str, Any]:
        try:
            when = history_service.parse_when(since, "since")
        except history_service.QueryError as exc:
            raise query_error(exc) from None
        if when is None:
            raise HTTPException(422, "since: a time (ISO 8601) or an age like 1d is needed")
        return cost_service.billed_since(store, when,
                                         owner=owner if who.is_admin else who.user)

    @api.get("/v1/cost-report")
    def cost_report(request: Request, job: str | None = None, since: str | None = None,
                    limit: int = Query(1000, ge=1, le=10_000),
                    storage_usd_per_gb_month: float = Query(cost_service.STORAGE_USD_PER_GB_MONTH, ge=0),
                    transfer_usd_per_gb: float = Query(cost_service.TRANSFER_USD_PER_GB, ge=0),
                    who: Principal = Depends(current_user)) -> dict[str, Any]:
        try:
            when = history_service.parse_when(since, "since")
        except history_service.QueryError as exc:
            raise query_error(exc) from None
        # Placements on the daemon's kind: fleet providers ran on owned machines.
        owned = owned_provider_names(getattr(request.app.state, "providers", None))
        return cost_service.report(store, objects, job_id=job, since=when, limit=limit,
                                   storage_usd_per_gb_month=storage_usd_per_gb_month,
                                   transfer_usd_per_gb=transfer_usd_per_gb,
                                   owned_providers=owned,
                                   owner=None if who.is_admin else who.user)

    return api
