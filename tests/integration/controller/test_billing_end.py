"""Billing of a placement ends when the cloud stopped billing: a reclaim the controller saw
late (daemon down past the notice) is billed until the notice's action time, not until now."""

from __future__ import annotations

from datetime import timedelta

from core.models import Job, JobState, Placement, PlacementEnd, utcnow
from scheduler.controller.context import Context, ProviderRegistry
from scheduler.controller.transitions import end_placement
from scheduler.store import Store
from tests.factories.jobs import spec
from tests.factories.offers import offer


def _running(started_ago_s: float) -> tuple[Job, object]:
    now = utcnow()
    placement = Placement(attempt=1, offer=offer(), client_token="ga-x-1", decided_at=now,
                          instance_id="i-1", started_at=now - timedelta(seconds=started_ago_s))
    job = Job(id="job-b", spec=spec(), state=JobState.RUNNING, created_at=now, updated_at=now,
              attempt=1, placement=placement)
    return job, now


def _ctx(redis_client, now) -> Context:
    return Context(store=Store.over(redis_client), providers=ProviderRegistry(), bootstrap=None,
                   owner="o", clock=lambda: now)


def test_a_late_seen_reclaim_is_billed_until_the_action_time(redis_client):
    job, now = _running(600)
    action_at = now - timedelta(seconds=300)
    end_placement(_ctx(redis_client, now), job, PlacementEnd.PREEMPTED, billed_until=action_at)
    ended = job.placements[-1]
    assert ended.ended_at == action_at
    assert abs(ended.billed_hours() - 300 / 3600) < 1e-9


def test_billing_never_ends_before_the_start_or_after_now(redis_client):
    job, now = _running(60)
    end_placement(_ctx(redis_client, now), job, PlacementEnd.PREEMPTED,
                  billed_until=now - timedelta(hours=1))
    assert job.placements[-1].ended_at == job.placements[-1].started_at
    job, now = _running(60)
    end_placement(_ctx(redis_client, now), job, PlacementEnd.PREEMPTED,
                  billed_until=now + timedelta(hours=1))
    assert job.placements[-1].ended_at == now
    job, now = _running(60)
    end_placement(_ctx(redis_client, now), job, PlacementEnd.LOST)
    assert job.placements[-1].ended_at == now
