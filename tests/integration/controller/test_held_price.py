"""The bill is what the market charged, and max_price_usd_per_hour holds while a job runs.

Against a real Redis, a real replay cloud process and the real offer poller, on the real
clock: the replay market runs 1,800x (one wall second is half a market hour) and the held
offer's spot price doubles mid-run, as its market file says. The expected bill is computed
here from the market file itself (its price steps integrated over the placement's market
hours), not with the code under test. Agent reports are written as the API would write them.
"""

from __future__ import annotations

import io
import itertools
import time
from datetime import datetime, timedelta

import pytest
import yaml
from rich.console import Console

from core.models import Job, JobState, PlacementEnd, StopKind, utcnow
from core.models.agents import AgentAction, AgentPhase, AgentReport
from scheduler.cli import render
from scheduler.controller.reconcile import reconcile_pass
from scheduler.observability.providers import counted
from scheduler.poller.offers import OfferPoller
from scheduler.services import costs
from scheduler.services.agent_commands import command_for
from scheduler.services.jobs import summary as job_summary
from scheduler.store.job_stats import JobStats
from tests.factories.jobs import spec
from tests.integration.controller.conftest import controller_context

SCALE = 1800.0  # market seconds per wall second

HELD = """
  - {provider: aws, region: r1, zone: r1a, instance_type: held, gpu_model: T4, gpu_count: 1,
     vram_gib: 16, vcpus: 4, memory_gib: 16, on_demand_price_usd_per_hour: 5.0,
     spot_price_usd_per_hour: 1.0, interruption_risk: 0.05,
     spot_price_series: [{at_hours: 2.0, price: 2.0}, {at_hours: 4.0, price: 0.9}]}
"""
ALTERNATIVE = """
  - {provider: aws, region: r1, zone: r1b, instance_type: alt, gpu_model: T4, gpu_count: 1,
     vram_gib: 16, vcpus: 4, memory_gib: 16, spot_price_usd_per_hour: 1.4,
     interruption_risk: 0.05}
"""


def _market(*offers: str) -> str:
    return f"name: heldprice\ntime_scale: {SCALE:g}\nnotice_seconds: 2\noffers:{''.join(offers)}"


class Market:
    """The market file read independently of the code under test, and its clock."""

    def __init__(self, text: str, provider) -> None:
        held = yaml.safe_load(text)["offers"][0]
        self.base = held["spot_price_usd_per_hour"]
        self.steps = [(s["at_hours"], s["price"]) for s in held["spot_price_series"]]
        # The replay cloud's opening observation is stamped with its clock's epoch.
        self.epoch = min(o.observed_at for o in provider.poll_prices(None))

    def hours(self, wall: datetime) -> float:
        """Market hours at ``wall`` (start_offset_hours is 0)."""
        return (wall - self.epoch).total_seconds() * SCALE / 3600.0

    def wall(self, market_h: float) -> datetime:
        return self.epoch + timedelta(seconds=market_h * 3600.0 / SCALE)

    def bill(self, start: datetime, end: datetime) -> float:
        """∫ price dt over [start, end] in market hours, straight from the file's steps."""
        a, b = self.hours(start), self.hours(end)
        edges = [a] + [h for h, _ in self.steps if a < h < b] + [b]
        total = 0.0
        for lo, hi in itertools.pairwise(edges):
            in_force = [p for h, p in self.steps if h <= lo]
            total += (in_force[-1] if in_force else self.base) * (hi - lo)
        return total


def _sleep_until(wall: datetime, margin_s: float = 0.3) -> None:
    time.sleep(max(0.0, (wall - utcnow()).total_seconds() + margin_s))


def _report(ctx, job: Job, phase: AgentPhase, **fields) -> None:
    now = utcnow()
    ctx.store.agents.save_report(AgentReport(job_id=job.id, attempt=job.placement.attempt,
                                             phase=phase, at=now, received_at=now, **fields))


def _running(ctx, poll, **overrides) -> Job:
    now = utcnow()
    job = Job(id="job-p", spec=spec(resources={"min_vram_gib": 16}, **overrides),
              created_at=now, updated_at=now)
    job.record(JobState.PENDING, "submitted")
    ctx.store.jobs.create(job)
    poll()
    reconcile_pass(ctx)
    job = ctx.store.jobs.get(job.id)
    _report(ctx, job, AgentPhase.RUNNING)
    reconcile_pass(ctx)
    job = ctx.store.jobs.get(job.id)
    assert job.state is JobState.RUNNING and job.placement.offer.instance_type == "held"
    return job


def _stopped_for_max_price(ctx, poll, market, job: Job) -> Job:
    """At market hour 2.0 (the held offer's price has crossed the job's max), one poll and one
    pass: the job is asked to stop for its max price. Returns the job as stored then."""
    _sleep_until(market.wall(2.0))
    poll()
    reconcile_pass(ctx)  # within one poll of the price crossing the max
    job = ctx.store.jobs.get(job.id)
    assert job.stop_request.kind is StopKind.MAX_PRICE
    return job


def _setup(replay_market, redis_client, *offers):
    text = _market(*offers)
    provider = replay_market(text)
    # Wrapped as the daemon wraps its adapters (the history source must still be the replay's).
    [wrapped] = counted([provider], redis_client)
    ctx = controller_context(redis_client, wrapped)
    poll = OfferPoller(ctx.store, wrapped)
    poll()  # starts the cloud: its clock's epoch
    market = Market(text, provider)
    return ctx, poll, market


def test_the_bill_integrates_the_held_offers_price_series(replay_market, redis_client):
    ctx, poll, market = _setup(replay_market, redis_client, HELD)
    job = _running(ctx, poll)
    doubled = market.wall(2.0)
    assert job.placement.started_at < doubled, "the launch took longer than the test allows"
    _sleep_until(doubled)
    poll()
    reconcile_pass(ctx)
    time.sleep(0.5)
    _report(ctx, job, AgentPhase.SUCCEEDED, exit_code=0, checkpoint_id="c-final")
    reconcile_pass(ctx)
    job = ctx.store.jobs.get(job.id)
    assert job.state is JobState.SUCCEEDED
    placement = job.placements[-1]
    [change] = placement.price_changes  # from price history, at its own time
    assert change.price_usd_per_hour == 2.0
    assert abs((change.at - doubled).total_seconds()) < 0.002  # history stores ms
    expected = market.bill(placement.started_at, placement.ended_at)
    # The change's time is stored to the millisecond: at most 1 ms x the price step.
    tolerance = 0.001 * SCALE / 3600.0 * (2.0 - 1.0)
    old_way = market.base * placement.billed_hours()  # the decision's price x hours
    assert expected - old_way > 100 * tolerance  # the doubling matters to the bill
    assert job.cost_usd() == pytest.approx(expected, abs=tolerance)
    report = costs.report(ctx.store, job_id=job.id)
    assert report["jobs"][0]["compute_usd"] == pytest.approx(expected, abs=tolerance)
    assert report["jobs"][0]["placements"][0]["price_changes"] == 1
    status = job_summary(job)
    assert status["derived"]["cost_usd"] == pytest.approx(expected, abs=tolerance)
    [billed] = status["derived"]["placement_costs"]
    assert billed["cost_usd"] == pytest.approx(expected, abs=tolerance)
    shown = io.StringIO()
    Console(file=shown, width=200).print(render.placements(status))
    assert f"${billed['cost_usd']:,.4f}" in shown.getvalue()  # status' placements table
    assert abs(billed["cost_usd"] - old_way) > 0.0001
    # ga_money_saved_usd: all-on-demand ($5/h, the offer's on-demand market) minus the bill.
    saved = JobStats(redis_client).totals(utcnow().timestamp()).saved_usd
    assert saved == pytest.approx(5.0 * placement.billed_hours() - expected, abs=tolerance)


def test_above_max_price_the_job_checkpoints_waits_and_resumes(replay_market, redis_client):
    ctx, poll, market = _setup(replay_market, redis_client, HELD)
    job = _stopped_for_max_price(ctx, poll, market, _running(ctx, poll, max_price_usd_per_hour=1.5))
    assert job.state is JobState.CHECKPOINTING
    event = job.events[-1]
    assert event.kind == "max-price" and event.price_usd_per_hour == 2.0
    assert "held offer's spot price $2.00/h is above max_price_usd_per_hour $1.50/h" \
        in event.message
    command = command_for(job, job.placement.attempt)
    assert command.action is AgentAction.STOP and command.reason.startswith("max-price:")
    reconcile_pass(ctx)  # idempotent: no second request, no second event
    assert ctx.store.jobs.get(job.id).version == job.version
    _report(ctx, job, AgentPhase.CHECKPOINTED, checkpoint_id="c1",
            message="daemon asked to stop (max-price: ...)")
    reconcile_pass(ctx)
    job = ctx.store.jobs.get(job.id)
    assert job.state is JobState.MIGRATING and job.last_checkpoint_id == "c1"
    assert job.placements[-1].end_reason is PlacementEnd.MOVED
    reconcile_pass(ctx)  # nothing compliant: spot $2.00 and on-demand $5.00 are above $1.50
    job = ctx.store.jobs.get(job.id)
    assert job.state is JobState.PENDING and job.placement is None
    assert job.waiting_reason.startswith(
        "held offer's spot price $2.00/h is above max_price_usd_per_hour $1.50/h; "
        "waiting for a compliant offer")
    shown = io.StringIO()
    Console(file=shown, width=200).print(render.job_panel(job_summary(job)))
    assert "above max_price_usd_per_hour $1.50/h; waiting for a compliant offer" \
        in shown.getvalue()
    ended = job.placements[-1]
    assert job.cost_usd() == pytest.approx(market.bill(ended.started_at, ended.ended_at),
                                           abs=0.001 * SCALE / 3600.0)
    _sleep_until(market.wall(4.0))  # the price falls to $0.90: compliant again
    poll()
    reconcile_pass(ctx)
    job = ctx.store.jobs.get(job.id)
    assert job.state is JobState.PROVISIONING and job.placement.attempt == 2
    assert job.placement.offer.instance_type == "held"
    assert job.placement.offer.price_usd_per_hour == 0.9
    assert job.waiting_reason is None


def test_above_max_price_the_job_moves_to_a_compliant_offer(replay_market, redis_client):
    ctx, poll, market = _setup(replay_market, redis_client, HELD, ALTERNATIVE)
    job = _stopped_for_max_price(ctx, poll, market, _running(ctx, poll, max_price_usd_per_hour=1.5))
    _report(ctx, job, AgentPhase.CHECKPOINTED, checkpoint_id="c1")
    reconcile_pass(ctx)
    reconcile_pass(ctx)
    job = ctx.store.jobs.get(job.id)
    assert job.state is JobState.PROVISIONING and job.placement.attempt == 2
    assert job.placement.offer.instance_type == "alt"  # $1.40/h, under the max
    assert "looking for a compliant offer" in next(
        e.message for e in job.events if e.state is JobState.MIGRATING)


HOVERING = """
  - {provider: aws, region: r1, zone: r1a, instance_type: held, gpu_model: T4, gpu_count: 1,
     vram_gib: 16, vcpus: 4, memory_gib: 16, spot_price_usd_per_hour: 0.9,
     interruption_risk: 0.05,
     spot_price_series: [{at_hours: 2.0, price: 1.1}, {at_hours: 2.4, price: 0.9}]}
"""


def test_a_price_hovering_at_the_max_does_not_bounce_the_job_back_at_once(replay_market,
                                                                          redis_client):
    """Left for its price, an offer is not taken again for LEFT_OFFER_COOLDOWN_H market hours
    even when its price is back under the max: the job waits, saying until when."""
    from scheduler.timing import LEFT_OFFER_COOLDOWN_H
    ctx, poll, market = _setup(replay_market, redis_client, HOVERING)
    job = _stopped_for_max_price(ctx, poll, market, _running(ctx, poll, max_price_usd_per_hour=1.0))
    _report(ctx, job, AgentPhase.CHECKPOINTED, checkpoint_id="c1")
    reconcile_pass(ctx)
    job = ctx.store.jobs.get(job.id)
    left_at = job.placements[-1].ended_at
    assert job.placements[-1].end_reason is PlacementEnd.MOVED
    assert market.hours(left_at) + LEFT_OFFER_COOLDOWN_H > 2.5  # the test's premise
    _sleep_until(market.wall(2.5))  # $0.90 again, under the max, within the cooldown
    poll()
    reconcile_pass(ctx)
    job = ctx.store.jobs.get(job.id)
    assert job.state is JobState.PENDING and job.placement is None
    assert "not back on aws/r1/r1a/held/spot, left by choice, before" in job.waiting_reason
    _sleep_until(left_at + timedelta(hours=LEFT_OFFER_COOLDOWN_H / SCALE))
    poll()
    reconcile_pass(ctx)
    job = ctx.store.jobs.get(job.id)
    assert job.state is JobState.PROVISIONING and job.placement.offer.instance_type == "held"
    assert job.placement.offer.price_usd_per_hour == 0.9
