"""How the API answers errors, as its OpenAPI spec states them.

Every error body is ``{"detail": <message or list of problems>, "problems"?: [...]}``: a
string from our own checks (naming the field), a list from FastAPI's request validation,
``problems`` from job-spec validation. :data:`ERROR_RESPONSES` documents the codes every
route may answer; :func:`install` makes a 405 list every method the path supports (Starlette
lists only the first route's), so the ``Allow`` header matches the spec, and makes a request
validation error echo a ``NaN``/``Infinity`` input as text instead of failing to write it.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Route

from core.models.errors import brief, json_safe


class ErrorBody(BaseModel):
    detail: str | list[Any]
    problems: list[dict[str, Any]] | None = None


def _error(description: str) -> dict[str, Any]:
    return {"model": ErrorBody, "description": description}


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: _error("the body could not be read (not UTF-8 or not JSON)"),
    401: _error("missing or invalid bearer token"),
    403: _error("an agent token used outside its job attempt"),
    404: _error("no such job or object"),
    409: _error("refused: the owner's budget is already spent"),
    413: _error("request body over the route's limit (scheduler.api.limits)"),
    414: _error("query string over 8 KiB"),
    422: _error("invalid input; the message names the field"),
    503: _error("the state store (Redis) is unavailable, or too many large bodies are being "
                "read at once; retry shortly"),
}


def install(app: FastAPI) -> None:
    """Register the 405 handler and the request-validation handler on ``app`` (other HTTP
    errors keep FastAPI's handler)."""

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
        path = request.url.path
        allowed = sorted({method for route in request.app.routes
                          if isinstance(route, Route) and route.path_regex.match(path)
                          for method in (route.methods or ())})
        exc.headers = {**(exc.headers or {}), "Allow": ", ".join(allowed)}
        return await http_exception_handler(request, exc)
