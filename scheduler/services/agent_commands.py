"""What a node agent is told when it reports: continue, or stop (and why).

An agent reports a heartbeat, its progress and its output for one attempt of one job
(:class:`core.models.agents.AgentReport`); the answer (:class:`core.models.agents.AgentCommand`)
stops an agent whose job was cancelled, finished or moved on to another attempt, and one
whose attempt the controller asked to stop (a price-driven move or a budget stop).
"""

from __future__ import annotations

from core.models import Job, utcnow
from core.models.agents import AgentAction, AgentCommand, AgentReport
from scheduler.services.jobs import JobNotFound
from scheduler.store import Store


def attempt_is_live(job: Job, attempt: int) -> bool:
    """Whether ``attempt`` is the job's current placement and the job has not finished."""
    current = job.placement.attempt if job.placement else None
    return not job.state.is_terminal() and current == attempt


def command_for(job: Job, attempt: int) -> AgentCommand:
    """The command for the agent of ``attempt`` of ``job``: stop when the job was cancelled,
    finished, or moved on to another attempt, or when the controller asked this attempt to
    stop (``job.stop_request``: checkpoint, then stop); else continue."""
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
    job's log) when its attempt is live, and answer the agent (:func:`command_for`).

    Nobody reads a finished job's or a replaced attempt's reports, and its agent is being told
    to stop: writing them would only let a stale agent grow the job's logs. A cancelled job's
    current attempt is still written (its final checkpoint report matters).

    ``job``: the job record when the caller has just read it (one Redis read per report).

    Raises:
        JobNotFound: no job ``report.job_id``. ``redis.RedisError``.
    """
    if job is None:
        job = store.jobs.get(report.job_id)
    if job is None:
        raise JobNotFound(report.job_id)
    command = command_for(job, report.attempt)
    if attempt_is_live(job, report.attempt):
        store.agents.save_report(report.model_copy(update={"received_at": utcnow()}))
        store.agents.append_output(report)
    return command
