"""Bearer-token checks for the API: one token for users (the CLI), per-attempt tokens for agents."""

from __future__ import annotations

import hmac

from fastapi import HTTPException, Request, status


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
