"""The daemon's HTTP API (FastAPI), for the CLI and the node agents.

Users authenticate with their API tokens (the daemon's own is the admin's,
:mod:`scheduler.api.auth`) and every route answers by who is calling: a user sees and acts on
their own jobs, an admin on every one; agents with a token scoped to one attempt of one job
(``scheduler.store.agents.AgentTokens``), which cannot read or change anything else.
Request bodies are size-limited before they are parsed (:mod:`scheduler.api.limits`: a
submission carries the job's code bundle, agent reports at most 500 log lines, other bodies a
spec at most). One router per resource: :mod:`~scheduler.api.jobs`,
:mod:`~scheduler.api.offers`, :mod:`~scheduler.api.history`, :mod:`~scheduler.api.events`,
:mod:`~scheduler.api.metrics`, :mod:`~scheduler.api.fleet`, :mod:`~scheduler.api.agents`,
:mod:`~scheduler.api.users` (users, tokens, the audit stream);
how errors are answered: :mod:`scheduler.api.errors`.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from core.models import utcnow
from scheduler import dashboard
from scheduler.api import (
    agents,
    errors,
    events,
    fleet,
    history,
    jobs,
    metrics,
    offers,
    users,
)
from scheduler.api import limits as body_limits
from scheduler.api.auth import Authenticator
from scheduler.checkpoints.objectstore import ObjectStore
from scheduler.store import Store
from scheduler.store.agents import AgentTokens


def create_app(store: Store, objects: ObjectStore, tokens: AgentTokens, api_token: str) -> FastAPI:
    """Build the app. ``objects`` is the checkpoint/bundle store; ``api_token`` the daemon's
    own token, registered as a token of the admin user ``admin``
    (:meth:`~scheduler.store.users.UserStore.register_bootstrap`)."""
    app = FastAPI(title="gpu-arbiter", version="0.1.0", responses=errors.ERROR_RESPONSES)
    store.users.register_bootstrap(api_token)
    errors.install(app)
    app.add_middleware(body_limits.BodyLimitMiddleware, auth=Authenticator(store.users, tokens),
                       audit=store.audit, limit_for=body_limits.body_limit,
                       json_limit_for=body_limits.json_limit)

    @app.get("/v1/health")
    def health() -> dict[str, Any]:
        store.redis.ping()
        return {"ok": True, "at": utcnow().isoformat()}

    app.include_router(jobs.router(store, objects))
    app.include_router(offers.router(store))
    app.include_router(history.router(store, objects))
    app.include_router(events.router(store))
    app.include_router(metrics.router(store))
    app.include_router(fleet.router(store))
    app.include_router(agents.router(store, tokens))
    app.include_router(users.router(store))
    dashboard.install(app, store, objects)
    return app
