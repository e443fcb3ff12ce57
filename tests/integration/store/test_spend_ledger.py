"""A job's spend reaches its owner's ledger with every write of the job, so the ledger holds a
finished job's whole cost (the budget step only runs for active jobs and refreshes owners
without a limit once a minute). Real Redis."""

from __future__ import annotations

from datetime import timedelta

import pytest

from core.models import Job, JobState, PlacementEnd, utcnow
from scheduler.store import Store
from tests.factories.jobs import spec
from tests.integration.dashboard.conftest import make_job


def test_the_ledger_holds_a_finished_jobs_final_cost(redis_client):
    store = Store.over(redis_client)
    job = make_job(store, "train", "alice", finished=False)
    running = store.spend.owner_total("alice")
    assert running == pytest.approx(job.cost_usd(), rel=1e-3)
    job.placement.ended_at = job.placement.started_at + timedelta(hours=1)
    job.placement.end_reason = PlacementEnd.SUCCEEDED
    job.placements.append(job.placement)
    job.placement = None
    job.record(JobState.SUCCEEDED, "command exited 0", at=job.placements[-1].ended_at)
    job = store.jobs.save(job)
    assert store.spend.owner_total("alice") == pytest.approx(job.cost_usd())  # the final bill
    assert job.cost_usd() != pytest.approx(running)
    assert store.spend.owner_total("bob") == 0.0


def test_a_job_that_never_started_adds_nothing(redis_client):
    store = Store.over(redis_client)
    now = utcnow()
    store.jobs.create(Job(id="queued-1", spec=spec(name="queued", owner="carol"),
                          created_at=now, updated_at=now))
    assert redis_client.hlen("ga:spend:{carol}") == 0
