"""``POST /v1/agent/{instance_id}/report``: a node agent's report, answered with its command.

Agents authenticate with a token scoped to one attempt of one job
(:class:`scheduler.store.agents.AgentTokens`), checked before the body is read; a report for
another job or attempt answers 403, an invalid body 422 (the problems, without the values
sent), a job that no longer exists 404. Progress must agree with the job: a point in another
unit than the spec's ``work.unit``, or more than
:data:`~core.models.jobs.MAX_POINT_AHEAD_S` ahead of the daemon's clock (a wrong clock on the
instance), answers 422 naming the field; so does a ``rank`` the job has no node of. Every
rank of a gang authenticates with its attempt's token. What is stored and what the agent is
told (and when a gang's nodes get their roster):
:mod:`scheduler.services.agent_commands`.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from fastapi import APIRouter, HTTPException, Request, status
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from core.models import describe_validation_error, utcnow
from core.models.agents import AgentCommand, AgentReport
from core.models.jobs import MAX_POINT_AHEAD_S
from scheduler.api.auth import bearer
from scheduler.services import agent_commands
from scheduler.services.jobs import JobNotFound
from scheduler.store import Store
from scheduler.store.agents import AgentTokens


def router(store: Store, tokens: AgentTokens) -> APIRouter:
    """The agent route over ``store``, accepting the tokens of ``tokens``."""
    api = APIRouter()

    @api.post("/v1/agent/{instance_id}/report")
    async def agent_report(instance_id: str, request: Request) -> dict[str, Any]:
        scope = tokens.scope(bearer(request))  # checked before the body is read
        if scope is None:
            raise HTTPException(status.HTTP_403_FORBIDDEN, "not a valid agent token")
        try:
            report = AgentReport.model_validate_json(await request.body())
        except ValidationError as exc:
            problems = [{**p, "value": None} for p in describe_validation_error(exc)]
            raise HTTPException(422, problems) from None
        if (report.job_id, report.attempt, report.rank) != scope:
            raise HTTPException(status.HTTP_403_FORBIDDEN,
                                "token not valid for this job attempt and rank")
        # Redis calls block: run them on the thread pool, not on the event loop every other
        # request (hundreds of heartbeats a second) is waiting on.
        command = await run_in_threadpool(_record, store, report)
        return command.model_dump(mode="json")

    return api


def progress_problems(report: AgentReport, work_unit: str | None) -> list[dict[str, Any]]:
    """What is wrong with ``report``'s progress for a job counting ``work_unit`` (``None``:
    the spec declares none) at the daemon's time now, as ``{"field", "value", "problem"}``
    (``value`` always ``None``); empty when nothing is."""
    problems = []
    ahead = utcnow() + timedelta(seconds=MAX_POINT_AHEAD_S)
    for name in ("progress", "first_progress"):
        point = getattr(report, name)
        if point is None:
            continue
        if work_unit is not None and point.unit.value != work_unit:
            problems.append({"field": f"{name}.unit", "value": None,
                             "problem": f"the job's work is counted in {work_unit}"})
        if point.at > ahead:
            problems.append({"field": f"{name}.at", "value": None,
                             "problem": f"more than {MAX_POINT_AHEAD_S:g} s after the "
                                        "daemon's clock (a wrong clock)"})
    return problems


def _record(store: Store, report: AgentReport) -> AgentCommand:
    job = store.jobs.get(report.job_id)
    if job is None:
        raise JobNotFound(report.job_id)
    if report.progress is not None or report.first_progress is not None:
        work = job.spec.work
        problems = progress_problems(report, work.unit.value if work is not None else None)
        if problems:
            raise HTTPException(422, problems)
    try:
        return agent_commands.record_report(store, report, job)
    except agent_commands.ReportRefused as exc:
        raise HTTPException(422, exc.problems) from None
