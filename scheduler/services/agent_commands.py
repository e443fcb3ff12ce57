"""What a node agent is told when it reports: continue, or stop (and why).

An agent reports a heartbeat, its progress and its output for one attempt of one job
(:class:`core.models.agents.AgentReport`); the answer (:class:`core.models.agents.AgentCommand`)
stops an agent whose job was cancelled, finished or moved on to another attempt, and one
whose attempt the controller asked to stop (a price-driven move, a budget stop, or a notice
on one node of a gang).

A gang's nodes (``spec.resources.nodes`` > 1) report apart, each with its ``rank``; every
rank of the attempt gets the same stop. Until every rank has reported its address (and rank
0 its port) they are only told to continue; from then on each answer carries the gang's
roster (:func:`core.models.agents.roster_of`), on which the agents start the command.
"""

from __future__ import annotations

from typing import Any

from core.models import Job, utcnow
from core.models.agents import AgentAction, AgentCommand, AgentReport, roster_of
from scheduler.services.jobs import JobNotFound
from scheduler.store import Store


class ReportRefused(ValueError):
    """The report does not fit its job. ``problems``: ``[{"field", "value", "problem"}]``
    (``value`` always ``None``: nothing of what the agent sent is echoed)."""

    def __init__(self, problems: list[dict[str, Any]]) -> None:
        self.problems = problems
        super().__init__("; ".join(f"{p['field']}: {p['problem']}" for p in problems))


def attempt_is_live(job: Job, attempt: int) -> bool:
    """Whether ``attempt`` is the job's current placement and the job has not finished."""
    current = job.placement.attempt if job.placement else None
    return not job.state.is_terminal() and current == attempt


def rank_problems(job: Job, report: AgentReport) -> list[dict[str, Any]]:
    """What is wrong with ``report``'s rank for ``job``: a rank the job has no node of
    (``spec.resources.nodes`` nodes: ranks 0..nodes - 1). Empty when nothing is."""
    nodes = job.spec.resources.nodes
    if report.rank < nodes:
        return []
    return [{"field": "rank", "value": None,
             "problem": f"the job runs on {nodes} node{'' if nodes == 1 else 's'} "
                        f"(ranks 0..{nodes - 1})"}]


def command_for(job: Job, attempt: int) -> AgentCommand:
    """The command for the agents of ``attempt`` of ``job`` (every rank of a gang alike):
    stop when the job was cancelled, finished, or moved on to another attempt, or when the
    controller asked this attempt to stop (``job.stop_request``: checkpoint, then stop); else
    continue."""
    if job.cancel_requested:
        return AgentCommand(action=AgentAction.STOP, reason="job cancelled")
    if not attempt_is_live(job, attempt):
        return AgentCommand(action=AgentAction.STOP, reason="attempt no longer current")
    stop = job.stop_request
    if stop is not None and stop.attempt == attempt:
        return AgentCommand(action=AgentAction.STOP, reason=f"{stop.kind.value}: {stop.reason}")
    return AgentCommand()


def record_report(store: Store, report: AgentReport, job: Job | None = None) -> AgentCommand:
    """Store ``report`` (stamped with its arrival time, its output lines appended to the
    job's log) when its attempt is live, and answer the agent (:func:`command_for`); a gang
    node told to continue also gets the gang's roster once every rank reported its address
    (the other ranks' latest reports read in one round trip, this one counting).

    Nobody reads a finished job's or a replaced attempt's reports, and its agent is being told
    to stop: writing them would only let a stale agent grow the job's logs. A cancelled job's
    current attempt is still written (its final checkpoint report matters).

    ``job``: the job record when the caller has just read it (one Redis read per report).

    Raises:
        JobNotFound: no job ``report.job_id``.
        ReportRefused: the report's ``rank`` is not a node of the job (nothing stored).
        ``redis.RedisError``.
    """
    if job is None:
        job = store.jobs.get(report.job_id)
    if job is None:
        raise JobNotFound(report.job_id)
    problems = rank_problems(job, report)
    if problems:
        raise ReportRefused(problems)
    command = command_for(job, report.attempt)
    if not attempt_is_live(job, report.attempt):
        return command
    received = report.model_copy(update={"received_at": utcnow()})
    store.agents.save_report(received)
    store.agents.append_output(report)
    nodes = job.spec.resources.nodes
    if nodes > 1 and command.action is AgentAction.CONTINUE:
        reports = store.agents.gang_reports(report.job_id, report.attempt, nodes)
        reports[report.rank] = received
        command.gang = roster_of(reports, nodes)
    return command
