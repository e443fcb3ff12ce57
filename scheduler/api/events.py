"""``GET /v1/events``: the job event stream (user token required), by who is calling: a user
gets the events of the jobs they own, an admin every event.

Query parameters:

- **after** (optional): the ``next`` cursor of a previous answer; events after it, oldest
  first. Without it: the most recent ``limit`` events.
- **limit**: at most this many events (1–1000, default 100).
- **job** (optional): only this job's events.
- **wait_s**: with ``after``, wait up to this many seconds (0–5) for an event when there is
  none yet (long polling, for ``schedctl events --follow``).

Answers ``{"events": [{"id", "job_id", "attempt", "state", "message", "at", "kind"?,
"offer"?, "price_usd_per_hour"?}], "next": "<cursor>"}``; a malformed ``after`` answers 422
naming the field; a ``job`` that does not exist, or is another user's, answers 404 (``no job
'ID'``). Each event also has ``owner``, its job's owner. Events come from
:mod:`scheduler.store.events`; a user's read scans at most ``EVENTS_SCAN_MAX`` entries per
poll, so a long poll stays bounded however many events other users' jobs write.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Query
from starlette.concurrency import run_in_threadpool

from scheduler.api.auth import current_user, require_user
from scheduler.services.jobs import visible
from scheduler.store import Store
from scheduler.store.events import STREAM_ID_PATTERN, EventStream
from scheduler.store.users import Principal
from scheduler.timing import EVENTS_MAX_WAIT_S, EVENTS_POLL_S


def router(store: Store) -> APIRouter:
    """The events route over ``store``."""
    stream = EventStream(store.redis)
    api = APIRouter(dependencies=[Depends(require_user)])

    @api.get("/v1/events")
    async def events(after: str | None = Query(None, max_length=41, pattern=STREAM_ID_PATTERN),
               limit: int = Query(100, ge=1, le=1000),
               job: str | None = Query(None, min_length=1, max_length=200),
               wait_s: float = Query(0.0, ge=0, le=EVENTS_MAX_WAIT_S),
               who: Principal = Depends(current_user)) -> dict[str, Any]:
        # Async so a waiting request holds no worker thread: each Redis read is a short
        # non-blocking one in the threadpool, and the wait between reads is an asyncio sleep.
        # (A sync endpoint blocking up to wait_s let 40 long-polls starve every other route.)
        if job is not None and not await run_in_threadpool(visible, store, job, who):
            raise HTTPException(404, f"no job {job!r}")
        owner = None if who.is_admin else who.user
        deadline = time.monotonic() + (wait_s if after is not None else 0.0)
        try:
            page = await run_in_threadpool(stream.read, after, limit, job, owner)
            while not page.events and time.monotonic() < deadline:
                await asyncio.sleep(min(EVENTS_POLL_S, max(0.0, deadline - time.monotonic())))
                page = await run_in_threadpool(stream.read, page.next, limit, job, owner)
        except ValueError as exc:
            raise HTTPException(422, str(exc)) from None
        return {"events": page.events, "next": page.next}

    return api
