"""Per-job figures and shared counters written beside every job write, read by ``/metrics``.

Kept in Redis (not in one process's memory) so every daemon replica sharing the Redis reports
the same values, and written in the job write's own MULTI (:mod:`scheduler.store.job_writes`)
so a counter moves exactly once per committed change, whichever replica made it:

- ``ga:jobs:summary``: hash job id → compact JSON ``{"state", "saved", "rate", "since"}``:
  the job's state, USD saved against all-on-demand by its closed placements, and for a
  running placement the USD saved per wall second since the UNIX time ``since``. Enough to
  count jobs by state and sum the money saved at scrape time without reading every job.
- ``ga:metrics:preemptions``: hash provider → placements that ended preempted.
- ``ga:metrics:migrations``: hash reason (``preemption``, ``price``, ``lost``) → migrations
  started (a placement ended for that reason and the job goes on elsewhere).
- ``ga:metrics:provider-errors``: hash ``provider|operation|error`` → provider calls that
  failed (:mod:`scheduler.observability.providers`).
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from dataclasses import dataclass
from typing import Any

import redis

from scheduler.models import Job, JobState, PlacementEnd, parse_lenient
from scheduler.store import keys

log = logging.getLogger(__name__)

MIGRATION_REASONS = {PlacementEnd.PREEMPTED: "preemption", PlacementEnd.MOVED: "price",
                     PlacementEnd.LOST: "lost"}


def summary(job: Job) -> dict[str, Any]:
    """The job's compact figures (see the module docstring); ``saved`` in USD, ``rate`` in USD
    per wall second (market hours run ``time_scale`` times faster on a replayed market)."""
    out: dict[str, Any] = {"state": job.state.value}
    ref = job.on_demand_reference_usd_per_hour
    if ref is None:
        return out
    closed = [p for p in job.all_placements() if p.started_at and p.ended_at]
    out["saved"] = round(sum((ref - p.offer.price_usd_per_hour) * p.billed_hours()
                             for p in closed), 6)
    current = job.placement
    if current is not None and current.started_at is not None and current.ended_at is None:
        out["rate"] = (ref - current.offer.price_usd_per_hour) * current.time_scale / 3600.0
        out["since"] = current.started_at.timestamp()
    return out


def saved_usd(figures: dict[str, Any], now_ts: float) -> float:
    """USD a job saved up to the UNIX time ``now_ts``, from its :func:`summary`."""
    saved = float(figures.get("saved", 0.0))
    if "rate" in figures:
        saved += figures["rate"] * max(0.0, now_ts - figures["since"])
    return saved


def record(pipe: redis.client.Pipeline, previous: Job | None, job: Job) -> None:
    """Queue the summary and the counters of a write on ``pipe`` (inside its MULTI);
    ``previous`` is the stored version being replaced (``None`` for a new job)."""
    pipe.hset(keys.JOB_SUMMARIES, job.id, json.dumps(summary(job), separators=(",", ":")))
    for placement in job.placements[len(previous.placements) if previous else 0:]:
        if placement.end_reason is PlacementEnd.PREEMPTED:
            pipe.hincrby(keys.METRIC_PREEMPTIONS, placement.offer.provider, 1)
        reason = MIGRATION_REASONS.get(placement.end_reason)
        if reason and not job.state.is_terminal():
            pipe.hincrby(keys.METRIC_MIGRATIONS, reason, 1)


def _ints(values: dict[str, str]) -> dict[str, int]:
    return {k: int(v) for k, v in values.items()}


@dataclass
class JobTotals:
    """Jobs by state (every state present, 0 if none) and USD saved against all-on-demand."""

    by_state: dict[str, int]
    saved_usd: float


class JobStats:
    """Scrape-time reads of the figures above. Thread-safe (one redis-py client)."""

    def __init__(self, client: redis.Redis) -> None:
        self._r = client

    def totals(self, now_ts: float) -> JobTotals:
        """One HGETALL over the summaries (a few ms for 10,000s of jobs). Jobs stored before
        summaries existed are summarized once, from their documents, on first sight."""
        figures = self._r.hgetall(keys.JOB_SUMMARIES)
        if len(figures) < self._r.zcard(keys.JOBS_INDEX):
            figures.update(self._backfill(set(figures)))
        states: Counter[str] = Counter()
        saved = 0.0
        for raw in figures.values():
            try:
                item = json.loads(raw)
            except ValueError:
                continue
            states[item.get("state", "")] += 1
            saved += saved_usd(item, now_ts)
        return JobTotals({s.value: states.get(s.value, 0) for s in JobState}, saved)

    def _backfill(self, known: set[str]) -> dict[str, str]:
        missing = [i for i in self._r.zrange(keys.JOBS_INDEX, 0, -1) if i not in known]
        found: dict[str, str] = {}
        for start in range(0, len(missing), 500):
            ids = missing[start:start + 500]
            for job_id, raw in zip(ids, self._r.mget([keys.job(i) for i in ids]), strict=True):
                if raw:
                    found[job_id] = json.dumps(summary(parse_lenient(Job, raw)),
                                               separators=(",", ":"))
        with self._r.pipeline(transaction=False) as pipe:
            for job_id, value in found.items():
                pipe.hsetnx(keys.JOB_SUMMARIES, job_id, value)  # a newer write wins
            pipe.execute()
        if found:
            log.info("summarized %d jobs stored before job summaries existed", len(found))
        return found

    def counters(self) -> dict[str, dict[str, int]]:
        """``{"preemptions": {provider: n}, "migrations": {reason: n},
        "provider_errors": {"provider|operation|error": n}}``."""
        with self._r.pipeline(transaction=False) as pipe:
            pipe.hgetall(keys.METRIC_PREEMPTIONS)
            pipe.hgetall(keys.METRIC_MIGRATIONS)
            pipe.hgetall(keys.METRIC_PROVIDER_ERRORS)
            preempted, migrated, errors = pipe.execute()
        return {"preemptions": _ints(preempted), "migrations": _ints(migrated),
                "provider_errors": _ints(errors)}

    def count_provider_error(self, provider: str, operation: str, error: str) -> None:
        """Add one failed provider call (HINCRBY: exact across replicas)."""
        self._r.hincrby(keys.METRIC_PROVIDER_ERRORS, f"{provider}|{operation}|{error}", 1)
