"""``/ui/fleet``: the team's own machines, the rows of ``GET /v1/fleet``
(:func:`scheduler.services.fleet.hosts_awaited`): GPUs, free and claimed, the jobs on each
host, drained, reachable, last seen. An admin drains and undrains a host from here
(``POST /ui/fleet/{host}/drain`` and ``/undrain``, a form with the session's CSRF token, the
same :func:`~scheduler.services.fleet.drain` and :func:`~scheduler.services.fleet.undrain`
as the API's routes), then comes back to the page (303). A user's post answers 403; an
unknown host 404. Without a ``kind: fleet`` provider the page says so.
"""

from __future__ import annotations

import re
from typing import Any

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from core.models import utcnow
from scheduler.api.fleet import NAME_PATTERN
from scheduler.checkpoints.objectstore import ObjectStore
from scheduler.dashboard.pages.figures import age_since, usd
from scheduler.dashboard.render import page_user, render
from scheduler.services import fleet as fleet_service
from scheduler.store import Store
from scheduler.store.users import Principal

_NAME_RE = re.compile(NAME_PATTERN)


def _providers(request: Request):
    return getattr(request.app.state, "providers", None)


def _shown(row: dict[str, Any], now) -> dict[str, Any]:
    seen_text, _ = age_since(row["last_seen_at"], now)
    return {"api": row, "seen": seen_text,
            "gpus": ", ".join(f"{g['count']}x {g['model']} ({g['vram_gib']:.4g}G)"
                              for g in row["gpus"]) or "-",
            "cost": usd(row["cost_per_gpu_hour_usd"], 3)}


def denied(request: Request, what: str) -> HTMLResponse:
    """The 403 page: ``what`` needs an admin."""
    return render(request, "users_forbidden.html", 403, title="Admins only", what=what)


def router(store: Store, objects: ObjectStore) -> APIRouter:
    """The ``/ui/fleet`` page and its drain and undrain forms over ``store``."""
    api = APIRouter()

    @api.get("/ui/fleet", response_class=HTMLResponse)
    async def fleet_page(request: Request,
                         principal: Principal = Depends(page_user)) -> HTMLResponse:
        configured = bool(fleet_service.fleet_adapters(_providers(request)))
        rows = fleet_service.as_seen_by(
            store, await fleet_service.hosts_awaited(store, _providers(request)), principal)
        now = utcnow()
        return render(request, "fleet.html", title="Fleet", configured=configured,
                      hosts=[_shown(r, now) for r in rows])

    def change(action, verb: str):
        def route(request: Request, host: str, principal: Principal = Depends(page_user),
                  fleet: str | None = Form(None)) -> Response:
            if not principal.is_admin:
                return denied(request, f"{verb} a fleet host")
            fleet = fleet or None
            if not _NAME_RE.match(host) or (fleet is not None and not _NAME_RE.match(fleet)):
                return render(request, "fleet_error.html", 422, title="Fleet",
                              error="host: 1-40 letters, digits, '_' or '-'")
            try:
                action(store, _providers(request), host, fleet)
            except (fleet_service.FleetHostNotFound, fleet_service.AmbiguousHost) as exc:
                status = 404 if isinstance(exc, fleet_service.FleetHostNotFound) else 422
                return render(request, "fleet_error.html", status, title="Fleet",
                              error=str(exc))
            return RedirectResponse("/ui/fleet", status_code=303)
        return route

    # Threads, not the event loop: drain and undrain read the host's row (SSH, bounded).
    api.add_api_route("/ui/fleet/{host}/drain", change(fleet_service.drain, "drain"),
                      methods=["POST"])
    api.add_api_route("/ui/fleet/{host}/undrain", change(fleet_service.undrain, "undrain"),
                      methods=["POST"])
    return api
