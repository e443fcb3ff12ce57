"""Gangs (a job on N instances of one offer) through real reconcile passes: a cloud in memory
(tests/fakes/compute.py), the real Redis, agent reports saved per rank as the API saves them.
"""

from __future__ import annotations

import pytest

from core.models import (
    TAG_ATTEMPT,
    TAG_JOB,
    TAG_OWNER,
    TAG_RANK,
    InstanceState,
    Job,
    JobState,
    PlacementEnd,
    StopKind,
    StopRequest,
)
from core.models.agents import AgentPhase, AgentReport
from core.models.placements import node_token
from providers.base import LaunchRequest
from providers.errors import CapacityError, TransientError
from scheduler.controller.context import Context
from scheduler.controller.placing import place
from scheduler.controller.reconcile import reconcile_pass
from scheduler.controller.transitions import client_token
from scheduler.timing import INSTANCE_LISTING_GRACE_S
from tests.factories.offers import offer
from tests.fakes.compute import FakeClock, FakeCompute
from tests.fakes.context import fake_cloud_context, stored_job, submit_job

OWNER = "ga-test"
START_TIMEOUT_S = 300.0
CHEAP = offer(provider="fake", zone="us-west-2a", price_usd_per_hour=0.9)
NEXT = offer(provider="fake", zone="us-west-2b", price_usd_per_hour=1.0)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


class GangCloud(FakeCompute):
    """:class:`FakeCompute` whose launches of one rank (by its launch tag) can be made to fail:
    ``failing[rank] = (error, after)`` fails every launch of that rank, before the instance
    is made or (``after``) only on the way back."""

    def reset(self) -> None:
        super().reset()
        self.failing: dict[int, tuple[Exception, bool]] = {}

    def _launch(self, request: LaunchRequest):
        rank = request.tags.get(TAG_RANK)
        error, after = self.failing.get(int(rank), (None, False)) if rank else (None, False)
        if error is not None and not after:
            raise error
        instance = super()._launch(request)
        if error is not None:
            raise error
        return instance


@pytest.fixture
def cloud(clock: FakeClock) -> GangCloud:
    return GangCloud([CHEAP, NEXT], clock=clock, agent_start_timeout_s=START_TIMEOUT_S)


@pytest.fixture
def ctx(redis_client, cloud: FakeCompute, clock: FakeClock) -> Context:
    return fake_cloud_context(redis_client, cloud, clock, OWNER)


def _submit(ctx: Context, nodes: int = 2) -> Job:
    return submit_job(ctx, resources={"nodes": nodes})


def _report(ctx: Context, rank: int, phase: AgentPhase, **fields) -> None:
    job = stored_job(ctx)
    now = ctx.clock()
    ctx.store.agents.save_report(AgentReport(
        job_id=job.id, attempt=job.placement.attempt, phase=phase, at=now, received_at=now,
        rank=rank, address=f"10.0.0.{rank + 1}", master_port=29500 if rank == 0 else None,
        **fields))


def _live(cloud: FakeCompute) -> list[str]:
    return sorted(i.id for i in cloud.instances.values() if not i.state.is_gone())


def _pass(ctx: Context) -> Job:
    """One reconcile pass, then the job as it left it."""
    reconcile_pass(ctx)
    return stored_job(ctx)


def _placed_again_on_next(ctx: Context, cloud: FakeCompute, clock: FakeClock,
                          after_s: float = 1) -> None:
    """``after_s`` later, a pass places attempt 2 of the whole gang on NEXT."""
    clock.advance(after_s)
    job = _pass(ctx)
    assert job.placement.attempt == 2 and job.placement.offer.key == NEXT.key
    assert job.placement.instance_id is not None and len(_live(cloud)) == 2


def _running(ctx: Context, clock: FakeClock, nodes: int = 2) -> Job:
    """A gang placed on CHEAP, every node launched and reported running."""
    _submit(ctx, nodes)
    reconcile_pass(ctx)
    for rank in range(nodes):
        _report(ctx, rank, AgentPhase.RUNNING)
    clock.advance(1)
    job = _pass(ctx)
    assert job.state is JobState.RUNNING, job.events[-1].message
    return job


def test_a_gang_is_placed_with_one_node_per_rank_and_launched_as_that_many_instances(
        ctx, cloud, clock):
    _submit(ctx, nodes=3)
    job = _pass(ctx)
    placement = job.placement
    token = client_token("job-1", 1)
    assert [(n.rank, n.client_token) for n in placement.nodes] == \
        [(r, node_token(token, r)) for r in range(3)]
    assert job.state is JobState.PROVISIONING
    assert "launched 3 instances" in job.events[-1].message
    by_token = {i.client_token: i for i in cloud.instances.values()}
    assert sorted(by_token) == sorted(n.client_token for n in placement.nodes)
    for node in placement.nodes:
        instance = by_token[node.client_token]
        assert node.instance_id == instance.id and node.launched_at == instance.launched_at
        assert instance.offer == CHEAP.key
        assert instance.tags == {TAG_OWNER: OWNER, TAG_JOB: "job-1", TAG_ATTEMPT: "1",
                                 TAG_RANK: str(node.rank)}
        env = cloud.requests[node.client_token].agent_env
        assert env["GA_NODE_RANK"] == str(node.rank) and env["GA_NNODES"] == "3"
    assert placement.instance_id == placement.nodes[0].instance_id
    assert placement.started_at == min(n.launched_at for n in placement.nodes)

    # Running only once every rank says so.
    _report(ctx, 0, AgentPhase.RUNNING)
    _report(ctx, 1, AgentPhase.RUNNING)
    _report(ctx, 2, AgentPhase.RESTORING)
    clock.advance(1)
    reconcile_pass(ctx)
    assert stored_job(ctx).state is JobState.PROVISIONING
    _report(ctx, 2, AgentPhase.RUNNING)
    job = _pass(ctx)
    assert job.state is JobState.RUNNING and "running on 3 instances" in job.events[-1].message


def test_a_one_node_job_has_no_gang_nodes(ctx, cloud):
    _submit(ctx, nodes=1)
    job = _pass(ctx)
    assert job.placement.nodes == [] and job.placement.instance_id is not None
    [instance] = cloud.instances.values()
    assert TAG_RANK not in instance.tags
    assert "GA_NODE_RANK" not in cloud.requests[instance.client_token].agent_env


def test_a_crash_after_one_node_launched_never_launches_that_rank_twice(ctx, cloud, clock):
    job = place(ctx, _submit(ctx))  # placed, and the daemon died right after saving it ...
    node0 = job.placement.nodes[0]
    # ... its launch of rank 0 had reached the cloud.
    first = cloud.launch(LaunchRequest(offer=job.placement.offer, client_token=node0.client_token,
                                       tags={TAG_OWNER: OWNER, TAG_JOB: job.id}))
    clock.advance(5)
    job = _pass(ctx)
    assert job.placement.nodes[0].instance_id == first.id
    assert len(cloud.instances) == 2
    assert [r.client_token for r in cloud.calls_of("launch")] == \
        [node0.client_token, job.placement.nodes[1].client_token]


def test_a_lost_reply_keeps_the_launched_nodes_and_the_next_pass_finishes_the_gang(
        ctx, cloud, clock):
    _submit(ctx)
    cloud.failing[1] = (TransientError("read timeout"), True)  # made, the answer lost
    job = _pass(ctx)
    assert job.placement.instance_id is None  # still launching
    assert job.placement.nodes[0].instance_id is not None  # saved while waiting
    assert job.placement.nodes[1].instance_id is None and len(cloud.instances) == 2
    assert "rank 1 failed temporarily" in job.waiting_reason

    del cloud.failing[1]
    clock.advance(5)
    reconcile_pass(ctx)  # rank 1 is found by its client token in the pass's describe
    job = stored_job(ctx)
    assert job.placement.instance_id == job.placement.nodes[0].instance_id
    assert len(cloud.instances) == 2
    assert [r.client_token for r in cloud.calls_of("launch")] == \
        [n.client_token for n in job.placement.nodes]


def test_a_refusal_on_rank_1_terminates_rank_0_and_skips_the_offer(ctx, cloud, clock):
    _submit(ctx)
    cloud.failing[1] = (CapacityError("InsufficientInstanceCapacity", provider="fake"), False)
    job = _pass(ctx)
    assert job.state is JobState.PENDING and job.placement is None
    assert job.placements[-1].end_reason is PlacementEnd.LAUNCH_FAILED
    message = job.events[-1].message
    assert "refused on rank 1" in message and "no capacity" in message
    assert "1 instance terminated" in message
    assert _live(cloud) == [] and len(cloud.instances) == 1
    assert ctx.store.offers.unavailable() == {CHEAP.key}
    assert job.placements[-1].billed_nodes() == 1  # rank 0 ran, and is billed

    del cloud.failing[1]
    _placed_again_on_next(ctx, cloud, clock, after_s=5)


def test_a_gang_not_running_within_the_start_timeout_is_terminated_and_placed_again(
        ctx, cloud, clock):
    _submit(ctx)
    reconcile_pass(ctx)
    _report(ctx, 0, AgentPhase.RUNNING)  # rank 1 never starts
    clock.advance(START_TIMEOUT_S - 10)
    _report(ctx, 0, AgentPhase.RUNNING)
    reconcile_pass(ctx)
    assert stored_job(ctx).state is JobState.PROVISIONING
    clock.advance(20)
    _report(ctx, 0, AgentPhase.RUNNING)
    job = _pass(ctx)
    assert job.state is JobState.PENDING
    assert job.placements[-1].end_reason is PlacementEnd.LAUNCH_FAILED
    assert job.events[-1].message.startswith(
        "gang incomplete: rank(s) 1 not running within 300 s; all 2 instances terminated")
    assert _live(cloud) == []
    assert CHEAP.key in ctx.store.offers.unavailable()
    assert job.lost_streak == 0
    _placed_again_on_next(ctx, cloud, clock)


def test_a_gang_still_launching_past_the_start_timeout_is_given_up(ctx, cloud, clock):
    _submit(ctx)
    cloud.failing[1] = (TransientError("throttled"), False)
    job = _pass(ctx)
    assert job.placement.nodes[0].instance_id is not None  # kept while waiting
    assert "rank 1 failed temporarily" in job.waiting_reason
    clock.advance(START_TIMEOUT_S + 1)
    job = _pass(ctx)
    assert job.state is JobState.PENDING and "rank(s) 1 not launched" in job.events[-1].message
    assert _live(cloud) == []


def test_a_notice_on_rank_1_stops_every_node_and_rank_0s_checkpoint_migrates_the_gang(
        ctx, cloud, clock):
    job = _running(ctx, clock)
    rank1 = job.placement.nodes[1].instance_id
    cloud.notice(rank1, in_s=120)
    clock.advance(1)
    job = _pass(ctx)
    assert job.state is JobState.CHECKPOINTING
    stop = job.stop_request
    assert stop is not None and stop.kind is StopKind.PREEMPTION and stop.attempt == 1
    assert f"rank 1 (instance {rank1})" in job.events[-1].message
    assert CHEAP.key in ctx.store.offers.unavailable()

    # rank 1 is reclaimed meanwhile and its agent goes quiet: rank 0 still commits
    _report(ctx, 1, AgentPhase.CHECKPOINTED)
    cloud.set_state(rank1, InstanceState.TERMINATED, "preempted")
    clock.advance(90)
    _report(ctx, 0, AgentPhase.CHECKPOINTING)
    reconcile_pass(ctx)
    assert stored_job(ctx).state is JobState.CHECKPOINTING
    _report(ctx, 0, AgentPhase.CHECKPOINTED, checkpoint_id="c1")
    job = _pass(ctx)
    assert job.state is JobState.MIGRATING and job.last_checkpoint_id == "c1"
    assert job.placements[-1].end_reason is PlacementEnd.PREEMPTED
    assert job.stop_request is None
    assert _live(cloud) == []
    _placed_again_on_next(ctx, cloud, clock)


def test_a_lost_node_terminates_every_node_and_migrates(ctx, cloud, clock):
    job = _running(ctx, clock)
    rank1 = job.placement.nodes[1].instance_id
    cloud.forget(rank1)  # the cloud no longer lists it
    clock.advance(INSTANCE_LISTING_GRACE_S)
    _report(ctx, 0, AgentPhase.RUNNING)
    _report(ctx, 1, AgentPhase.RUNNING)
    job = _pass(ctx)
    assert job.state is JobState.MIGRATING
    assert job.placements[-1].end_reason is PlacementEnd.LOST
    assert f"rank 1 (instance {rank1}) gone (no longer reported)" in job.events[-1].message
    assert _live(cloud) == []


def test_a_silent_rank_loses_the_gang(ctx, cloud, clock):
    job = _running(ctx, clock)
    clock.advance(ctx.agent_lost_after_s + 1)
    _report(ctx, 0, AgentPhase.RUNNING)
    job = _pass(ctx)
    assert job.state is JobState.MIGRATING
    assert "rank 1's agent" in job.events[-1].message and "silent" in job.events[-1].message
    assert _live(cloud) == []


def test_rank_0s_success_ends_the_job_and_terminates_every_node(ctx, cloud, clock):
    _running(ctx, clock)
    clock.advance(1)
    _report(ctx, 1, AgentPhase.SUCCEEDED, exit_code=0)
    reconcile_pass(ctx)
    assert stored_job(ctx).state is JobState.RUNNING  # rank 0 decides
    _report(ctx, 0, AgentPhase.SUCCEEDED, exit_code=0, checkpoint_id="final")
    job = _pass(ctx)
    assert job.state is JobState.SUCCEEDED
    assert job.placements[-1].end_reason is PlacementEnd.SUCCEEDED
    assert _live(cloud) == []


def test_a_failed_rank_fails_the_attempt_with_its_exit_code(ctx, cloud, clock):
    _running(ctx, clock)
    clock.advance(1)
    _report(ctx, 1, AgentPhase.FAILED, exit_code=3)
    job = _pass(ctx)
    assert job.failures == 1 and job.command_failure.exit_code == 3
    assert job.events[-1].message.startswith("rank 1: command exited 3")
    assert job.placements[-1].end_reason is PlacementEnd.FAILED
    assert _live(cloud) == []


def test_a_two_node_placement_costs_twice_one(ctx, cloud, clock):
    job = _running(ctx, clock)
    gang = job.placement
    one = gang.model_copy(update={"nodes": []})
    now = clock.advance(3600)
    assert gang.billed_nodes() == 2
    assert gang.cost_usd(now) == pytest.approx(2 * one.cost_usd(now))
    assert one.cost_usd(now) > 0


def test_a_move_stop_on_a_gang_ends_with_rank_0s_checkpoint(ctx, cloud, clock):
    job = _running(ctx, clock)
    job.stop_request = StopRequest(kind=StopKind.MOVE, reason="cheaper elsewhere", attempt=1)
    job.record(JobState.CHECKPOINTING, "moving", at=clock())
    ctx.store.jobs.save(job)
    clock.advance(1)
    _report(ctx, 1, AgentPhase.CHECKPOINTED)
    _report(ctx, 0, AgentPhase.CHECKPOINTING)
    reconcile_pass(ctx)
    assert stored_job(ctx).state is JobState.CHECKPOINTING
    _report(ctx, 0, AgentPhase.CHECKPOINTED, checkpoint_id="c2")
    job = _pass(ctx)
    assert job.state is JobState.MIGRATING
    assert job.placements[-1].end_reason is PlacementEnd.MOVED
    assert _live(cloud) == []


def test_a_cancel_while_the_gang_launches_terminates_every_node_that_reached_the_cloud(
        ctx, cloud, clock):
    _submit(ctx)
    cloud.failing[1] = (TransientError("read timeout"), True)
    reconcile_pass(ctx)
    assert len(_live(cloud)) == 2 and stored_job(ctx).placement.nodes[1].instance_id is None
    from scheduler.services.jobs import cancel
    cancel(ctx.store, "job-1")
    clock.advance(1)
    job = _pass(ctx)
    assert job.state is JobState.CANCELLED and "cancelled while launching" in \
        job.events[-1].message
    assert _live(cloud) == []


def test_the_orphan_sweep_leaves_a_running_gangs_nodes_alone(ctx, cloud, clock):
    from scheduler.controller.orphans import sweep_orphans
    from scheduler.timing import ORPHAN_GRACE_S

    job = _running(ctx, clock)
    clock.advance(ORPHAN_GRACE_S + 60)
    assert sweep_orphans(ctx) == []
    assert _live(cloud) == sorted(job.placement.instance_ids())


def test_a_node_that_stops_on_its_own_stops_the_gang_and_the_gang_moves(ctx, cloud, clock):
    job = _running(ctx, clock)
    rank1 = job.placement.nodes[1].instance_id
    clock.advance(1)
    # Its agent got SIGTERM (its machine shutting down, no spot notice): it stopped the
    # command and reported, while its instance still runs.
    _report(ctx, 0, AgentPhase.RUNNING)
    _report(ctx, 1, AgentPhase.CHECKPOINTED, exit_code=143,
            message="agent received SIGTERM")
    job = _pass(ctx)
    assert job.state is JobState.CHECKPOINTING, job.events[-1].message
    assert f"rank 1 (instance {rank1}) stopped on its own (agent received SIGTERM)" \
        in job.events[-1].message
    assert job.stop_request is not None and job.stop_request.kind is StopKind.MOVE
    assert len(_live(cloud)) == 2  # rank 0 still has its checkpoint to commit
    _report(ctx, 0, AgentPhase.CHECKPOINTED, checkpoint_id="c1")
    job = _pass(ctx)
    assert job.state is JobState.MIGRATING and job.last_checkpoint_id == "c1"
    assert job.placements[-1].end_reason is PlacementEnd.MOVED
    assert _live(cloud) == []
