"""Who a request is from, and what they may call.

Credentials:

- **User tokens** (:class:`scheduler.store.users.UserStore`), sent as ``Authorization: Bearer
  <token>`` by the CLI, or kept by the dashboard in the HttpOnly cookie :data:`SESSION_COOKIE`
  after a login. Each request looks its token up in Redis: a revoked token is refused at once on
  every replica.
- **Agent tokens** (:class:`scheduler.store.agents.AgentTokens`), scoped to one attempt of one
  job, valid on ``/v1/agent/...`` only (the route checks the job and attempt).

:class:`Authenticator` runs in :class:`scheduler.api.limits.BodyLimitMiddleware` before any
body is read: it answers 401 for a missing or invalid credential and leaves the
:class:`~scheduler.store.users.Principal` in ``request.state.principal`` for the routes, whose
dependencies :func:`current_user` and :func:`require_admin` read it (403 for a user on an
admin route). A request authenticated by the cookie that changes state (any method but GET,
HEAD, OPTIONS) must also carry the session's CSRF token (:func:`csrf_token`), as the
``X-CSRF-Token`` header or as the ``csrf_token`` field of a form body; the login form, which
has no session yet, is refused instead when the browser says it was posted from another site
(``Sec-Fetch-Site``, ``Origin``).

Public paths: ``/v1/health``, the API docs, the dashboard's login page and static assets. The
rest of ``/ui/`` is let through without a credential (``principal`` is ``None``) so the
dashboard can redirect to its login page instead of answering 401.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import Literal
from urllib.parse import parse_qs

from fastapi import HTTPException, Request, status

from scheduler.store.agents import AgentTokens
from scheduler.store.users import Principal, UserStore

SESSION_COOKIE = "ga_session"
CSRF_HEADER = "x-csrf-token"
CSRF_FIELD = "csrf_token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
PUBLIC_PATHS = frozenset({"/v1/health", "/openapi.json", "/ui/login"})
PUBLIC_PREFIXES = ("/docs", "/redoc", "/ui/static/")
DASHBOARD_PREFIX = "/ui"
AGENT_PREFIX = "/v1/agent/"

Via = Literal["bearer", "cookie", "none"]


def csrf_token(session_token: str) -> str:
    """The CSRF token of a dashboard session: an HMAC keyed by the session's own token, so
    every replica derives the same value and no page of another origin can (the cookie is
    HttpOnly and SameSite=Strict)."""
    return hmac.new(session_token.encode("utf-8", "replace"), b"gpu-arbiter csrf",
                    hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class Credential:
    token: str | None
    via: Via


def credential_of(headers: dict[bytes, bytes]) -> Credential:
    """The request's credential: the bearer token if any, else the session cookie."""
    header = headers.get(b"authorization")
    if header:
        scheme, _, token = header.decode("latin-1").partition(" ")
        token = token.strip()
        return Credential(token or None if scheme.lower() == "bearer" else None, "bearer")
    cookie = headers.get(b"cookie")
    if cookie:
        for part in cookie.decode("latin-1").split(";"):
            name, _, value = part.strip().partition("=")
            if name == SESSION_COOKIE and value:
                return Credential(value, "cookie")
    return Credential(None, "none")


@dataclass(frozen=True)
class Decision:
    """What the middleware does with a request: ``refuse`` (status and detail) or let it
    through with ``principal`` (a user, or ``None`` for public and agent paths)."""

    principal: Principal | None = None
    refuse: int | None = None
    detail: str = ""
    via: Via = "none"


def _public(path: str) -> bool:
    return path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIXES)


@dataclass
class Authenticator:
    """Decides, per request, who is calling and whether they may call the path at all."""

    users: UserStore
    agent_tokens: AgentTokens

    def decide(self, method: str, path: str, headers: dict[bytes, bytes]) -> Decision:
        """Blocking (one or two Redis reads): call it off the event loop."""
        cred = credential_of(headers)
        if path.startswith(AGENT_PREFIX):
            if cred.via == "bearer" and cred.token and self.agent_tokens.scope(cred.token):
                return Decision(via="bearer")
            return Decision(refuse=401, detail="missing or invalid agent token", via=cred.via)
        principal = self.users.resolve(cred.token) if cred.token else None
        if _public(path) or (principal is None and path.startswith(DASHBOARD_PREFIX)
                             and cred.via != "bearer"):
            return Decision(principal=principal, via=cred.via if principal else "none")
        if principal is None:
            return Decision(refuse=401, detail="missing, invalid or revoked token", via=cred.via)
        return Decision(principal=principal, via=cred.via)

    @staticmethod
    def csrf_ok(method: str, path: str, headers: dict[bytes, bytes], body: bytes) -> bool:
        """Whether a cookie-authenticated request carries its session's CSRF token (always
        true for safe methods and for requests that are not cookie-authenticated)."""
        cred = credential_of(headers)
        if method in SAFE_METHODS:
            return True
        if path == "/ui/login":
            return not _cross_site(headers)
        if cred.via != "cookie":
            return True
        expected = csrf_token(cred.token or "")
        given = headers.get(CSRF_HEADER.encode(), b"").decode("latin-1")
        ctype = headers.get(b"content-type", b"").decode("latin-1").split(";")[0].strip()
        if not given and ctype == "application/x-www-form-urlencoded":
            values = parse_qs(body.decode("utf-8", "replace"), max_num_fields=100).get(CSRF_FIELD)
            given = values[0] if values else ""
        return hmac.compare_digest(given.encode("utf-8", "replace"), expected.encode())


def bearer(request: Request) -> str:
    """The request's bearer token (401 when there is none)."""
    token = credential_of({b"authorization": request.headers.get("authorization", "").encode(
        "latin-1", "replace")}).token
    if not token:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "missing bearer token",
                            headers={"WWW-Authenticate": "Bearer"})
    return token


def _cross_site(headers: dict[bytes, bytes]) -> bool:
    """Whether the browser says the request comes from another site: ``Sec-Fetch-Site``, or
    else an ``Origin`` that is not this host. A login posted from another site would swap
    the victim's session for the attacker's (login CSRF); the login form has no session yet
    to hold a CSRF token, so its origin is checked instead."""
    fetch_site = headers.get(b"sec-fetch-site", b"").decode("latin-1").lower()
    if fetch_site:
        # The browser's own word wins: Chromium sends ``Origin: null`` for a same-origin form
        # post from a page whose referrer policy hides the origin.
        return fetch_site in ("cross-site", "same-site")
    origin = headers.get(b"origin", b"").decode("latin-1")
    if not origin or origin == "null":
        return False
    host = headers.get(b"host", b"").decode("latin-1")
    return origin.split("://", 1)[-1] != host


def _principal(request: Request) -> Principal:
    principal = getattr(request.state, "principal", None)
    if principal is None:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "missing, invalid or revoked token",
                            headers={"WWW-Authenticate": "Bearer"})
    return principal


# The dependencies are coroutines only so that FastAPI runs them on the event loop: as plain
# functions each would take a worker thread, the threads that sync routes (the health check
# among them) wait for while many slow listings are being answered.
async def current_user(request: Request) -> Principal:
    """FastAPI dependency: the authenticated user (401 when there is none)."""
    return _principal(request)


async def require_user(request: Request) -> None:
    """FastAPI dependency for routes any authenticated user may call."""
    _principal(request)


async def require_admin(request: Request) -> Principal:
    """FastAPI dependency: the authenticated user, who must be an admin (403 otherwise)."""
    principal = _principal(request)
    if not principal.is_admin:
        raise HTTPException(status.HTTP_403_FORBIDDEN, "this needs an admin token")
    return principal
