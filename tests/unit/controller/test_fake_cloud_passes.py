"""Reconcile passes over a cloud in memory (tests/fakes/compute.py) and the real Redis: the
controller's launch, capacity, notice, describe-failure and leak rules, each in milliseconds."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from core.models import (
    TAG_JOB,
    TAG_OWNER,
    InstanceState,
    Job,
    JobState,
    PlacementEnd,
)
from core.models.agents import AgentPhase, AgentReport
from providers.base import ExactCapacity, LaunchRequest
from providers.errors import CapacityError, TransientError
from scheduler.controller.context import AgentBootstrap, Context, ProviderRegistry
from scheduler.controller.orphans import sweep_orphans
from scheduler.controller.reconcile import reconcile_pass
from scheduler.controller.transitions import client_token
from scheduler.store import Store, keys
from scheduler.store.agents import AgentTokens
from scheduler.timing import (
    INSTANCE_LISTING_GRACE_S,
    OFFER_POLL_S,
    ORPHAN_GRACE_S,
    UNAVAILABLE_OFFER_TTL_S,
)
from tests.factories.offers import offer
from tests.fakes.compute import FakeClock, FakeCompute
from tests.fakes.context import fake_cloud_context, stored_job, submit_job

OWNER = "ga-test"
CHEAP = offer(provider="fake", zone="us-west-2a", price_usd_per_hour=0.9)
NEXT = offer(provider="fake", zone="us-west-2b", price_usd_per_hour=1.0)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def cloud(clock: FakeClock) -> FakeCompute:
    return FakeCompute([CHEAP, NEXT], clock=clock)


@pytest.fixture
def ctx(redis_client, cloud: FakeCompute, clock: FakeClock) -> Context:
    return fake_cloud_context(redis_client, cloud, clock, OWNER)


def _report(ctx: Context, phase: AgentPhase, **fields) -> None:
    job = stored_job(ctx)
    now = ctx.clock()
    ctx.store.agents.save_report(AgentReport(job_id=job.id, attempt=job.placement.attempt,
                                             phase=phase, at=now, received_at=now, **fields))


def _running(ctx: Context, clock: FakeClock) -> Job:
    """A job placed on CHEAP, launched, and reported running by its agent."""
    submit_job(ctx)
    reconcile_pass(ctx)
    _report(ctx, AgentPhase.RUNNING)
    clock.advance(1)
    reconcile_pass(ctx)
    job = stored_job(ctx)
    assert job.state is JobState.RUNNING and job.placement.offer.key == CHEAP.key
    return job


def test_a_launch_whose_reply_was_lost_is_repeated_with_its_token_and_makes_one_instance(
        ctx, cloud, clock):
    submit_job(ctx)
    cloud.fail_next("launch", TransientError("read timeout"), after=True)
    reconcile_pass(ctx)  # placed, launched; the reply never came back
    job = stored_job(ctx)
    assert job.state is JobState.PROVISIONING and job.placement.instance_id is None
    assert len(cloud.instances) == 1

    clock.advance(5)
    reconcile_pass(ctx)
    job = stored_job(ctx)
    [instance] = cloud.instances.values()
    assert job.placement.instance_id == instance.id
    assert instance.client_token == job.placement.client_token == client_token("job-1", 1)
    assert {r.client_token for r in cloud.calls_of("launch")} == {client_token("job-1", 1)}
    assert instance.tags == {TAG_OWNER: OWNER, TAG_JOB: "job-1", "gpu-arbiter:attempt": "1"}


def test_a_capacity_error_marks_the_offer_unavailable_and_the_next_pass_picks_another(
        ctx, cloud, clock):
    submit_job(ctx)
    cloud.fail_next("launch", CapacityError("InsufficientInstanceCapacity", provider="fake"))
    reconcile_pass(ctx)
    job = stored_job(ctx)
    assert job.state is JobState.PENDING and "no capacity" in job.events[-1].message
    assert job.placements[-1].end_reason is PlacementEnd.LAUNCH_FAILED
    assert ctx.store.offers.unavailable() == {CHEAP.key}  # the capacity cache in Redis
    assert cloud.instances == {}

    clock.advance(5)
    reconcile_pass(ctx)
    job = stored_job(ctx)
    assert job.state is JobState.PROVISIONING and job.placement.attempt == 2
    assert [r.offer.key for r in cloud.calls_of("launch")] == [CHEAP.key, NEXT.key]
    [instance] = cloud.instances.values()
    assert instance.offer == NEXT.key and job.placement.instance_id == instance.id


def test_a_preemption_notice_starts_the_migration(ctx, cloud, clock):
    job = _running(ctx, clock)
    notice = cloud.notice(job.placement.instance_id, in_s=120)
    clock.advance(1)
    reconcile_pass(ctx)
    job = stored_job(ctx)
    assert job.state is JobState.CHECKPOINTING
    assert job.events[-1].message.startswith("preemption notice: terminate")
    assert CHEAP.key in ctx.store.offers.unavailable()  # not placed there again for a while

    _report(ctx, AgentPhase.CHECKPOINTED, checkpoint_id="c-1", notice=notice)
    clock.advance(1)
    reconcile_pass(ctx)
    job = stored_job(ctx)
    assert job.state is JobState.MIGRATING and job.last_checkpoint_id == "c-1"
    assert job.placements[-1].end_reason is PlacementEnd.PREEMPTED

    clock.advance(1)
    reconcile_pass(ctx)
    job = stored_job(ctx)
    assert job.state is JobState.PROVISIONING and job.placement.offer.key == NEXT.key
    assert cloud.instances[job.placement.instance_id].client_token == client_token("job-1", 2)


def test_a_failed_describe_is_never_read_as_the_instance_gone(ctx, cloud, clock):
    job = _running(ctx, clock)
    instance_id = job.placement.instance_id
    clock.advance(INSTANCE_LISTING_GRACE_S + 1)  # past the grace a new instance gets
    _report(ctx, AgentPhase.RUNNING)  # the agent is alive
    cloud.forget(instance_id)  # a listing without it would mean "gone" ...
    cloud.fail_next("describe", TransientError("RequestLimitExceeded"))
    reconcile_pass(ctx)  # ... but this pass could not list at all
    job = stored_job(ctx)
    assert job.state is JobState.RUNNING and job.placement.instance_id == instance_id
    assert cloud.calls_of("terminate") == []

    reconcile_pass(ctx)  # the same facts, listed: now it is gone
    job = stored_job(ctx)
    assert job.state is JobState.MIGRATING and f"instance {instance_id} gone" in \
        job.events[-1].message
    assert job.placements[-1].end_reason is PlacementEnd.LOST


def test_orphan_collection_takes_only_our_unclaimed_instances_past_the_grace(ctx, cloud, clock):
    job = _running(ctx, clock)
    old, young = clock() - timedelta(seconds=ORPHAN_GRACE_S + 1), \
        clock() - timedelta(seconds=ORPHAN_GRACE_S - 5)
    ours = {TAG_OWNER: OWNER, TAG_JOB: "gone-job"}
    leak = cloud.plant(CHEAP, "gone-job-1", ours, old)
    cloud.plant(CHEAP, "gone-job-2", ours, young)  # may be a launch whose job is being saved
    cloud.plant(NEXT, "theirs-1", {TAG_OWNER: "someone-else", TAG_JOB: "x"}, old)
    cloud.plant(NEXT, "gone-job-0", ours, old, InstanceState.TERMINATED)
    claimed = cloud.instances[job.placement.instance_id]
    cloud.instances[claimed.id] = claimed.model_copy(update={"launched_at": old})

    assert sweep_orphans(ctx) == [leak.id]
    assert cloud.calls_of("terminate") == [leak.id]
    assert cloud.instances[leak.id].state is InstanceState.TERMINATED
    assert cloud.calls_of("describe")[-1] == {TAG_OWNER: OWNER}


def test_the_fake_launch_is_idempotent_and_reports_errors_like_any_adapter(clock):
    seen = []
    cloud = FakeCompute([CHEAP], clock=clock)
    cloud.report_errors_to(lambda name, op, exc: seen.append((name, op, type(exc).__name__)))
    request = LaunchRequest(offer=CHEAP, client_token="t-1", tags={TAG_OWNER: OWNER})
    first = cloud.launch(request)
    assert cloud.launch(request).id == first.id and len(cloud.instances) == 1
    assert first.state is InstanceState.PENDING and first.launched_at == clock()
    cloud.fail_next("terminate", TransientError("throttled"))
    with pytest.raises(TransientError):
        cloud.terminate(first.id)
    assert seen == [("fake", "terminate", "TransientError")]
    assert cloud.instances[first.id].state is InstanceState.PENDING  # refused: nothing done
    cloud.terminate(first.id)
    cloud.terminate("i-never")  # unknown: quietly done
    assert cloud.instances[first.id].state is InstanceState.TERMINATED


def test_a_notice_only_the_provider_gives_still_ends_the_placement_as_preempted(
        ctx, cloud, clock):
    """A drained fleet host: the instance carries the notice, the agent (which cannot read
    one there) only reports that it checkpointed after a SIGTERM."""
    job = _running(ctx, clock)
    cloud.notice(job.placement.instance_id, in_s=30)
    reconcile_pass(ctx)
    _report(ctx, AgentPhase.CHECKPOINTED, checkpoint_id="c-1",
            message="agent received SIGTERM")
    clock.advance(1)
    reconcile_pass(ctx)
    job = stored_job(ctx)
    assert job.state is JobState.MIGRATING
    assert job.placements[-1].end_reason is PlacementEnd.PREEMPTED
    assert "after the preemption notice" in job.events[-1].message


class _OwnedMachines(FakeCompute, ExactCapacity):
    """Lists exactly the slots it can launch now, like the SSH fleet."""


def test_a_refused_launch_on_exact_capacity_is_skipped_only_until_the_next_offer_poll(
        redis_client, clock):
    owned = _OwnedMachines([CHEAP, NEXT], clock=clock)
    store = Store.over(redis_client)
    store.offers.replace_offers(owned.name, [o.model_copy(update={"observed_at": clock()})
                                             for o in owned.offers])
    ctx = Context(store=store, providers=ProviderRegistry([owned]),
                  bootstrap=AgentBootstrap(api_url="http://127.0.0.1:9",
                                           store_url="file:///nowhere", tokens=AgentTokens(b"s")),
                  owner=OWNER, clock=clock)
    submit_job(ctx)
    owned.fail_next("launch", CapacityError("slot taken", provider="fake"))
    reconcile_pass(ctx)
    job = stored_job(ctx)
    # The stored offers are a poll old: the refused slot is not tried again every pass ...
    assert job.state is JobState.PENDING and job.events[-1].message.endswith(
        f"offer skipped for {OFFER_POLL_S:.0f} s")
    assert ctx.store.offers.unavailable() == {CHEAP.key}
    clock.advance(1)
    reconcile_pass(ctx)
    assert stored_job(ctx).placement.offer.key == NEXT.key
    # ... but only until the next one (a cloud's offer would be skipped for minutes).
    [(_, expiry_ms)] = redis_client.zrange(keys.UNAVAILABLE_OFFERS, 0, -1, withscores=True)
    assert expiry_ms / 1000 - time.time() <= OFFER_POLL_S < UNAVAILABLE_OFFER_TTL_S
