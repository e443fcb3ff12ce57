"""Bearer-token checks for the API: one token for users (the CLI), per-attempt tokens for agents."""

from __future__ import annotations

import hmac
from collections.abc import Callable

from fastapi import HTTPException, Request, status

from scheduler.store.agents import AgentTokens


def bearer(request: Request) -> str:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "missing bearer token",
                            headers={"WWW-Authenticate": "Bearer"})
    return token.strip()


def require_user(request: Request) -> None:
    """FastAPI dependency: the request carries the daemon's API token."""
    expected: str = request.app.state.api_token
    given = bearer(request).encode("utf-8", "replace")
    if not hmac.compare_digest(given, expected.encode()):
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "invalid token",
                            headers={"WWW-Authenticate": "Bearer"})


def authorizer(tokens: AgentTokens, api_token: str) -> Callable[[str, str | None], bool]:
    """``authorized(path, token)`` for :class:`scheduler.api.limits.BodyLimitMiddleware`: the
    health check and the API docs need no token, ``/v1/agent/...`` an agent token of
    ``tokens`` (its job and attempt are checked by the route), every other path
    ``api_token``."""

    def authorized(path: str, token: str | None) -> bool:
        if path == "/v1/health" or path.startswith(("/docs", "/openapi")):
            return True
        if token is None:
            return False
        if path.startswith("/v1/agent/"):
            return tokens.scope(token) is not None
        return hmac.compare_digest(token.encode("utf-8", "replace"), api_token.encode())

    return authorized
