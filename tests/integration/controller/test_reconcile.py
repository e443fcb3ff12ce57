"""Reconcile steps against a real Redis and a real replay cloud process (stand-in agents that
only sleep; agent reports are written as the API would write them)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from core.models import TAG_JOB, TAG_OWNER, Job, JobState, Market, utcnow
from core.models.agents import AgentPhase, AgentReport
from core.models.instances import PreemptionNotice
from providers.base import LaunchRequest
from scheduler.controller.orphans import sweep_orphans
from scheduler.controller.reconcile import reconcile_pass
from scheduler.timing import ORPHAN_GRACE_S
from tests.factories.jobs import spec
from tests.integration.controller.conftest import controller_context

MARKET = """
name: ctest
time_scale: 60
notice_seconds: 2
offers:
  - {provider: aws, region: r1, zone: r1a, instance_type: gone, gpu_model: T4, gpu_count: 1,
     vram_gib: 16, vcpus: 4, memory_gib: 16, spot_price_usd_per_hour: 0.10,
     availability_trace: gone.json}
  - {provider: aws, region: r1, zone: r1b, instance_type: steady, gpu_model: T4, gpu_count: 1,
     vram_gib: 16, vcpus: 4, memory_gib: 16, on_demand_price_usd_per_hour: 0.5,
     spot_price_usd_per_hour: 0.2}
"""


@pytest.fixture
def provider(replay_market):
    return replay_market(MARKET, {"gone.json": '{"metadata": {"gap_seconds": 60}, "data": [0]}'})


@pytest.fixture
def ctx(redis_client, provider):
    return controller_context(redis_client, provider)


def _submit(ctx, **overrides) -> Job:
    now = utcnow()
    job = Job(id="job-1", spec=spec(**overrides), created_at=now, updated_at=now)
    job.record(JobState.PENDING, "submitted")
    return ctx.store.jobs.create(job)


def _all_offers_including_unavailable(ctx, provider):
    """The store as a stale poll left it: the never-available spot offer still listed."""
    live = provider.list_offers()
    gone = live[0].model_copy(update={"zone": "r1a", "instance_type": "gone",
                                      "price_usd_per_hour": 0.10, "market": Market.SPOT})
    ctx.store.offers.replace_offers("aws", live + [gone])


def test_capacity_error_marks_the_offer_and_places_elsewhere(ctx, provider):
    _all_offers_including_unavailable(ctx, provider)
    job = _submit(ctx)
    reconcile_pass(ctx)
    job = ctx.store.jobs.get(job.id)
    assert job.state is JobState.PENDING
    assert "no capacity" in job.events[-1].message
    assert {k.instance_type for k in ctx.store.offers.unavailable()} == {"gone"}
    reconcile_pass(ctx)
    job = ctx.store.jobs.get(job.id)
    assert job.state is JobState.PROVISIONING
    assert job.placement.offer.instance_type == "steady" and job.placement.attempt == 2
    instances = provider.describe({TAG_JOB: job.id})
    assert [i.id for i in instances] == [job.placement.instance_id]


def test_launch_repeated_after_a_crash_makes_one_instance(ctx, provider):
    ctx.store.offers.replace_offers("aws", provider.list_offers())
    job = _submit(ctx)
    # Place only (as if the daemon died right after saving the placement) ...
    from scheduler.controller.placing import place
    job = place(ctx, job)
    # ... and the launch reached the cloud before the crash, but its answer was lost.
    first = provider.launch(LaunchRequest(offer=job.placement.offer,
                                          client_token=job.placement.client_token,
                                          tags={TAG_OWNER: ctx.owner, TAG_JOB: job.id}))
    reconcile_pass(ctx)
    job = ctx.store.jobs.get(job.id)
    assert job.placement.instance_id == first.id
    assert len(provider.describe({TAG_JOB: job.id})) == 1


def test_agent_reports_drive_running_notice_and_migration(ctx, provider):
    ctx.store.offers.replace_offers("aws", provider.list_offers())
    job = _submit(ctx)
    reconcile_pass(ctx)
    job = ctx.store.jobs.get(job.id)
    assert job.state is JobState.PROVISIONING
    report = AgentReport(job_id=job.id, attempt=1, phase=AgentPhase.RUNNING, at=utcnow())
    ctx.store.agents.save_report(report)
    reconcile_pass(ctx)
    assert ctx.store.jobs.get(job.id).state is JobState.RUNNING
    notice = PreemptionNotice(action_at=utcnow() + timedelta(seconds=120))
    ctx.store.agents.save_report(report.model_copy(update={
        "phase": AgentPhase.CHECKPOINTING, "notice": notice, "at": utcnow()}))
    reconcile_pass(ctx)
    job = ctx.store.jobs.get(job.id)
    assert job.state is JobState.CHECKPOINTING
    assert job.placement.offer.key in ctx.store.offers.unavailable()
    ctx.store.agents.save_report(report.model_copy(update={
        "phase": AgentPhase.CHECKPOINTED, "notice": notice, "checkpoint_id": "c1", "at": utcnow()}))
    reconcile_pass(ctx)
    job = ctx.store.jobs.get(job.id)
    # One step per pass: the old instance is terminated and the job is migrating; the next
    # pass places it on the remaining offer.
    assert job.state is JobState.MIGRATING and job.last_checkpoint_id == "c1"
    assert job.placements[-1].end_reason == "preempted"
    assert ctx.store.offers.preemptions() == {job.placements[-1].offer.key: 1}
    preempted, hours = ctx.store.offers.spot_exposure()[job.placements[-1].offer.key.series()]
    assert preempted == 1 and hours > 0
    # The next poll blends that preemption into the offer's advertised risk.
    from scheduler.poller.offers import OfferPoller
    OfferPoller(ctx.store, provider)()
    risks = {o.key: o.interruption_risk for o in ctx.store.offers.all_offers()}
    assert risks[job.placements[-1].offer.key] > 0.5
    reconcile_pass(ctx)
    job = ctx.store.jobs.get(job.id)
    assert job.state is JobState.PROVISIONING and job.placement.attempt == 2
    assert job.placement.offer.key != job.placements[-1].offer.key
    # A late heartbeat of the old attempt cannot hide its final report.
    ctx.store.agents.save_report(report.model_copy(update={"at": utcnow()}))
    assert ctx.store.agents.last_report(job.id, 1).phase is AgentPhase.CHECKPOINTED


def test_cancel_before_launch(ctx, provider):
    ctx.store.offers.replace_offers("aws", provider.list_offers())
    job = _submit(ctx, resources={"gpu_count": 8})  # nothing fits: stays pending
    reconcile_pass(ctx)
    job = ctx.store.jobs.get(job.id)
    assert job.state is JobState.PENDING and "gpu_count rejects" in job.waiting_reason
    from scheduler.services.jobs import cancel
    cancel(ctx.store, job.id)
    reconcile_pass(ctx)
    assert ctx.store.jobs.get(job.id).state is JobState.CANCELLED
    assert ctx.store.jobs.active_ids() == []


def test_orphans_are_terminated_after_the_grace_period_and_claimed_ones_kept(ctx, provider):
    ctx.store.offers.replace_offers("aws", provider.list_offers())
    job = _submit(ctx)
    reconcile_pass(ctx)
    claimed = ctx.store.jobs.get(job.id).placement.instance_id
    steady = next(o for o in provider.list_offers() if o.market.value == "spot")
    orphan = provider.launch(LaunchRequest(offer=steady, client_token="leaked-1",
                                           tags={TAG_OWNER: ctx.owner, TAG_JOB: "gone-job"}))
    foreign = provider.launch(LaunchRequest(offer=steady, client_token="not-ours",
                                            tags={TAG_OWNER: "someone-else"}))
    assert sweep_orphans(ctx) == []  # younger than the grace period
    later = utcnow() + timedelta(seconds=ORPHAN_GRACE_S + 1)
    ctx.clock = lambda: later
    assert sweep_orphans(ctx) == [orphan.id]
    states = {i.id: i.state.value for i in provider.describe()}
    assert states[claimed] == "running" and states[foreign.id] == "running"
    assert states[orphan.id] in ("shutting-down", "terminated")


def _running(ctx, provider) -> Job:
    ctx.store.offers.replace_offers("aws", provider.list_offers())
    job = _submit(ctx)
    reconcile_pass(ctx)
    ctx.store.agents.save_report(AgentReport(job_id=job.id, attempt=1, phase=AgentPhase.RUNNING,
                                             at=utcnow(), received_at=utcnow()))
    reconcile_pass(ctx)
    job = ctx.store.jobs.get(job.id)
    assert job.state is JobState.RUNNING
    return job


def test_liveness_ignores_the_agent_clock(ctx, provider):
    job = _running(ctx, provider)
    # A report claiming to come from the far future, received 61 s ago, is 61 s old.
    ctx.store.agents.save_report(AgentReport(
        job_id=job.id, attempt=1, phase=AgentPhase.RUNNING,
        at=utcnow() + timedelta(days=365), received_at=utcnow() - timedelta(seconds=61)))
    reconcile_pass(ctx)
    job = ctx.store.jobs.get(job.id)
    assert job.state is JobState.MIGRATING and "agent silent" in job.events[-1].message


def test_agent_failures_are_retried_then_given_up_without_progress(ctx, provider):
    job = _running(ctx, provider)
    for attempt in (1, 2, 3):
        ctx.store.agents.save_report(AgentReport(
            job_id=job.id, attempt=attempt, phase=AgentPhase.FAILED, exit_code=None,
            message="command exited 0 but checkpoint upload failed", at=utcnow(),
            received_at=utcnow()))
        reconcile_pass(ctx)
        job = ctx.store.jobs.get(job.id)
        if attempt < 3:
            assert job.state is JobState.MIGRATING, job.events[-1].message
            assert job.failures == 0  # the command did not fail; the agent did
            reconcile_pass(ctx)  # placed and launched again
            assert ctx.store.jobs.get(job.id).placement.attempt == attempt + 1
    assert job.state is JobState.FAILED
    assert "3 attempts lost in a row" in job.events[-1].message
    assert all(i.state.is_gone() for i in provider.describe({TAG_JOB: job.id}))


def test_offers_of_display_only_or_unconfigured_sources_are_never_placed_on(ctx, provider):
    live = provider.list_offers()
    ctx.store.offers.replace_offers("aws", live)
    catalog_only = live[0].model_copy(update={"provider": "gcp-catalog", "price_usd_per_hour": 0.01})
    ctx.store.offers.replace_offers("gcp-catalog", [catalog_only])
    job = _submit(ctx)
    reconcile_pass(ctx)
    job = ctx.store.jobs.get(job.id)
    assert job.placement.offer.provider == "aws"


def test_silence_during_this_daemons_outage_is_not_the_agents(ctx, provider):
    """A daemon down for minutes restarts: its agents' last reports are old, but they could not
    report while it was down, so each gets AGENT_LOST_AFTER_S from when the API listens again."""
    job = _running(ctx, provider)
    ctx.store.agents.save_report(AgentReport(
        job_id=job.id, attempt=1, phase=AgentPhase.RUNNING,
        at=utcnow() - timedelta(seconds=180), received_at=utcnow() - timedelta(seconds=180)))
    ctx.listening_since = utcnow() - timedelta(seconds=2)
    reconcile_pass(ctx)
    assert ctx.store.jobs.get(job.id).state is JobState.RUNNING
    # Still silent a full AGENT_LOST_AFTER_S after the API came back: lost.
    ctx.listening_since = utcnow() - timedelta(seconds=61)
    reconcile_pass(ctx)
    job = ctx.store.jobs.get(job.id)
    assert job.state is JobState.MIGRATING and "agent silent" in job.events[-1].message


def _without_providers(ctx):
    """The same store under a daemon restarted with no provider configured."""
    from dataclasses import replace

    from scheduler.controller.context import ProviderRegistry
    return replace(ctx, providers=ProviderRegistry([]))


def test_a_placement_on_a_provider_no_longer_configured_waits_once_then_cancels(ctx, provider):
    job = _running(ctx, provider)
    bare = _without_providers(ctx)
    for _ in range(3):
        reconcile_pass(bare)
    job = ctx.store.jobs.get(job.id)
    waits = [e.message for e in job.events if "can be neither observed nor terminated" in e.message]
    assert job.state is JobState.RUNNING and len(waits) == 1
    assert "no provider configured for 'aws'" in waits[0] and job.placement.instance_id in waits[0]
    job.cancel_requested = True
    ctx.store.jobs.save(job)
    reconcile_pass(bare)
    job = ctx.store.jobs.get(job.id)
    assert job.state is JobState.CANCELLED and "terminate it at aws" in job.events[-1].message
    assert job.placements[-1].end_reason.value == "cancelled"
    # The instance was left alone: a daemon that cannot see it must not claim it is gone.
    assert not provider.describe({TAG_JOB: job.id})[0].state.is_gone()


def test_an_unlaunched_placement_on_a_provider_no_longer_configured_is_placed_again(ctx, provider):
    from scheduler.controller.placing import place
    ctx.store.offers.replace_offers("aws", provider.list_offers())
    job = place(ctx, _submit(ctx))
    assert job.placement is not None and job.placement.instance_id is None
    reconcile_pass(_without_providers(ctx))
    job = ctx.store.jobs.get(job.id)
    assert job.state is JobState.PENDING and "placing the job again" in job.events[-1].message
    assert job.placement is None and job.placements[-1].end_reason.value == "launch-failed"
