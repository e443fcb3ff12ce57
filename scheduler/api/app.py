"""The daemon's HTTP API (FastAPI), for the CLI and the node agents.

Users authenticate with the daemon's API token; agents with a token scoped to one attempt of
one job (``scheduler.store.agents.AgentTokens``), which cannot read or change anything else.
Request bodies are size-limited before they are parsed.
"""

from __future__ import annotations

import hmac
import logging
from typing import Any

import redis
from fastapi import Depends, FastAPI, HTTPException, Query, Request, status
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field, ValidationError
from starlette.concurrency import run_in_threadpool

from scheduler.api import errors as api_errors
from scheduler.api import events as events_api
from scheduler.api import history as history_api
from scheduler.api import metrics as metrics_api
from scheduler.api.auth import bearer, require_user
from scheduler.api import limits as body_limits
from scheduler.checkpoints.objectstore import (
    CheckpointStoreError,
    ObjectNotFound,
    ObjectStore,
)
from core.models import describe_validation_error, utcnow
from core.models.errors import brief, json_safe
from core.models.agents import AgentAction, AgentCommand, AgentReport
from scheduler.services import history as history_service
from scheduler.services import jobs as job_service
from scheduler.services import offers as offer_service
from scheduler.store import Store
from scheduler.store.agents import AgentTokens

# Body limits per route: scheduler.api.limits (a submission carries the job's code bundle,
# agent reports at most 500 log lines, other bodies a spec at most).
# Highest log index a reader may start from: far above any job's (JOB_LOG_MAX_LINES kept) and
# within Redis's 64-bit range, so no ``start`` reaches Redis as an error.
MAX_LOG_START = 10**9

log = logging.getLogger(__name__)

# Redis refusing a command (a wrong argument, a wrong type) is a bug in this code: answered 500
# and logged with its traceback. Connection failures, timeouts, a loading or read-only (failing
# over) or full server are outages: 503 with Retry-After.
_REDIS_BUGS = (redis.exceptions.ResponseError, redis.exceptions.DataError)
_REDIS_BUSY = (redis.exceptions.ReadOnlyError, redis.exceptions.OutOfMemoryError,
               redis.exceptions.TryAgainError, redis.exceptions.MasterDownError)


class SubmitRequest(BaseModel):
    spec: dict[str, Any]
    bundle_b64: str | None = Field(default=None, description="gzip tar of the job's workdir")


def create_app(store: Store, objects: ObjectStore, tokens: AgentTokens, api_token: str) -> FastAPI:
    """Build the app. ``objects`` is the checkpoint/bundle store; ``api_token`` the user token."""
    app = FastAPI(title="gpu-arbiter", version="0.1.0", responses=api_errors.ERROR_RESPONSES)
    app.state.api_token = api_token
    api_errors.install(app)

    def authorized(path: str, token: str | None) -> bool:
        if path == "/v1/health" or path.startswith(("/docs", "/openapi")):
            return True
        if token is None:
            return False
        if path.startswith("/v1/agent/"):
            return tokens.scope(token) is not None
        return hmac.compare_digest(token.encode("utf-8", "replace"), api_token.encode())

    app.add_middleware(body_limits.BodyLimitMiddleware, authorized=authorized,
                       limit_for=body_limits.body_limit, json_limit_for=body_limits.json_limit)

    @app.exception_handler(redis.RedisError)
    async def redis_down(request: Request, exc: redis.RedisError):
        if isinstance(exc, _REDIS_BUGS) and not isinstance(exc, _REDIS_BUSY):
            # A command Redis refused (e.g. a value out of its range) is our bug, not an
            # outage: a 503 would tell clients to retry something that never succeeds.
            log.error("Redis refused a command for %s %s", request.method, request.url.path,
                      exc_info=exc)
            return JSONResponse({"detail": "internal error"}, status_code=500)
        return JSONResponse({"detail": "the state store (Redis) is unavailable; retry shortly"},
                            status_code=503, headers={"Retry-After": "2"})

    @app.exception_handler(CheckpointStoreError)
    async def objects_down(_: Request, exc: CheckpointStoreError):
        # The message names the store and the operation, never its credentials.
        if isinstance(exc, ObjectNotFound):
            return JSONResponse({"detail": str(exc)}, status_code=404)
        return JSONResponse({"detail": f"the checkpoint store is unavailable: {exc}"},
                            status_code=503, headers={"Retry-After": "5"})

    @app.exception_handler(job_service.SpecError)
    async def spec_error(_: Request, exc: job_service.SpecError):
        # A refused value is echoed cut short: a 16 MiB command does not come back whole.
        problems = [{**p, "value": json_safe(brief(p.get("value")))} for p in exc.problems]
        return JSONResponse({"detail": "invalid job spec", "problems": problems},
                            status_code=422)

    @app.exception_handler(job_service.BudgetExhausted)
    async def budget_exhausted(_: Request, exc: job_service.BudgetExhausted):
        return JSONResponse({"detail": str(exc)}, status_code=409)

    @app.exception_handler(job_service.JobNotFound)
    async def not_found(_: Request, exc: job_service.JobNotFound):
        return JSONResponse({"detail": f"no job {exc.args[0]!r}"}, status_code=404)

    @app.get("/v1/health")
    def health() -> dict[str, Any]:
        store.redis.ping()
        return {"ok": True, "at": utcnow().isoformat()}

    user = [Depends(require_user)]

    @app.post("/v1/jobs", status_code=201, dependencies=user)
    def submit(body: SubmitRequest) -> dict[str, Any]:
        job = job_service.submit(store, objects, body.spec, body.bundle_b64)
        return job_service.summary(job)

    @app.get("/v1/jobs", dependencies=user)
    def list_jobs(limit: int = Query(100, ge=1, le=1000)) -> list[dict[str, Any]]:
        return [job_service.summary(j) for j in store.jobs.list(limit)]

    @app.get("/v1/jobs/{job_id}", dependencies=user)
    def get_job(job_id: str) -> dict[str, Any]:
        return job_service.summary(job_service.get(store, job_id))

    @app.post("/v1/jobs/{job_id}/cancel", dependencies=user)
    def cancel_job(job_id: str) -> dict[str, Any]:
        return job_service.summary(job_service.cancel(store, job_id))

    @app.get("/v1/jobs/{job_id}/logs", dependencies=user)
    def job_logs(job_id: str, start: int = Query(0, ge=0, le=MAX_LOG_START)) -> dict[str, Any]:
        job_service.get(store, job_id)
        lines = store.jobs.logs(job_id, start)
        return {"start": start, "next": start + len(lines), "lines": lines}

    @app.get("/v1/offers", dependencies=user)
    def list_offers(gpu: str | None = None, provider: str | None = None,
                    market: str | None = None, min_vram_gib: float = 0,
                    at: str | None = None, source: str = "auto") -> list[dict[str, Any]]:
        if at:  # the market as it was then, from price history (source: real or replayed)
            try:
                return history_service.offers_at(store, at, gpu=gpu, provider=provider,
                                                 market=market, min_vram_gib=min_vram_gib,
                                                 source=source)
            except history_service.QueryError as exc:
                raise HTTPException(422, str(exc)) from None
        return offer_service.table(store, gpu=gpu, provider=provider, market=market,
                                   min_vram_gib=min_vram_gib)

    app.include_router(history_api.router(store, objects))
    app.include_router(events_api.router(store))
    app.include_router(metrics_api.router(store))

    @app.post("/v1/agent/{instance_id}/report")
    async def agent_report(instance_id: str, request: Request) -> dict[str, Any]:
        scope = tokens.scope(bearer(request))  # checked before the body is read
        if scope is None:
            raise HTTPException(status.HTTP_403_FORBIDDEN, "not a valid agent token")
        try:
            report = AgentReport.model_validate_json(await request.body())
        except ValidationError as exc:
            problems = [{**p, "value": None} for p in describe_validation_error(exc)]
            raise HTTPException(422, problems) from None
        if (report.job_id, report.attempt) != scope:
            raise HTTPException(status.HTTP_403_FORBIDDEN,
                                "token not valid for this job attempt")
        # Redis calls block: run them on the thread pool, not on the event loop every other
        # request (hundreds of heartbeats a second) is waiting on.
        return await run_in_threadpool(_record_report, store, report)

    return app


def _record_report(store: Store, report: AgentReport) -> dict[str, Any]:
    job = store.jobs.get(report.job_id)
    if job is None:
        raise HTTPException(404, "no such job")
    command = _command_for(job, report.attempt)
    # Nobody reads a finished job's or a replaced attempt's reports, and its agent is being
    # told to stop: writing them would only let a stale agent grow the job's logs. A cancelled
    # job's current attempt is still written (its final checkpoint report matters).
    if _attempt_is_live(job, report.attempt):
        store.agents.save_report(report.model_copy(update={"received_at": utcnow()}))
        store.agents.append_output(report)
    return command.model_dump(mode="json")


def _attempt_is_live(job, attempt: int) -> bool:
    """Whether ``attempt`` is the job's current placement and the job has not finished."""
    current = job.placement.attempt if job.placement else None
    return not job.state.is_terminal() and current == attempt


def _command_for(job, attempt: int) -> AgentCommand:
    """Stop an agent whose job was cancelled, finished, or moved on to another attempt."""
    if job.cancel_requested:
        return AgentCommand(action=AgentAction.STOP, reason="job cancelled")
    if not _attempt_is_live(job, attempt):
        return AgentCommand(action=AgentAction.STOP, reason="attempt no longer current")
    stop = job.stop_request  # a price-driven move or a budget stop: checkpoint, then stop
    if stop is not None and stop.attempt == attempt:
        return AgentCommand(action=AgentAction.STOP, reason=f"{stop.kind.value}: {stop.reason}")
    return AgentCommand()
