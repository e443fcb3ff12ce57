"""An API app over a real Redis (and a real local object store) for /metrics and events."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import pytest
from fastapi.testclient import TestClient

from scheduler.api.app import create_app
from scheduler.checkpoints.local import LocalObjectStore
from core.models import Job, JobState, PlacementEnd, utcnow
from core.models.placements import Placement
from scheduler.store import Store
from scheduler.store.agents import AgentTokens
from tests.factories.offers import offer

TOKEN = "user-token"
SPEC = {"name": "train", "command": "python train.py", "resources": {"gpu_count": 1}}


@dataclass
class Api:
    client: TestClient
    store: Store
    app: object


@pytest.fixture
def api(redis_client, tmp_path) -> Api:
    store = Store.over(redis_client)
    app = create_app(store, LocalObjectStore(tmp_path / "objects"), AgentTokens(b"s"), TOKEN)
    return Api(TestClient(app, headers={"Authorization": f"Bearer {TOKEN}"}), store, app)


def submit(api: Api, name: str = "train") -> str:
    response = api.client.post("/v1/jobs", json={"spec": {**SPEC, "name": name}})
    assert response.status_code == 201, response.text
    return response.json()["id"]


def place(store: Store, job_id: str, price: float, *, ref: float | None = 3.0,
          provider: str = "aws", hours_ago: float = 1.0) -> Job:
    """Drive ``job_id`` to running on a placement started ``hours_ago`` at ``price``/h."""
    job = store.jobs.get(job_id)
    now = utcnow()
    attempt = job.attempt + 1
    chosen = offer(provider=provider, price_usd_per_hour=price)
    if ref is not None and job.on_demand_reference_usd_per_hour is None:
        job.on_demand_reference_usd_per_hour = ref
    job.attempt = attempt
    job.placement = Placement(attempt=attempt, offer=chosen, client_token=f"t-{attempt}",
                              decided_at=now, instance_id=f"i-{attempt}",
                              started_at=now - timedelta(hours=hours_ago))
    job.record(JobState.RUNNING, "running", offer=chosen)
    return store.jobs.save(job)


def end(store: Store, job_id: str, reason: PlacementEnd, state: JobState, message: str) -> Job:
    """Close the current placement now with ``reason`` and move the job to ``state``."""
    job = store.jobs.get(job_id)
    placement = job.placement
    placement.ended_at = utcnow()
    placement.end_reason = reason
    job.placements.append(placement)
    job.placement = None
    job.record(state, message, offer=placement.offer)
    return store.jobs.save(job)
