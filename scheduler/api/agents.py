"""``POST /v1/agent/{instance_id}/report``: a node agent's report, answered with its command.

Agents authenticate with a token scoped to one attempt of one job
(:class:`scheduler.store.agents.AgentTokens`), checked before the body is read; a report for
another job or attempt answers 403, an invalid body 422 (the problems, without the values
sent), a job that no longer exists 404. What is stored and what the agent is told:
:mod:`scheduler.services.agent_commands`.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, Request, status
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from core.models import describe_validation_error
from core.models.agents import AgentReport
from scheduler.api.auth import bearer
from scheduler.services import agent_commands
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
        if (report.job_id, report.attempt) != scope:
            raise HTTPException(status.HTTP_403_FORBIDDEN,
                                "token not valid for this job attempt")
        # Redis calls block: run them on the thread pool, not on the event loop every other
        # request (hundreds of heartbeats a second) is waiting on.
        command = await run_in_threadpool(agent_commands.record_report, store, report)
        return command.model_dump(mode="json")

    return api
