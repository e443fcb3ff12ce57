"""Step for a job with a live instance: compare what the agent and the provider report with
what the job record says, and take the one next step.

Observed facts, in the order they win:
1. the agent's final report (succeeded / failed / checkpointed),
2. a cancel request the agent did not act on,
3. a preemption notice (from the provider's describe or the agent),
4. the instance gone (terminated by the provider, or silent for too long),
5. the agent running (provisioning → running), a newer checkpoint, the progress it reports
   (:mod:`~scheduler.controller.learning`), GPUs it wastes (:mod:`~scheduler.controller.waste`).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from core.models import (
    Job,
    JobState,
    PlacementEnd,
    PreemptionNotice,
    StopKind,
    StopRequest,
)
from core.models.agents import AgentPhase, AgentReport
from core.models.jobs import FAILURE_LOG_LINES, CommandFailure
from providers.errors import ProviderError
from scheduler.controller import gang
from scheduler.controller.context import Context
from scheduler.controller.learning import learn
from scheduler.controller.policy_inputs import offer_speed
from scheduler.controller.transitions import (
    end_placement,
    finish,
    save,
    skip_offer,
    terminate_current,
    wait,
)
from scheduler.controller.waste import check_waste, track
from scheduler.timing import (
    CHECKPOINT_SYNC_TIMEOUT_S,
    INSTANCE_LISTING_GRACE_S,
)

# Attempts lost in a row (agent silent, agent error, instance gone without a notice) with no
# new checkpoint in between before the job is failed: something about the job or the market is
# broken, and relaunching forever would only spend money.
MAX_LOST_STREAK = 3


def observe(ctx: Context, job: Job) -> Job | None:
    placement = job.placement
    assert placement is not None and placement.instance_id is not None
    seen = gang.view(ctx, job) if placement.nodes else _one_node(ctx, job)
    report = seen.head
    learned = learn(job, report)
    track(ctx, job, report)
    new_checkpoint = (report is not None and report.checkpoint_id is not None
                      and report.checkpoint_id != job.last_checkpoint_id)
    if new_checkpoint:
        job.last_checkpoint_id = report.checkpoint_id
        job.lost_streak = 0
        # Progress saved ≈ the hours this attempt ran until its checkpoint was seen, on top of
        # what it resumed from (an estimate: it counts boot and restore, and up to one pass),
        # in reference-hours: hours on this offer × its speed (1 without a speed model).
        job.progress_h = max(job.progress_h, placement.progress_at_start_h
                             + placement.billed_hours(ctx.clock()) * offer_speed(job))
    notice = seen.notice
    if seen.final is not None:
        return _agent_finished(ctx, job, seen.final, notice, seen.final_node)
    if job.cancel_requested and _agent_silent(ctx, report, placement.started_at):
        return finish(ctx, job, PlacementEnd.CANCELLED, JobState.CANCELLED,
                      "cancelled (the agent did not answer; instance terminated)")
    if notice is not None and job.state is not JobState.CHECKPOINTING:
        return _noticed(ctx, job, notice, seen.noticed_node)
    if placement.nodes and seen.left is not None:
        return _node_left(ctx, job, seen.left)
    if seen.gone is not None:
        what, preempted = seen.gone
        # A reclaim seen late (daemon down) is billed until the notice's action time only.
        return _lost(ctx, job, what,
                     PlacementEnd.PREEMPTED if notice is not None or preempted
                     else PlacementEnd.LOST,
                     billed_until=notice.action_at if notice else None)
    if job.state is JobState.CHECKPOINTING and notice is not None:
        deadline = notice.action_at + timedelta(seconds=CHECKPOINT_SYNC_TIMEOUT_S)
        if ctx.clock() > deadline:
            return _lost(ctx, job, "no checkpoint reported after the notice", PlacementEnd.PREEMPTED)
    # A cloud VM boots and installs the agent for minutes: each adapter says how long.
    started = _silent_since(ctx, placement.started_at or placement.decided_at)
    timeout_s = ctx.providers.compute(placement.offer.provider).agent_start_timeout_s
    if placement.nodes and job.state is JobState.PROVISIONING and seen.not_running \
            and (ctx.clock() - started).total_seconds() > timeout_s:
        return gang.give_up(ctx, job, f"gang incomplete: rank(s) "
                            f"{gang.ranks_text(seen.not_running)} not running within "
                            f"{timeout_s:.0f} s")
    if seen.heard_at is None:
        if (ctx.clock() - started).total_seconds() > timeout_s:
            return _lost(ctx, job, f"agent never reported within {timeout_s:.0f} s",
                         PlacementEnd.LOST)
    elif (ctx.clock() - _silent_since(ctx, seen.heard_at)).total_seconds() > \
            ctx.agent_lost_after_s:
        return _lost(ctx, job, f"{seen.silent_node}{'agent ' if not seen.silent_node else ''}"
                     f"silent for over {ctx.agent_lost_after_s:.0f} s", PlacementEnd.LOST)
    elif job.state is JobState.PROVISIONING and not seen.not_running:
        restored = f", resumed from checkpoint {report.restored_from}" \
            if report is not None and report.restored_from else ""
        on = (f"{len(placement.nodes)} instances (rank 0 {placement.instance_id})"
              if placement.nodes else placement.instance_id)
        job.waiting_reason = None
        job.record(JobState.RUNNING, f"running on {on}{restored}",
                   offer=placement.offer, at=ctx.clock())
        return save(ctx, job)
    wasted = job.state is JobState.RUNNING and check_waste(ctx, job)
    return save(ctx, job) if new_checkpoint or learned or wasted else None


def _one_node(ctx: Context, job: Job) -> gang.AttemptView:
    """A one-node attempt as the facts :func:`observe` orders (its agent and its instance)."""
    placement = job.placement
    assert placement is not None
    report = ctx.observed.report(ctx.store, job.id, placement.attempt)
    instance = ctx.observed.instance(placement.instance_id)
    seen = gang.AttemptView(head=report)
    seen.notice = (instance.notice if instance else None) or (report.notice if report else None)
    if report is not None and report.phase.is_final():
        seen.final = report
    if placement.offer.provider not in ctx.observed.failed_providers and (
            (instance is None and not _just_launched(ctx, placement))
            or (instance is not None and instance.state.is_gone())):
        why = (instance.terminated_reason if instance else None) or "no longer reported"
        seen.gone = (f"instance {placement.instance_id} gone ({why})",
                     instance is not None and instance.preempted)
    seen.heard_at = _heard_at(report) if report is not None else None
    if report is None or report.phase is not AgentPhase.RUNNING:
        seen.not_running = [0]  # a one-node attempt runs once its agent says so
    return seen


def _just_launched(ctx: Context, placement) -> bool:
    started = placement.started_at or placement.decided_at
    return (ctx.clock() - started).total_seconds() < INSTANCE_LISTING_GRACE_S


_heard_at = gang.heard_at


def _silent_since(ctx: Context, last: datetime) -> datetime:
    """Silence is counted from ``last`` or from when this daemon's API began listening, the
    later: after a daemon outage agents get a full ``ctx.agent_lost_after_s`` to report
    again."""
    return max(last, ctx.listening_since) if ctx.listening_since else last


def _agent_silent(ctx: Context, report: AgentReport | None, started) -> bool:
    last = _heard_at(report) if report else started
    return last is None or \
        (ctx.clock() - _silent_since(ctx, last)).total_seconds() > ctx.agent_lost_after_s


def _agent_finished(ctx: Context, job: Job, report: AgentReport,
                    notice: PreemptionNotice | None, node: str = "") -> Job | None:
    """The step after the agent's final report. ``notice``: the instance's or the report's
    preemption notice (a provider can give one the agent cannot read, e.g. a drained host);
    ``node``: who reported, in a gang (``"rank 1: "``; ``""`` for one node or rank 0's
    success or checkpoint)."""
    ckpt = f" (checkpoint {report.checkpoint_id})" if report.checkpoint_id else ""
    if report.phase is AgentPhase.SUCCEEDED:
        return finish(ctx, job, PlacementEnd.SUCCEEDED, JobState.SUCCEEDED,
                      f"command exited 0; final checkpoint committed{ckpt}")
    if report.phase is AgentPhase.FAILED and report.exit_code is None:
        # The agent, not the command, failed (could not restore, start or upload).
        return _lost(ctx, job, f"{node}agent failed: {report.message or 'no reason given'}",
                     PlacementEnd.LOST)
    if report.phase is AgentPhase.FAILED:
        job.failures += 1
        # The final report's output is already stored: keep its tail for `status`.
        job.command_failure = CommandFailure.of(report.attempt, report.exit_code, ctx.clock(),
                                                ctx.store.jobs.logs(job.id, -FAILURE_LOG_LINES))
        if job.failures > job.spec.max_failures:
            return finish(ctx, job, PlacementEnd.FAILED, JobState.FAILED,
                          f"{node}command exited {report.exit_code}; failure {job.failures} "
                          f"exceeds max_failures={job.spec.max_failures}{ckpt}")
        return finish(ctx, job, PlacementEnd.FAILED, JobState.PENDING,
                      f"{node}command exited {report.exit_code}; restarting "
                      f"(failure {job.failures} of {job.spec.max_failures} allowed){ckpt}")
    # checkpointed: the agent stopped the command after a notice or a stop command.
    if job.cancel_requested:
        return finish(ctx, job, PlacementEnd.CANCELLED, JobState.CANCELLED, f"cancelled{ckpt}")
    saved = (f"checkpoint {report.checkpoint_id} committed" if report.checkpoint_id
             else "no checkpoint committed")
    stop = job.stop_request
    ours = stop is not None and stop.attempt == report.attempt
    # A gang stopped for a notice on one node: that node may be gone (and its notice with it).
    noticed = notice is not None or (ours and stop.kind is StopKind.PREEMPTION)
    if not noticed and ours:
        if stop.kind in (StopKind.BUDGET, StopKind.IDLE):
            return finish(ctx, job, PlacementEnd.STOPPED, JobState.STOPPED,
                          f"{stop.reason}; {saved}; stopped")
        if stop.kind is StopKind.MAX_PRICE:
            return finish(ctx, job, PlacementEnd.MOVED, JobState.MIGRATING,
                          f"job stopped ({stop.reason}); {saved}; looking for a compliant offer")
        return finish(ctx, job, PlacementEnd.MOVED, JobState.MIGRATING,
                      f"job stopped to move ({stop.reason}); {saved}; migrating")
    reason = PlacementEnd.PREEMPTED if noticed else PlacementEnd.LOST
    why = "the preemption notice" if noticed else (report.message or "a stop request")
    return finish(ctx, job, reason, JobState.MIGRATING,
                  f"job stopped after {why}; {saved}; migrating")


def _noticed(ctx: Context, job: Job, notice: PreemptionNotice, node: str = "") -> Job:
    """A preemption notice: the job checkpoints. On a gang (``node`` names the noticed one)
    every node is told to stop through a stop request (the API answers each agent ``stop``):
    their agents cannot see another node's notice."""
    placement = job.placement
    assert placement is not None
    skip_offer(ctx, placement.offer.key)
    when = f"{notice.action} at {notice.action_at:%H:%M:%S} UTC"
    if placement.nodes:
        job.stop_request = StopRequest(kind=StopKind.PREEMPTION,
                                       reason=f"preemption notice on {node}: {when}"[:500],
                                       attempt=placement.attempt)
        message = (f"preemption notice on {node}: {when}; every node of the gang stops, "
                   "rank 0 checkpointing")
    else:
        message = f"preemption notice: {when}; agent checkpointing"
    job.record(JobState.CHECKPOINTING, message, offer=placement.offer, at=ctx.clock())
    return save(ctx, job)


def _node_left(ctx: Context, job: Job, why: str) -> Job:
    """A node of a gang stopped by itself: every node is told to stop, rank 0 commits, and the
    whole gang moves (as after a price-driven move, so it is not counted as a lost attempt
    and the offer just left is not taken again at once)."""
    placement = job.placement
    assert placement is not None
    job.stop_request = StopRequest(kind=StopKind.MOVE, reason=why[:500],
                                   attempt=placement.attempt)
    job.record(JobState.CHECKPOINTING, f"{why}; every node of the gang stops, rank 0 "
               "checkpointing, the gang moves", offer=placement.offer, at=ctx.clock())
    return save(ctx, job)


def _lost(ctx: Context, job: Job, message: str, reason: PlacementEnd,
          billed_until: datetime | None = None) -> Job | None:
    placement = job.placement
    assert placement is not None
    try:
        terminate_current(ctx, job)
    except ProviderError as exc:
        return wait(ctx, job, f"terminating the instance failed, retrying: {exc}")
    if reason is PlacementEnd.PREEMPTED:
        skip_offer(ctx, placement.offer.key)
    offer = placement.offer
    end_placement(ctx, job, reason, billed_until)
    if reason is PlacementEnd.LOST:
        job.lost_streak += 1
    if job.cancel_requested:
        job.record(JobState.CANCELLED, f"{message}; cancelled", offer=offer, at=ctx.clock())
    elif job.lost_streak >= MAX_LOST_STREAK:
        job.record(JobState.FAILED, f"{message}; {job.lost_streak} attempts lost in a row "
                   "without progress, giving up", offer=offer, at=ctx.clock())
    else:
        job.record(JobState.MIGRATING, f"{message}; migrating (resumes from the latest "
                   "committed checkpoint)", offer=offer, at=ctx.clock())
    return save(ctx, job)
