"""The dashboard through the real API app (FastAPI TestClient) over a real Redis and a local
object store: a signed-in browser is a client holding the ``ga_session`` cookie."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import pytest
from fastapi.testclient import TestClient

from core.models import Job, JobState
from core.models.placements import Placement, PlacementEnd
from scheduler.api.app import create_app
from scheduler.api.auth import SESSION_COOKIE, csrf_token
from scheduler.checkpoints.local import LocalObjectStore
from scheduler.store import Store
from scheduler.store.agents import AgentTokens
from scheduler.store.users import Role
from tests.factories.jobs import spec
from tests.factories.offers import T0, offer

ADMIN_TOKEN = "admin-daemon-token"


@dataclass
class Dash:
    store: Store
    app: object
    tokens: dict[str, str]

    def browser(self, user: str | None = None) -> TestClient:
        """A client; signed in as ``user`` (its cookie set) when given."""
        client = TestClient(self.app, base_url="http://testserver", follow_redirects=False)
        if user is not None:
            client.cookies.set(SESSION_COOKIE, self.tokens[user])
        return client

    def csrf(self, user: str) -> str:
        return csrf_token(self.tokens[user])


@pytest.fixture
def dash(redis_client, tmp_path) -> Dash:
    store = Store.over(redis_client)
    app = create_app(store, LocalObjectStore(tmp_path / "objects"), AgentTokens(b"secret"),
                     ADMIN_TOKEN)
    tokens = {"admin": ADMIN_TOKEN}
    for name in ("alice", "bob"):
        store.users.add(name, Role.USER)
        tokens[name], _ = store.users.create_token(name)
    return Dash(store, app, tokens)


def make_job(store: Store, name: str, owner: str, *, finished: bool = True,
             message: str = "running on i-1") -> Job:
    """A stored job of ``owner`` that ran 2 h on a $0.918/h spot offer (its price changed to
    $1.20/h after 1 h), then 30 min on a second placement (finished, or running on)."""
    job = Job(id=f"{name}-abc123", spec=spec(name=name, owner=owner), created_at=T0,
              updated_at=T0, on_demand_reference_usd_per_hour=3.06)
    job.record(JobState.PENDING, "submitted", at=T0)
    first = Placement(attempt=1, offer=offer(), client_token=f"{job.id}-1", decided_at=T0,
                      instance_id="i-1", started_at=T0, ended_at=T0 + timedelta(hours=2),
                      end_reason=PlacementEnd.PREEMPTED)
    first.add_price_change(T0 + timedelta(hours=1), 1.2)
    job.placements.append(first)
    job.record(JobState.RUNNING, message, at=T0 + timedelta(minutes=1))
    job.record(JobState.MIGRATING, "preemption notice; migrating (resumes from the latest "
               "checkpoint)", at=T0 + timedelta(hours=2))
    second_start = T0 + timedelta(hours=2, minutes=5)
    job.placement = Placement(attempt=2, offer=offer(zone="us-west-2b"),
                              client_token=f"{job.id}-2", decided_at=second_start,
                              instance_id="i-2", started_at=second_start)
    job.attempt = 2
    job.record(JobState.RUNNING, "running on i-2", at=second_start)
    if finished:
        job.placement.ended_at = second_start + timedelta(minutes=30)
        job.placement.end_reason = PlacementEnd.SUCCEEDED
        job.placements.append(job.placement)
        job.placement = None
        job.record(JobState.SUCCEEDED, "command exited 0", at=second_start + timedelta(minutes=30))
    return store.jobs.create(job)
