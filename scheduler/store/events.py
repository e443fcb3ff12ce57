"""The job event stream: every job timeline event, also in one capped Redis stream.

Each :class:`~core.models.JobEvent` a job write adds is XADDed to ``ga:events`` through the
job's outbox (:func:`publish`, called by :mod:`scheduler.store.job_writes`; queued in the job
write's own MULTI, applied at most once after it, :mod:`scheduler.store.outbox`), so an event
is in the stream exactly once if its job write committed (once applied: right after the
commit, or by the next repair if the writer died), never otherwise.
The stream is trimmed approximately to ``EVENTS_STREAM_MAXLEN`` entries.

An entry's fields (all strings; absent when unknown): ``job_id``, ``owner`` (the job's
owner, ``spec.owner``: who may read the entry besides admins; entries written before owners
were recorded have none and are shown to admins only), ``attempt``, ``state``, ``message``,
``kind``, ``offer`` (series key), ``price_usd_per_hour``, ``at`` (ISO 8601 UTC).
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
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis

from core.models import Job
from scheduler.store import keys
from scheduler.store.outbox import Outbox
from scheduler.timing import EVENTS_SCAN_MAX, EVENTS_STREAM_MAXLEN

# A stream id as Redis writes it: "<ms>-<seq>"; "0-0" (or "0") means "from the beginning".
STREAM_ID_PATTERN = r"^\d{1,20}(-\d{1,20})?$"
"""For pydantic's ``pattern`` (Rust regex syntax: ``$`` is the end of the text)."""
STREAM_ID_RE = re.compile(r"^\d{1,20}(-\d{1,20})?\Z")


def publish(outbox: Outbox, job: Job, already: int) -> None:
    """Queue on ``outbox`` an XADD (applied at most once) for each event of ``job`` past the
    first ``already`` (the count the stored version had)."""
    for event in job.events[already:]:
        fields = {"job_id": job.id, "owner": job.spec.owner, "attempt": str(job.attempt),
                  "state": event.state.value, "message": event.message,
                  "at": event.at.isoformat()}
        kind = getattr(event, "kind", None)
        if kind:
            fields["kind"] = kind
        if event.offer:
            fields["offer"] = event.offer
        if event.price_usd_per_hour is not None:
            fields["price_usd_per_hour"] = repr(event.price_usd_per_hour)
        flat = [part for pair in fields.items() for part in pair]
        outbox.once(keys.EVENTS, "XADD", "MAXLEN", "~", EVENTS_STREAM_MAXLEN, "*", *flat)


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
LAST_STREAM_ID = f"{_MAX_PART}-{_MAX_PART}"
"""The highest stream id: nothing can follow it."""
_LAST_ID = LAST_STREAM_ID


def stream_cursor(after: str) -> str:
    """``after`` (a stream id, :data:`STREAM_ID_RE`) as a full ``ms-seq`` id within Redis's
    range. Raises ``ValueError`` naming the field ``after``."""
    ms, _, seq = after.partition("-")
    if not STREAM_ID_RE.match(after) or int(ms) > _MAX_PART or int(seq or 0) > _MAX_PART:
        raise ValueError("after: must be a stream id like 1764520000000-0 (from 'next')")
    return f"{int(ms)}-{int(seq or 0)}"


_Match = Callable[[dict[str, str]], bool]


def _matcher(job_id: str | None, owner: str | None) -> _Match | None:
    """Which entries a read keeps (``None``: all)."""
    if job_id is None and owner is None:
        return None
    return lambda fields: ((job_id is None or fields.get("job_id") == job_id)
                           and (owner is None or fields.get("owner") == owner))


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
             job_id: str | None = None, owner: str | None = None) -> EventPage:
        """Events after the cursor ``after``, oldest first, at most ``limit``.

        - **after**: a stream id from a previous page's ``next``; ``None`` gives the most recent
          ``limit`` events (what ``schedctl events`` shows first).
        - **job_id**: only this job's events; **owner**: only events of jobs ``owner`` owns
          (entries without an owner never match). With either filter the scan reads at most
          ``EVENTS_SCAN_MAX`` entries per call; ``next`` moves past everything scanned,
          matching or not.
        Never blocks: the API waits for new events between non-blocking reads.

        Raises ``ValueError`` for a malformed ``after``; ``redis.RedisError`` when Redis fails.
        """
        match = _matcher(job_id, owner)
        if after is None:
            return self._recent(limit, match)
        after = stream_cursor(after)
        if after == _LAST_ID:
            return EventPage([], after)  # nothing can follow it
        return self._forward(after, limit, match)

    def _forward(self, after: str, limit: int, match: _Match | None) -> EventPage:
        """Scan forward from ``after`` (exclusive) until ``limit`` matches or the scan cap."""
        events, last = self._scan(
            lambda cursor, n: self._r.xrange(keys.EVENTS, min=f"({cursor}", count=n),
            after, limit, match)
        return EventPage(events, last or after)

    def _recent(self, limit: int, match: _Match | None) -> EventPage:
        """The last ``limit`` (matching) events, oldest first; ``next`` is the stream's end."""
        newest = self._r.xrevrange(keys.EVENTS, count=1)
        if not newest:
            return EventPage([], "0-0")
        events, _ = self._scan(
            lambda cursor, n: self._r.xrevrange(
                keys.EVENTS, max=cursor if cursor == "+" else f"({cursor}", count=n),
            "+", limit, match)
        events.reverse()
        return EventPage(events, newest[0][0])

    @staticmethod
    def _scan(fetch, start: str, limit: int,
              match: _Match | None) -> tuple[list[dict[str, Any]], str | None]:
        """Page through ``fetch(cursor, count)`` (entries after ``cursor`` in its direction)
        collecting up to ``limit`` matches within ``EVENTS_SCAN_MAX`` entries; returns them and
        the id of the last entry scanned (``None`` if none)."""
        events: list[dict[str, Any]] = []
        cursor, last, scanned = start, None, 0
        batch = limit if match is None else min(EVENTS_SCAN_MAX, max(limit, 500))
        while len(events) < limit and scanned < EVENTS_SCAN_MAX:
            entries = fetch(cursor, batch)
            for entry_id, fields in entries:
                scanned += 1
                cursor = last = entry_id
                if match is None or match(fields):
                    events.append(_decode(entry_id, fields))
                    if len(events) == limit:
                        break
            if len(entries) < batch:
                break
        return events, last
