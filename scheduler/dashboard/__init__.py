"""The dashboard: server-rendered pages served by the daemon's API app under ``/ui/``.

Same port and same tokens as the API: a user logs in with an API token, which the browser
keeps in the HttpOnly, SameSite=Strict cookie ``ga_session``
(:data:`scheduler.api.auth.SESSION_COOKIE`); the API's middleware authenticates the cookie
exactly as a bearer token and asks for the session's CSRF token on every change
(:mod:`scheduler.api.auth`). Every number a page shows comes from the same service function
the API answers with, so a page and the API agree.

Pages are Jinja2 templates (autoescaped: whatever a job controls is text, never markup) under
``templates/``; scripts and styles are files under ``static/`` (the page's Content Security
Policy allows no inline script and nothing from another origin), charts are drawn by uPlot,
vendored under ``static/vendor/uplot`` (MIT), so nothing is fetched from a CDN at run time.

One module per page group under :mod:`scheduler.dashboard.pages`, each with
``router(store, objects) -> APIRouter``.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from scheduler.checkpoints.objectstore import ObjectStore
from scheduler.dashboard.render import install_login_redirect
from scheduler.dashboard.security import SecurityHeadersMiddleware
from scheduler.store import Store

STATIC_DIR = Path(__file__).parent / "static"
PAGES = ("session", "overview", "jobs", "market", "budgets", "fleet", "users")


def install(app: FastAPI, store: Store, objects: ObjectStore) -> None:
    """Add the dashboard's pages, its static files and its security headers to ``app``."""
    for name in PAGES:
        module = importlib.import_module(f"scheduler.dashboard.pages.{name}")
        app.include_router(module.router(store, objects), include_in_schema=False)
    app.mount("/ui/static", StaticFiles(directory=STATIC_DIR), name="ui-static")
    install_login_redirect(app)
    app.add_middleware(SecurityHeadersMiddleware)
