"""Rendering dashboard pages: the Jinja2 environment (autoescaped), the signed-in user, and the
redirect to the login page.

A page route takes ``principal: Principal = Depends(page_user)`` (redirected to
``/ui/login?next=<path>`` when there is no valid session) and answers
``render(request, "page.html", title=..., **context)``. Every template extends ``base.html``
and gets ``principal``, ``csrf`` (the session's CSRF token, for forms: ``<input type="hidden"
name="csrf_token" value="{{ csrf }}">``), ``nav`` and ``active``.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from jinja2 import Environment, FileSystemLoader, select_autoescape

from core.units import usd_small
from scheduler.api.auth import credential_of, csrf_token
from scheduler.store.users import Principal

TEMPLATES_DIR = Path(__file__).parent / "templates"
# (path, label, admin only)
NAV = [("/ui/", "Overview", False), ("/ui/jobs", "Jobs", False), ("/ui/offers", "Offers", False),
       ("/ui/prices", "Prices", False), ("/ui/budgets", "Budgets", False),
       ("/ui/fleet", "Fleet", False), ("/ui/users", "Users", True)]

env = Environment(loader=FileSystemLoader(TEMPLATES_DIR),
                  autoescape=select_autoescape(("html",), default_for_string=True),
                  trim_blocks=True, lstrip_blocks=True)


def usd(value: float | None, digits: int = 4) -> str:
    """USD as ``schedctl status`` shows it (``$1,234.5678``, four decimals by default), so a
    page's figure reads exactly as the CLI's; ``-`` for none."""
    return "-" if value is None else f"${value:,.{digits}f}"


def per_1k(value: float | None) -> str:
    """USD per 1,000 work units (:func:`core.units.usd_small`); ``-`` when unknown."""
    return "-" if value is None else usd_small(value)


def percent(value: float | None) -> str:
    """``66.4%`` (one decimal, never ``-0.0%``); ``-`` for none."""
    return "-" if value is None else f"{round(value, 1) + 0.0:.1f}%"


def when(value: datetime | str | None) -> str:
    """An instant as ``2026-12-01 19:04:05`` (UTC); ``-`` for none."""
    if not value:
        return "-"
    at = datetime.fromisoformat(value) if isinstance(value, str) else value
    return at.strftime("%Y-%m-%d %H:%M:%S")


def hours(value: float | None) -> str:
    """A duration in hours as ``1 h 05 min`` or ``42 min`` (``-`` for none)."""
    if value is None:
        return "-"
    minutes = round(value * 60)
    return f"{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f"{minutes} min"


env.filters.update(usd=usd, per_1k=per_1k, percent=percent, when=when, hours=hours)


class LoginRequired(Exception):
    """Raised by :func:`page_user` when the request has no valid session."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.path = path


async def page_user(request: Request) -> Principal:
    """FastAPI dependency of every page: the signed-in user, or a redirect to the login page."""
    principal = getattr(request.state, "principal", None)
    if principal is None:
        raise LoginRequired(request.url.path)
    return principal


def session_csrf(request: Request) -> str:
    """The CSRF token of the request's session ('' without a cookie session)."""
    cred = credential_of({k.encode("latin-1"): v.encode("latin-1")
                          for k, v in request.headers.items()})
    return csrf_token(cred.token) if cred.via == "cookie" and cred.token else ""


def render(request: Request, template: str, status_code: int = 200,
           **context: Any) -> HTMLResponse:
    """Render ``template`` with ``context`` plus the page's common values."""
    principal = getattr(request.state, "principal", None)
    common = {"principal": principal, "csrf": session_csrf(request),
              "nav": [(p, label) for p, label, admin in NAV
                      if principal is not None and (principal.is_admin or not admin)],
              "active": request.url.path}
    html = env.get_template(template).render(**common, **context)
    return HTMLResponse(html, status_code=status_code)


def install_login_redirect(app: FastAPI) -> None:
    @app.exception_handler(LoginRequired)
    async def to_login(_: Request, exc: LoginRequired) -> RedirectResponse:
        return RedirectResponse(f"/ui/login?next={quote(exc.path, safe='/')}", status_code=303)
