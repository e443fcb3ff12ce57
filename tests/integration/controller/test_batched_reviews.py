"""Price-move reviews decided many jobs at a time (:func:`scheduler.controller.migrating.
decide_moves`, deferred by the reconcile pass to the end of each batch of steps) decide for
every job what it decides for the job alone, over groups of different eligible offers, with
and without the speed model; and the pass saves exactly those moves. Real Redis, a real
replay cloud process; agent reports written as the API writes them."""

from __future__ import annotations

from datetime import timedelta

import pytest

from core.models import Job, JobState, StopKind, utcnow
from core.models.agents import AgentPhase, AgentReport
from scheduler.controller.migrating import decide_moves
from scheduler.controller.policy_inputs import inputs_many, snapshot
from scheduler.controller.reconcile import reconcile_pass
from scheduler.poller.offers import OfferPoller
from scheduler.store import keys
from tests.factories.jobs import spec
from tests.integration.controller.conftest import controller_context

MARKET = """
name: batched
time_scale: 60
notice_seconds: 2
offers:
  - {provider: aws, region: r1, zone: r1a, instance_type: cheap, gpu_model: T4, gpu_count: 1,
     vram_gib: 16, vcpus: 4, memory_gib: 16, spot_price_usd_per_hour: 0.10}
  - {provider: aws, region: r1, zone: r1b, instance_type: dear, gpu_model: T4, gpu_count: 1,
     vram_gib: 16, vcpus: 4, memory_gib: 16, on_demand_price_usd_per_hour: 1.0,
     spot_price_usd_per_hour: 0.60}
  - {provider: aws, region: r1, zone: r1c, instance_type: mid, gpu_model: T4, gpu_count: 1,
     vram_gib: 16, vcpus: 4, memory_gib: 16, spot_price_usd_per_hour: 0.30}
"""

WORK = {"unit": "samples", "total": 2e6, "workload": "transformer", "throughput": {"T4": 10}}

# (job id, spec overrides): two eligibility groups without the speed model, one job too short
# to be worth a move, two with the speed model (each a group of its own).
JOBS = [
    ("long-a", {"expected_hours": 50}),
    ("long-b", {"expected_hours": 50}),
    ("no-cheap", {"expected_hours": 50, "zones": {"deny": ["r1a"]}}),
    ("short", {"expected_hours": 0.02}),
    ("speed-a", {"work": WORK}),
    ("speed-b", {"work": WORK, "zones": {"deny": ["r1c"]}}),
]


@pytest.fixture
def ctx(redis_client, replay_market):
    provider = replay_market(MARKET)
    ctx = controller_context(redis_client, provider)
    OfferPoller(ctx.store, provider)()
    return ctx


def _report(ctx, job: Job, at, **fields) -> None:
    ctx.store.agents.save_report(AgentReport(job_id=job.id, attempt=job.placement.attempt,
                                             phase=AgentPhase.RUNNING, at=at, received_at=at,
                                             **fields))


def _all_running_on_dear(ctx) -> list[Job]:
    """Every job of JOBS running on the dear offer (the cheaper ones were briefly
    unavailable), two market hours later with a checkpoint just committed."""
    for o in ctx.store.offers.all_offers():
        if o.instance_type != "dear":
            ctx.store.offers.mark_unavailable(o.key, 3600)
    now = utcnow()
    for job_id, overrides in JOBS:
        job = Job(id=job_id, spec=spec(**{"resources": {"min_vram_gib": 16}, **overrides}),
                  created_at=now, updated_at=now)
        job.record(JobState.PENDING, "submitted")
        ctx.store.jobs.create(job)
    reconcile_pass(ctx)
    for job_id, _ in JOBS:
        _report(ctx, ctx.store.jobs.get(job_id), ctx.clock())
    reconcile_pass(ctx)
    ctx.store.redis.delete(keys.UNAVAILABLE_OFFERS)
    later = utcnow() + timedelta(seconds=120)
    ctx.clock = lambda: later
    for job_id, _ in JOBS:
        _report(ctx, ctx.store.jobs.get(job_id), later, checkpoint_id="c1")
    reconcile_pass(ctx)  # the checkpoints are recorded; the reviews of this pass are spent
    jobs = [ctx.store.jobs.get(job_id) for job_id, _ in JOBS]
    assert all(j.state is JobState.RUNNING and j.placement.offer.instance_type == "dear"
               for j in jobs)
    return jobs


def test_grouped_inputs_cover_every_job_once_and_split_by_market_view(ctx):
    jobs = _all_running_on_dear(ctx)
    ctx = ctx.for_pass()
    groups = inputs_many(ctx.store, snapshot(ctx), jobs, ctx.clock())
    members = sorted(i for idx, _ in groups for i in idx)
    assert members == list(range(len(jobs)))
    by_job = {jobs[idx[0]].id: (idx, inputs) for idx, inputs in groups}
    shared = next(idx for idx, inputs in groups if len(idx) > 1)
    assert sorted(jobs[i].id for i in shared) == ["long-a", "long-b", "short"]
    assert len(by_job["no-cheap"][0]) == 1 and by_job["no-cheap"][1].speeds is None
    assert by_job["speed-a"][1].speeds is not None and len(by_job["speed-a"][0]) == 1
    for idx, inputs in groups:
        assert len(inputs.jobs) == len(idx) == inputs.eligible.shape[0]


def test_moves_decided_together_are_those_decided_alone(ctx):
    jobs = _all_running_on_dear(ctx)
    ctx = ctx.for_pass()
    together = decide_moves([(ctx, job) for job in jobs])
    alone = [decide_moves([(ctx, job)])[0] for job in jobs]
    assert together == alone
    moved = {job.id: move for job, move in zip(jobs, together, strict=True) if move}
    # The long jobs move to the cheapest offer they may use; the short one stays.
    assert "cheap" in moved["long-a"].target and "cheap" in moved["long-b"].target
    assert "mid" in moved["no-cheap"].target
    assert "short" not in moved
    assert "cheap" in moved["speed-a"].target and "speed-b" in moved
    assert "reference-hour" in moved["speed-a"].why or "/h" in moved["speed-a"].why


def test_the_pass_saves_the_moves_decided_together(ctx):
    jobs = _all_running_on_dear(ctx)
    # The reviews were last due at the pass above: due again 31 s later.
    later = ctx.clock() + timedelta(seconds=31)
    ctx.clock = lambda: later
    for job in jobs:
        _report(ctx, job, later, checkpoint_id="c1")
    expected = decide_moves([(ctx.for_pass(), job) for job in jobs])
    assert sum(m is not None for m in expected) == 5
    reconcile_pass(ctx)
    for job, move in zip(jobs, expected, strict=True):
        saved = ctx.store.jobs.get(job.id)
        if move is None:
            assert saved.stop_request is None and saved.state is JobState.RUNNING
            continue
        assert saved.state is JobState.CHECKPOINTING
        assert saved.stop_request.kind is StopKind.MOVE
        assert saved.stop_request.target == move.target
        assert saved.events[-1].kind == "migration"
        assert saved.events[-1].message == f"{move.why}; agent checkpointing before the move"
