"""A gang (a job on N instances of one offer) seen as one attempt: its agents' reports read
in one round trip, its nodes folded into the facts :func:`~scheduler.controller.observing.observe`
orders, and giving up an attempt that never became a whole gang.

Rank 0 is the node that checkpoints, so its report carries the attempt's progress and
checkpoints, and its final report decides how the attempt ends; any rank that fails fails the
attempt. A node's notice, loss or silence is the whole gang's: its nodes only work together.
While the gang checkpoints (after a notice or a stop request) only rank 0 still matters: the
other nodes were told to stop, and one reclaimed meanwhile must not cost rank 0's commit.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from core.models import (
    Instance,
    Job,
    JobState,
    PlacementEnd,
    PreemptionNotice,
)
from core.models.agents import AgentPhase, AgentReport
from core.models.placements import GangNode, Placement
from providers.errors import ProviderError
from scheduler.controller.context import Context
from scheduler.controller.transitions import (
    end_placement,
    save,
    skip_offer,
    terminate_current,
    wait,
)
from scheduler.store import Store
from scheduler.timing import INSTANCE_LISTING_GRACE_S

ReportKey = tuple[str, int, int]  # (job id, attempt, rank)


def prefetch_reports(store: Store, jobs: Iterable[Job]) -> dict[ReportKey, AgentReport | None]:
    """The newest report of every agent of the launched attempts of ``jobs`` (each rank of a
    gang, rank 0 of a one-node job), in one round trip (one MGET).

    Returns:
        ``{(job_id, attempt, rank): report or None}`` for every such agent.
    """
    return store.agents.last_reports(  # type: ignore[return-value]  (given triples only)
        [(j.id, j.placement.attempt, rank) for j in jobs
         if j.placement is not None and j.placement.instance_id is not None
         for rank in range(j.placement.node_count)])


@dataclass
class AttemptView:
    """What the nodes of the current attempt say, folded into the facts ``observe`` orders.

    - **head**: rank 0's report (a one-node job's only one): progress, checkpoints, waste.
    - **final**: the final report that ends the attempt (``None``: none yet); **final_node**
      names its node in messages (``""`` for one node, ``"rank 1: "``).
    - **notice**: the earliest preemption notice of any node (instance describe or report);
      **noticed_node** names it (``"rank 1 (instance i-1)"``).
    - **gone**: ``(what, preempted)`` of a node whose instance is gone, e.g.
      ``"rank 1 (instance i-1) gone (user-terminated)"``; ``None`` when none is.
    - **heard_at**: the oldest time the daemon last heard an agent that is still expected to
      report (``None``: one never reported); **silent_node** names it.
    - **not_running**: ranks that have not reported ``running``.
    - **left**: a node other than rank 0 whose agent stopped the command by itself (reported
      ``checkpointed`` while nobody asked: its instance is being shut down, say), e.g.
      ``"rank 1 (instance i-1) stopped on its own (agent received SIGTERM)"``: its peers
      cannot go on without it.
    """

    head: AgentReport | None
    final: AgentReport | None = None
    final_node: str = ""
    notice: PreemptionNotice | None = None
    noticed_node: str = ""
    gone: tuple[str, bool] | None = None
    heard_at: datetime | None = None
    silent_node: str = ""
    not_running: list[int] = field(default_factory=list)
    left: str | None = None


def heard_at(report: AgentReport) -> datetime:
    """When the daemon received the report: the agent's own clock is not trusted for liveness."""
    return report.received_at or report.at


def checkpointing(job: Job) -> bool:
    """The gang was told to stop (a notice, a stop request, a cancel): only rank 0 matters."""
    return job.state is JobState.CHECKPOINTING or job.cancel_requested


def view(ctx: Context, job: Job) -> AttemptView:
    """The gang's current attempt as one :class:`AttemptView` (its reports from
    ``ctx.observed``, its instances from this pass's describe)."""
    placement = job.placement
    assert placement is not None and placement.nodes
    reports = [ctx.observed.report(ctx.store, job.id, placement.attempt, n.rank)
               for n in placement.nodes]
    instances = [ctx.observed.instance(n.instance_id) for n in placement.nodes]
    stopping = checkpointing(job)
    # While stopping, the other ranks were told to stop and may go: rank 0 alone is watched.
    watched = placement.nodes[:1] if stopping else placement.nodes
    result = AttemptView(head=reports[0])
    result.final, result.final_node = _final(reports, stopping)
    result.notice, result.noticed_node = _earliest_notice(placement.nodes, reports, instances)
    expected = [n for n in watched if not _finished(reports[n.rank])]  # still to report
    result.gone = _gone(ctx, placement, expected, instances)
    result.heard_at, result.silent_node = _oldest_heard(expected, reports)
    result.not_running = [n.rank for n in placement.nodes if not started(reports[n.rank])]
    if not stopping and job.stop_request is None:
        result.left = next((f"{node_name(n)} stopped on its own "
                            f"({reports[n.rank].message or 'no reason given'})"
                            for n in placement.nodes[1:]
                            if (r := reports[n.rank]) is not None
                            and r.phase is AgentPhase.CHECKPOINTED), None)
    return result


def started(report: AgentReport | None) -> bool:
    """The agent reported ``running`` (or a phase after it: a short command may be done)."""
    return report is not None and report.phase not in (AgentPhase.STARTING,
                                                       AgentPhase.RESTORING)


def node_name(node: GangNode) -> str:
    return f"rank {node.rank} (instance {node.instance_id})"


def _finished(report: AgentReport | None) -> bool:
    return report is not None and report.phase.is_final()


def _final(reports: list[AgentReport | None],
           stopping: bool) -> tuple[AgentReport | None, str]:
    """Rank 0's final report decides, but a rank that failed fails the attempt, unless the
    gang was told to stop: a rank whose peers stopped first may well fail, and rank 0's
    checkpoint then decides."""
    head = reports[0]
    failed = [r for r in reports[1:] if r is not None and r.phase is AgentPhase.FAILED]
    if head is not None and head.phase is AgentPhase.FAILED:
        return head, "rank 0: "
    if failed and not stopping and (head is None or head.phase is not AgentPhase.CHECKPOINTED):
        return failed[0], f"rank {failed[0].rank}: "
    if head is not None and head.phase.is_final():
        return head, ""
    return None, ""


def _earliest_notice(nodes: list[GangNode], reports: list[AgentReport | None],
                     instances: list[Instance | None]) -> tuple[PreemptionNotice | None, str]:
    found = []
    for node, report, instance in zip(nodes, reports, instances, strict=True):
        for notice in (instance.notice if instance else None, report.notice if report else None):
            if notice is not None:
                found.append((notice.action_at, node.rank, notice, node_name(node)))
    if not found:
        return None, ""
    _, _, notice, name = min(found, key=lambda f: (f[0], f[1]))
    return notice, name


def _gone(ctx: Context, placement: Placement, nodes: list[GangNode],
          instances: list[Instance | None]) -> tuple[str, bool] | None:
    if placement.offer.provider in ctx.observed.failed_providers:
        return None  # a failed describe says nothing about the instances
    for node in nodes:
        instance = instances[node.rank]
        launched = node.launched_at or placement.started_at or placement.decided_at
        listed_soon = (ctx.clock() - launched).total_seconds() < INSTANCE_LISTING_GRACE_S
        if (instance is None and not listed_soon) or (instance is not None
                                                      and instance.state.is_gone()):
            why = (instance.terminated_reason if instance else None) or "no longer reported"
            preempted = instance is not None and instance.preempted
            return f"{node_name(node)} gone ({why})", preempted
    return None


def _oldest_heard(nodes: list[GangNode],
                  reports: list[AgentReport | None]) -> tuple[datetime | None, str]:
    if not nodes:
        return None, ""
    if any(reports[n.rank] is None for n in nodes):
        return None, ""
    at, node = min(((heard_at(reports[n.rank]), n) for n in nodes), key=lambda p: p[0])
    return at, f"rank {node.rank}'s agent (instance {node.instance_id}) "


def give_up(ctx: Context, job: Job, why: str) -> Job | None:
    """End an attempt that never became a whole gang: terminate every launched node, end the
    placement ``launch-failed``, skip its offer and place the job again (``pending``), with
    ``why`` and how many instances were terminated in the event. ``None`` (and a waiting
    reason) when a terminate failed: the next pass tries again."""
    placement = job.placement
    assert placement is not None
    launched = len(placement.instance_ids())
    try:
        terminate_current(ctx, job)
    except ProviderError as exc:
        return wait(ctx, job, f"terminating the gang's instances failed, retrying: {exc}")
    offer = placement.offer
    skipped = skip_offer(ctx, offer.key)
    end_placement(ctx, job, PlacementEnd.LAUNCH_FAILED)
    job.waiting_reason = None
    every = "all " if launched == len(placement.nodes) else ""
    plural = "" if launched == 1 else "s"
    job.record(JobState.PENDING, f"{why}; {every}{launched} instance{plural} terminated; "
               f"offer skipped for {skipped:.0f} s", offer=offer, at=ctx.clock())
    return save(ctx, job)


def ranks_text(ranks: list[int]) -> str:
    return ", ".join(str(r) for r in ranks)
