"""The job event stream: every job timeline event, also in one capped Redis stream.

Each :class:`~core.models.JobEvent` a job write adds is XADDed to ``ga:events`` in the
same MULTI as the job itself (:func:`publish`, called by :mod:`scheduler.store.job_writes`), so
an event is in the stream if and only if its job write committed, on whichever replica made it.
The stream is trimmed approximately to ``EVENTS_STREAM_MAXLEN`` entries.

An entry's fields (all strings; absent when unknown): ``job_id``, ``attempt``, ``state``,
``message``, ``kind``, ``offer`` (series key), ``price_usd_per_hour``, ``at`` (ISO 8601 UTC).
Readers get them as dicts with ``id`` (the stream id, the cursor), ``attempt`` as int and the
price as float (:meth:`EventStream.read`).

Once the write committed, :func:`log_committed` logs each of those events at INFO (logger
``scheduler.events``) with ``job_id``, ``attempt``, ``state``, ``kind``, ``offer`` and
``provider`` as log record extras: the daemon's log tells placements, preemptions, migrations,
lease takeovers and budget stops exactly once, on the replica that wrote them.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

import redis

from core.models import Job
from scheduler.store import keys
from scheduler.timing import EVENTS_SCAN_MAX, EVENTS_STREAM_MAXLEN

# A stream id as Redis writes it: "<ms>-<seq>"; "0-0" (or "0") means "from the beginning".
STREAM_ID_RE = re.compile(r"^\d{1,20}(-\d{1,20})?$")


def publish(pipe: redis.client.Pipeline, job: Job, already: int) -> None:
    """Queue an XADD on ``pipe`` (inside its MULTI) for each event of ``job`` past the first
    ``already`` (the count the stored version had)."""
    for event in job.events[already:]:
        fields = {"job_id": job.id, "attempt": str(job.attempt), "state": event.state.value,
                  "message": event.message, "at": event.at.isoformat()}
        kind = getattr(event, "kind", None)
        if kind:
            fields["kind"] = kind
        if event.offer:
            fields["offer"] = event.offer
        if event.price_usd_per_hour is not None:
            fields["price_usd_per_hour"] = repr(event.price_usd_per_hour)
        pipe.xadd(keys.EVENTS, fields, maxlen=EVENTS_STREAM_MAXLEN, approximate=True)


log = logging.getLogger("scheduler.events")


def log_committed(job: Job, already: int) -> None:
    """Log at INFO each event of ``job`` past the first ``already`` (call after the write
    that :func:`publish` queued them committed, so a refused write logs nothing)."""
    if not log.isEnabledFor(logging.INFO):
        return
    for event in job.events[already:]:
        extra: dict[str, Any] = {"job_id": job.id, "attempt": job.attempt,
                                 "state": event.state.value}
        if event.kind:
            extra["kind"] = event.kind
        offer = event.offer or (job.placement.offer.key.series() if job.placement else None)
        if offer:
            extra["offer"] = offer
            extra["provider"] = offer.split("/", 1)[0]
        log.info("job %s attempt %d [%s]: %s", job.id, job.attempt, event.state.value,
                 event.message, extra=extra)


_MAX_PART = 2**64 - 1
_LAST_ID = f"{_MAX_PART}-{_MAX_PART}"


def _cursor(after: str) -> str:
    """``after`` as a full ``ms-seq`` id. Raises ``ValueError`` naming the field."""
    ms, _, seq = after.partition("-")
    if not STREAM_ID_RE.match(after) or int(ms) > _MAX_PART or int(seq or 0) > _MAX_PART:
        raise ValueError("after: must be a stream id like 1764520000000-0 (from 'next')")
    return f"{int(ms)}-{int(seq or 0)}"


@dataclass
class EventPage:
    """Events in stream order and the cursor to pass as ``after`` for the ones that follow."""

    events: list[dict[str, Any]]
    next: str


def _decode(entry_id: str, fields: dict[str, str]) -> dict[str, Any]:
    event: dict[str, Any] = {"id": entry_id, **fields}
    if "attempt" in event:
        event["attempt"] = int(event["attempt"])
    if "price_usd_per_hour" in event:
        event["price_usd_per_hour"] = float(event["price_usd_per_hour"])
    return event


class EventStream:
    """Reads of ``ga:events``. Thread-safe (one redis-py client)."""

    def __init__(self, client: redis.Redis) -> None:
        self._r = client

    def read(self, after: str | None = None, limit: int = 100,
             job_id: str | None = None) -> EventPage:
        """Events after the cursor ``after``, oldest first, at most ``limit``.

        - **after**: a stream id from a previous page's ``next``; ``None`` gives the most recent
          ``limit`` events (what ``schedctl events`` shows first).
        - **job_id**: only this job's events. The scan reads at most ``EVENTS_SCAN_MAX`` entries
          per call; ``next`` moves past everything scanned, matching or not.
        Never blocks: the API waits for new events between non-blocking reads.

        Raises ``ValueError`` for a malformed ``after``; ``redis.RedisError`` when Redis fails.
        """
        if after is None:
            return self._recent(limit, job_id)
        after = _cursor(after)
        if after == _LAST_ID:
            return EventPage([], after)  # nothing can follow it
        return self._forward(after, limit, job_id)

    def _forward(self, after: str, limit: int, job_id: str | None) -> EventPage:
        """Scan forward from ``after`` (exclusive) until ``limit`` matches or the scan cap."""
        events, last = self._scan(
            lambda cursor, n: self._r.xrange(keys.EVENTS, min=f"({cursor}", count=n),
            after, limit, job_id)
        return EventPage(events, last or after)

    def _recent(self, limit: int, job_id: str | None) -> EventPage:
        """The last ``limit`` (matching) events, oldest first; ``next`` is the stream's end."""
        newest = self._r.xrevrange(keys.EVENTS, count=1)
        if not newest:
            return EventPage([], "0-0")
        events, _ = self._scan(
            lambda cursor, n: self._r.xrevrange(
                keys.EVENTS, max=cursor if cursor == "+" else f"({cursor}", count=n),
            "+", limit, job_id)
        events.reverse()
        return EventPage(events, newest[0][0])

    @staticmethod
    def _scan(fetch, start: str, limit: int,
              job_id: str | None) -> tuple[list[dict[str, Any]], str | None]:
        """Page through ``fetch(cursor, count)`` (entries after ``cursor`` in its direction)
        collecting up to ``limit`` matches within ``EVENTS_SCAN_MAX`` entries; returns them and
        the id of the last entry scanned (``None`` if none)."""
        events: list[dict[str, Any]] = []
        cursor, last, scanned = start, None, 0
        batch = limit if job_id is None else min(EVENTS_SCAN_MAX, max(limit, 500))
        while len(events) < limit and scanned < EVENTS_SCAN_MAX:
            entries = fetch(cursor, batch)
            for entry_id, fields in entries:
                scanned += 1
                cursor = last = entry_id
                if job_id is None or fields.get("job_id") == job_id:
                    events.append(_decode(entry_id, fields))
                    if len(events) == limit:
                        break
            if len(entries) < batch:
                break
        return events, last
