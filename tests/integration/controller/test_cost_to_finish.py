"""Learning a job's throughput from its progress reports and deciding on cost to finish,
through the controller, against a real Redis and a real replay cloud process. Agent reports
are written as the API would write them; the controller's clock is moved forward (the replay
market runs 60x: 1 wall s = 1 market min).

The numbers, worked out by hand. The job declares 10 samples/s on one T4 (36,000 per market
hour); the GPU table's transformer relatives (T4 0.1506, A10G 0.3429 of an A100-80GB) make
the A10G prior 36,000 × 0.3429 / 0.1506 ≈ 82,000 samples/h. Per 1,000 samples: T4 $0.10/h →
$0.0028, A10G $0.15/h → $0.0018: the A10G is placed first. There the job does 600 samples per
wall second = 36,000 per market hour (600 × 3600 / 60): $0.0042 per 1k, so the T4 (declared,
untouched by the A10G's measurement) is now the cheaper one to finish on, and the job moves.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from prometheus_client import generate_latest

from core.models import Job, JobState, PlacementEnd, StopKind, utcnow
from core.models.agents import AgentPhase, AgentReport
from core.models.work import ProgressPoint
from scheduler.controller.learning import PROGRESS_RECORD_S
from scheduler.controller.policy_inputs import job_inputs, snapshot
from scheduler.controller.reconcile import reconcile_pass
from scheduler.observability.metrics import registry_for
from scheduler.poller.offers import OfferPoller
from scheduler.store.job_stats import JobStats
from tests.factories.jobs import spec
from tests.integration.controller.conftest import controller_context

MARKET = """
name: speeds
time_scale: 60
notice_seconds: 2
offers:
  - {provider: aws, region: r1, zone: r1a, instance_type: g4dn, gpu_model: T4, gpu_count: 1,
     vram_gib: 16, vcpus: 4, memory_gib: 16, spot_price_usd_per_hour: 0.10}
  - {provider: aws, region: r1, zone: r1b, instance_type: g5, gpu_model: A10G, gpu_count: 1,
     vram_gib: 24, vcpus: 4, memory_gib: 16, spot_price_usd_per_hour: 0.15}
"""

WORK = {"unit": "samples", "total": 2e6, "workload": "transformer", "throughput": {"T4": 10}}


@pytest.fixture
def ctx(redis_client, replay_market):
    provider = replay_market(MARKET)
    ctx = controller_context(redis_client, provider)
    OfferPoller(ctx.store, provider)()
    return ctx


def _at(ctx, seconds: float):
    later = utcnow() + timedelta(seconds=seconds)
    ctx.clock = lambda: later
    return later


def _report(ctx, job, phase, at, **fields) -> None:
    ctx.store.agents.save_report(AgentReport(job_id=job.id, attempt=job.placement.attempt,
                                             phase=phase, at=at, received_at=at, **fields))


def _point(t0, seconds: float, done: float) -> ProgressPoint:
    return ProgressPoint(unit="samples", done=done, at=t0 + timedelta(seconds=seconds))


def _running(ctx, **overrides) -> Job:
    now = utcnow()
    job = Job(id="job-1", spec=spec(**overrides), created_at=now, updated_at=now)
    job.record(JobState.PENDING, "submitted")
    ctx.store.jobs.create(job)
    reconcile_pass(ctx)
    job = ctx.store.jobs.get(job.id)
    _report(ctx, job, AgentPhase.RUNNING, ctx.clock())
    reconcile_pass(ctx)
    job = ctx.store.jobs.get(job.id)
    assert job.state is JobState.RUNNING
    return job


def test_placement_ranks_by_cost_per_unit_of_work_and_says_so_with_numbers(ctx):
    job = _running(ctx, work=WORK)
    assert job.placements == [] and job.placement.offer.gpu_model == "A10G"
    decision = next(e.message for e in job.events if e.state is JobState.PROVISIONING)
    # A10G $0.15 / 82,000 per h vs T4 $0.10 / 36,000 per h; 2.3x the rate at 1.5x the price
    assert "A10G: $0.0018 per 1k samples vs T4 $0.0028: 2.3× faster at 1.5× the price" in \
        decision, decision
    assert "(rates: prior, declared)" in decision


def test_rate_learned_on_the_first_offer_then_the_job_moves_to_the_cheaper_to_finish(ctx):
    job = _running(ctx, work=WORK)
    t0 = utcnow()
    first = _point(t0, 0, 0)
    # The first interval (0 → 10 s) is warm-up; the measurement starts at the second point.
    for seconds, done in ((0, 0), (10, 6000), (10 + PROGRESS_RECORD_S, 6000 + 600 * 30),
                          (190, 6000 + 600 * 180)):
        at = _at(ctx, seconds + 5)
        _report(ctx, job, AgentPhase.RUNNING, at, first_progress=first,
                progress=_point(t0, seconds, done))
        reconcile_pass(ctx)
    job = ctx.store.jobs.get(job.id)
    assert job.progress.start.done == 6000
    assert job.progress.latest.done == 6000 + 600 * 180
    rate = job.progress.rate("A10G", 1)
    # 108,000 samples in 180 wall s = 3 market hours: 36,000 samples per market hour
    assert rate.units == 108_000 and rate.hours == pytest.approx(3.0)
    # /metrics: $0.15/h ÷ 36,000 samples/h = $0.0042 per 1,000 samples
    assert JobStats(ctx.store.redis).totals(0).work_cost == [
        ("job-1", "samples", pytest.approx(0.15 * 1000 / 36_000))]
    scraped = generate_latest(registry_for(ctx.store.redis)).decode()
    assert 'ga_job_cost_per_1k_units_usd{job_id="job-1",unit="samples"} 0.0041' in scraped
    inputs = job_inputs(ctx, snapshot(ctx), job)
    speeds = inputs.speeds
    t4, a10 = (next(i for i, o in enumerate(snapshot(ctx).offers) if o.gpu_model == m)
               for m in ("T4", "A10G"))
    assert speeds.unit == "samples" and speeds.rates.source[a10] == "measured"
    assert speeds.rates.units_per_h[t4] == pytest.approx(36_000)
    assert speeds.rates.units_per_h[a10] == pytest.approx(36_000, rel=0.1)
    # Remaining work in reference-hours: (2e6 − 114,000) samples ÷ the reference rate.
    assert inputs.jobs.remaining_compute_h[0] == pytest.approx(
        (2e6 - 114_000) / speeds.ref_rate)
    # The next review moves it: the T4 does the same work for two thirds of the price.
    at = _at(ctx, 240)
    _report(ctx, job, AgentPhase.RUNNING, at, first_progress=first,
            progress=_point(t0, 190, 6000 + 600 * 180))
    reconcile_pass(ctx)
    job = ctx.store.jobs.get(job.id)
    assert job.state is JobState.CHECKPOINTING and job.stop_request.kind is StopKind.MOVE
    moved = job.events[-1]
    assert moved.kind == "migration" and "g4dn" in moved.message
    assert "T4: $0.0028 per 1k samples vs A10G $0.004" in moved.message, moved.message
    assert "at 0.67× the price" in moved.message and "(rates: declared, measured)" in \
        moved.message
    # The attempt ends; its evidence stays on the record for the next decisions.
    _report(ctx, job, AgentPhase.CHECKPOINTED, at, checkpoint_id="c1",
            first_progress=first, progress=_point(t0, 200, 6000 + 600 * 190))
    reconcile_pass(ctx)
    job = ctx.store.jobs.get(job.id)
    assert job.placements[-1].end_reason is PlacementEnd.MOVED
    reconcile_pass(ctx)
    job = ctx.store.jobs.get(job.id)
    assert job.placement.offer.gpu_model == "T4"
    assert job.progress.rate("A10G", 1).units == 600 * 190  # from 6,000 to 120,000


def test_a_job_that_reports_nothing_is_placed_as_before(ctx):
    job = _running(ctx, expected_hours=2)
    assert job.placement.offer.gpu_model == "T4"  # cheapest per hour: no speed model
    decision = next(e.message for e in job.events if e.state is JobState.PROVISIONING)
    assert "per 1k" not in decision and "reference-hour" not in decision
    assert job_inputs(ctx, snapshot(ctx), job).speeds is None
    at = _at(ctx, 30)
    _report(ctx, job, AgentPhase.RUNNING, at)
    reconcile_pass(ctx)
    assert ctx.store.jobs.get(job.id).progress.latest is None


def test_a_stall_in_progress_neither_breaks_the_job_nor_becomes_evidence(ctx):
    # No declared rate: the job reports 600 samples, then the same 600 again 40 s later
    # (evaluation). The stall is no rate: the job still finishes, and nothing is learned.
    job = _running(ctx)
    t0 = utcnow()
    for seconds, done in ((0, 0), (10, 600), (50, 600)):
        at = _at(ctx, seconds + 5)
        _report(ctx, job, AgentPhase.RUNNING, at, first_progress=_point(t0, 0, 0),
                progress=_point(t0, seconds, done))
        reconcile_pass(ctx)
    job = ctx.store.jobs.get(job.id)
    assert job.state is JobState.RUNNING and job.progress.latest.done == 600
    assert job.progress.measured() == [] and job_inputs(ctx, snapshot(ctx), job) is not None
    at = _at(ctx, 80)
    _report(ctx, job, AgentPhase.SUCCEEDED, at, exit_code=0, checkpoint_id="c-final",
            first_progress=_point(t0, 0, 0), progress=_point(t0, 50, 600))
    reconcile_pass(ctx)
    job = ctx.store.jobs.get(job.id)
    assert job.state is JobState.SUCCEEDED and job.progress.closed == []
