"""Logging in and out of the dashboard.

- ``GET /ui/login?next=/ui/...``: the form (one field, the API token).
- ``POST /ui/login`` (form fields ``token``, ``next``): a valid token is kept in the session
  cookie :data:`~scheduler.api.auth.SESSION_COOKIE` (HttpOnly, SameSite=Strict, Path=/,
  Secure over https, :data:`SESSION_MAX_AGE_S`) and the browser is sent (303) to ``next``
  when it is a dashboard path, else to ``/ui/``; an invalid or revoked token answers 401
  with the form again (the token is never echoed). The login needs no CSRF token: there is
  no session yet (:mod:`scheduler.api.auth`).
- ``POST /ui/logout`` (CSRF token needed, as for every change): drops the cookie, 303 to
  the login page. The token itself stays valid (revoke it with ``schedctl tokens revoke``).
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from scheduler.api.auth import SESSION_COOKIE
from scheduler.checkpoints.objectstore import ObjectStore
from scheduler.dashboard.render import render
from scheduler.store import Store

# A browser session lasts a working day; the token outlives it (log in again).
SESSION_MAX_AGE_S = 12 * 3600
HOME = "/ui/"
# Longest ``next`` kept: a dashboard path with its filters is far shorter.
NEXT_MAX_CHARS = 2000
# Characters a cookie value carries unquoted (Python's http.cookies quotes any other, and the
# quoted value would no longer be the token): every generated token is made of these.
_COOKIE_SAFE_RE = re.compile(r"^[A-Za-z0-9!#$%&'*+\-.^_`|~:]+\Z")


def safe_next(raw: str | None) -> str:
    """Where to go after the login: ``raw`` when it is a path of this dashboard (``/ui...``,
    no scheme, host, backslash or control character), else ``/ui/``, so a crafted link can
    never send a user to another site."""
    if not raw or len(raw) > NEXT_MAX_CHARS or not raw.startswith("/ui"):
        return HOME
    if "\\" in raw or any(ord(c) < 0x20 or ord(c) == 0x7F for c in raw):
        return HOME
    parts = urlsplit(raw)
    if parts.scheme or parts.netloc or raw.startswith("//"):
        return HOME
    return raw


def router(store: Store, objects: ObjectStore) -> APIRouter:
    """The login and logout routes over ``store`` (users and tokens)."""
    pages = APIRouter()

    @pages.get("/ui/login", response_class=HTMLResponse)
    def login_form(request: Request, next: str = HOME) -> HTMLResponse:
        return render(request, "login.html", title="Log in", next=safe_next(next), error=None)

    @pages.post("/ui/login")
    def login(request: Request, token: str = Form(""), next: str = Form(HOME)):
        token = token.strip()
        principal = store.users.resolve(token) if token else None
        if principal is None:
            return render(request, "login.html", status_code=401, title="Log in",
                          next=safe_next(next), error="invalid or revoked token")
        if not _COOKIE_SAFE_RE.match(token):
            return render(request, "login.html", status_code=400, title="Log in",
                          next=safe_next(next), error="this token holds characters a browser "
                          "cookie cannot keep; log in with a token from `schedctl tokens "
                          "create`")
        # The audit entry of this request names the user who logged in.
        request.state.principal = principal
        answer = RedirectResponse(safe_next(next), status_code=303)
        answer.set_cookie(SESSION_COOKIE, token, max_age=SESSION_MAX_AGE_S, path="/",
                          httponly=True, samesite="strict",
                          secure=request.url.scheme == "https")
        return answer

    @pages.post("/ui/logout")
    def logout(request: Request) -> RedirectResponse:
        answer = RedirectResponse("/ui/login", status_code=303)
        answer.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict",
                             secure=request.url.scheme == "https")
        return answer

    return pages
