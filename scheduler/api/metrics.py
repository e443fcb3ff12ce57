"""``GET /metrics``: the Prometheus text format (admin token required: the figures cover every
user's jobs; a user's token answers 403).

What is exposed and where each figure comes from: :mod:`scheduler.observability.metrics`.
Prometheus scrapes it with ``authorization: {credentials_file: ...}`` (bearer), see README.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from scheduler.api.auth import require_admin
from scheduler.observability.metrics import registry_for
from scheduler.store import Store


def router(store: Store) -> APIRouter:
    """The ``/metrics`` route over ``store``, with a registry of its own (one per app)."""
    registry = registry_for(store.redis)
    api = APIRouter(dependencies=[Depends(require_admin)])

    @api.get("/metrics", response_class=Response, responses={
        200: {"content": {"text/plain": {}}, "description": "Prometheus text format 0.0.4"}})
    def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return api
