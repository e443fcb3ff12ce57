"""How the API answers errors, as its OpenAPI spec states them.

Every error body is ``{"detail": <message or list of problems>, "problems"?: [...]}``: a
string from our own checks (naming the field), a list from FastAPI's request validation,
``problems`` from job-spec validation. :data:`ERROR_RESPONSES` documents the codes every
route may answer; :func:`install` makes a 405 list every method the path supports (Starlette
lists only the first route's), so the ``Allow`` header matches the spec, makes a request
validation error echo a ``NaN``/``Infinity`` input as text instead of failing to write it,
and answers the service's errors: an outage of Redis or of the checkpoint store 503 with
``Retry-After`` (a command Redis refused 500: our bug), a refused job spec 422 with its
problems, a spent budget 409, an unknown job or object 404, a refused user or token
operation (:class:`~scheduler.store.users.UserError`) its ``status`` with a detail naming the
field.
"""

from __future__ import annotations

import logging
from typing import Any

import redis
from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Route, compile_path

from core.models.errors import brief, json_safe
from scheduler.budgets import BudgetExhausted
from scheduler.checkpoints.objectstore import CheckpointStoreError, ObjectNotFound
from scheduler.services.jobs import JobNotFound, SpecError
from scheduler.store.users import UserError

log = logging.getLogger(__name__)

# Redis refusing a command (a wrong argument, a wrong type) is a bug in this code: answered 500
# and logged with its traceback. Connection failures, timeouts, a loading or read-only (failing
# over) or full server are outages: 503 with Retry-After.
_REDIS_BUGS = (redis.exceptions.ResponseError, redis.exceptions.DataError)
_REDIS_BUSY = (redis.exceptions.ReadOnlyError, redis.exceptions.OutOfMemoryError,
               redis.exceptions.TryAgainError, redis.exceptions.MasterDownError)


class ErrorBody(BaseModel):
    detail: str | list[Any]
    problems: list[dict[str, Any]] | None = None


def _error(description: str) -> dict[str, Any]:
    return {"model": ErrorBody, "description": description}


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: _error("the body could not be read (not UTF-8 or not JSON)"),
    401: _error("missing, invalid or revoked token"),
    403: _error("an admin route called with a user's token, another user's token asked for, "
                "or an agent token used outside its job attempt"),
    404: _error("no such job, object, user or token (another user's job or token is answered "
                "as an unknown one)"),
    409: _error("refused: the owner's budget is already spent, or the user already exists"),
    413: _error("request body over the route's limit (scheduler.api.limits)"),
    414: _error("query string over 8 KiB"),
    422: _error("invalid input; the message names the field"),
    503: _error("the state store (Redis) is unavailable, or too many large bodies are being "
                "read at once; retry shortly"),
}


def install(app: FastAPI) -> None:
    """Register the 405 handler, the request-validation handler and the service errors'
    handlers on ``app`` (other HTTP errors keep FastAPI's handler)."""
    _install_service_errors(app)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_: Request, exc: RequestValidationError):
        # FastAPI's own handler fails (500) when the bad input is a JSON NaN or Infinity; the
        # input is echoed cut short (a 90 MiB string sent as ``spec`` must not come back).
        errors = [{**e, "input": brief(e["input"])} if "input" in e else e for e in exc.errors()]
        return JSONResponse({"detail": json_safe(jsonable_encoder(errors))}, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        if exc.status_code != 405:
            return await http_exception_handler(request, exc)
        allowed = _methods_of(request.app, request.url.path)
        exc.headers = {**(exc.headers or {}), "Allow": ", ".join(allowed)}
        return await http_exception_handler(request, exc)


def _methods_of(app: FastAPI, path: str) -> list[str]:
    """The methods of the paths matching ``path``, sorted: those the OpenAPI spec of ``app``
    lists (the routes of included routers, which ``app.routes`` does not list one by one) and
    those of the app's own routes (the docs, outside the spec)."""
    specified = {method.upper() for template, operations in app.openapi()["paths"].items()
                 if compile_path(template)[0].match(path) for method in operations}
    own = {method for route in app.routes if isinstance(route, Route)
           and route.path_regex.match(path) for method in (route.methods or ())}
    return sorted(specified | own)


def _install_service_errors(app: FastAPI) -> None:
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

    @app.exception_handler(SpecError)
    async def spec_error(_: Request, exc: SpecError):
        # A refused value is echoed cut short: a 16 MiB command does not come back whole.
        problems = [{**p, "value": json_safe(brief(p.get("value")))} for p in exc.problems]
        return JSONResponse({"detail": "invalid job spec", "problems": problems},
                            status_code=422)

    @app.exception_handler(BudgetExhausted)
    async def budget_exhausted(_: Request, exc: BudgetExhausted):
        return JSONResponse({"detail": str(exc)}, status_code=409)

    @app.exception_handler(UserError)
    async def user_error(_: Request, exc: UserError):
        return JSONResponse({"detail": str(exc)}, status_code=exc.status)

    @app.exception_handler(JobNotFound)
    async def not_found(_: Request, exc: JobNotFound):
        return JSONResponse({"detail": f"no job {exc.args[0]!r}"}, status_code=404)
