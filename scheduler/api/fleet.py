"""The team's own machines (``kind: fleet`` providers), with a user token (agent tokens are
refused): list (any user), drain and undrain (admin; a user's token answers 403)
(:mod:`scheduler.services.fleet`).

- ``GET /v1/fleet``: ``{"hosts": [row, ...]}``, one row per host of every fleet
  (:func:`scheduler.services.fleet.hosts`: GPUs, used/free, jobs, drained, last seen); a
  plain user sees no SSH address and no other user's job ids
  (:func:`scheduler.services.fleet.as_seen_by`).
- ``POST /v1/fleet/{host}/drain``: no new job starts on ``host`` and the jobs on it get a
  preemption notice (they checkpoint and move); idempotent. Answers the host's row.
- ``POST /v1/fleet/{host}/undrain``: the host's free GPUs are offered again; idempotent.

``host`` (and the optional ``fleet`` query, needed only when two fleets have a host of that
name) is 1-40 of ``[A-Za-z0-9_-]``, as host names are in the config; another shape answers
422 naming the field, an unknown host 404 naming it and the hosts there are, an ambiguous
one 422 naming ``fleet``. The daemon's providers come from ``app.state.providers`` (set by
:mod:`scheduler.daemon`); without any fleet every host is unknown and the list empty.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Request

from scheduler.api.auth import current_user, require_admin, require_user
from scheduler.services import fleet as fleet_service
from scheduler.store import Store
from scheduler.store.users import Principal

# As providers.fleet.settings names hosts and fleets.
NAME_PATTERN = r"^[A-Za-z0-9_-]{1,40}$"
HostPath = Path(..., min_length=1, max_length=40, pattern=NAME_PATTERN,
                description="the host's name in its fleet's config")
FleetQuery = Query(None, min_length=1, max_length=40, pattern=NAME_PATTERN,
                   description="the fleet provider's name, when two fleets have that host")


def _providers(request: Request):
    return getattr(request.app.state, "providers", None)


def router(store: Store) -> APIRouter:
    """The fleet routes over ``store`` (the slot ledgers and jobs live there)."""
    api = APIRouter(dependencies=[Depends(require_user)])

    def change(action, request: Request, host: str, fleet: str | None) -> dict[str, Any]:
        try:
            return action(store, _providers(request), host, fleet)
        except fleet_service.FleetHostNotFound as exc:
            raise HTTPException(404, str(exc)) from None
        except fleet_service.AmbiguousHost as exc:
            raise HTTPException(422, str(exc)) from None

    @api.get("/v1/fleet")
    async def list_fleet(request: Request,
                         who: Principal = Depends(current_user)) -> dict[str, Any]:
        # Awaited, not in a worker thread: many listings waiting on a hung host must not
        # take the threads every other route runs in.
        rows = await fleet_service.hosts_awaited(store, _providers(request))
        return {"hosts": fleet_service.as_seen_by(store, rows, who)}

    @api.post("/v1/fleet/{host}/drain", dependencies=[Depends(require_admin)])
    def drain_host(request: Request, host: str = HostPath,
                   fleet: str | None = FleetQuery) -> dict[str, Any]:
        return change(fleet_service.drain, request, host, fleet)

    @api.post("/v1/fleet/{host}/undrain", dependencies=[Depends(require_admin)])
    def undrain_host(request: Request, host: str = HostPath,
                     fleet: str | None = FleetQuery) -> dict[str, Any]:
        return change(fleet_service.undrain, request, host, fleet)

    return api
