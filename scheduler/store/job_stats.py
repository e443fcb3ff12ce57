"""Per-job figures and job counters written beside every job write, read by ``/metrics``.

Kept in Redis (not in one process's memory) so every daemon replica sharing the Redis reports
the same values, and queued in the job write's own MULTI (:mod:`scheduler.store.job_writes`),
applied after it through the job's outbox (:mod:`scheduler.store.outbox`), so a counter moves
exactly once per committed change, whichever replica made it. A scrape
reads the figures of the *active* jobs and a few aggregates: its cost follows the number of
active jobs, not of every job ever run.

- ``ga:jobs:summary``: hash active job id → compact JSON ``{"state", "saved", "rate",
  "since", "cpk", "unit"}``: its state, USD saved against all-on-demand up to the UNIX time
  ``since`` (by every placement; costs are the held offers' price series integrated,
  :func:`summary`), for a running placement the USD saved per wall second from ``since`` on,
  at its latest recorded price, and for a running job whose rate on its offer is measured,
  the USD per 1,000 work units at that price (``cpk``) and the unit.
- ``ga:jobs:finished``: hash finished job id → USD it saved (membership: it is counted in
  the two aggregates that follow).
- ``ga:metrics:finished``: hash terminal state → finished jobs in it;
  ``ga:metrics:finished-saved-usd``: USD saved by all finished jobs.
- ``ga:metrics:preemptions``: hash provider → placements that ended preempted.
- ``ga:metrics:migrations``: hash reason (``preemption``, ``price``, ``lost``) → migrations
  started (a placement ended for that reason and the job goes on elsewhere).
- ``ga:metrics:waste``: hash waste alert (``low-utilisation``, ``idle``, ``slow-steps``,
  ``vram-oversized``) → alerts raised (``Job.waste.raised`` grew).

Failed provider calls are counted apart, in :mod:`scheduler.store.provider_errors`.

Jobs stored before these figures existed are counted once, by the first scrape after an
upgrade (:meth:`JobStats.totals`).
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import redis

from core.models import Job, JobState, PlacementEnd, parse_lenient
from scheduler.store import keys, multi, outbox
from scheduler.store.outbox import Outbox

log = logging.getLogger(__name__)

MIGRATION_REASONS = {PlacementEnd.PREEMPTED: "preemption", PlacementEnd.MOVED: "price",
                     PlacementEnd.LOST: "lost"}
# The one-time count of older jobs holds this lock (s) at most; a dead scraper's lapses.
_BACKFILL_LOCK_S = 300


def summary(job: Job) -> dict[str, Any]:
    """The job's compact figures (see the module docstring); ``saved`` in USD, ``rate`` in USD
    per wall second (market hours run ``time_scale`` times faster on a replayed market).

    Saved = the all-on-demand reference × billed hours − :meth:`Placement.cost_usd` (the held
    offers' recorded price series integrated). For the running placement, ``saved`` counts up
    to its latest recorded price change (or its start), from which its price, and so
    ``rate``, holds until the next change, which is recorded in a job write like this one."""
    out: dict[str, Any] = {"state": job.state.value, **work_cost(job)}
    ref = job.on_demand_reference_usd_per_hour
    if ref is None:
        return out
    saved = 0.0
    for p in job.all_placements():
        if p.started_at is None:
            continue
        if p.ended_at is not None:
            saved += ref * p.billed_hours() - p.cost_usd()
            continue
        since = max([p.started_at] + [c.at for c in p.price_changes[-1:]])
        saved += ref * p.billed_hours(since) - p.cost_usd(since)
        # The reference is the whole gang's (N nodes'), as is the bill.
        out["rate"] = (ref - p.price_usd_per_hour() * p.billed_nodes()) * p.time_scale / 3600.0
        out["since"] = since.timestamp()
    out["saved"] = round(saved, 6)
    return out


def work_cost(job: Job) -> dict[str, Any]:
    """``{"cpk", "unit"}``: USD per 1,000 work units of a running job at its held offer's
    latest recorded price and its measured rate there (units per market hour,
    :meth:`~core.models.jobs.JobProgress.rate`); ``{}`` when it is not running or its rate
    there is not measured."""
    p = job.placement
    latest = job.progress.latest
    if job.state is not JobState.RUNNING or p is None or p.started_at is None or latest is None:
        return {}
    evidence = job.progress.rate(p.offer.gpu_model, p.offer.gpu_count)
    if evidence is None or evidence.hours <= 0 or evidence.units <= 0:
        return {}
    units_per_h = evidence.units / evidence.hours
    # Every node of a gang is paid for the work its ranks do together.
    return {"cpk": round(p.price_usd_per_hour() * p.billed_nodes() * 1000.0 / units_per_h, 9),
            "unit": latest.unit.value}


def saved_usd(figures: dict[str, Any], now_ts: float) -> float:
    """USD a job saved up to the UNIX time ``now_ts``, from its :func:`summary`."""
    saved = float(figures.get("saved", 0.0))
    if "rate" in figures:
        saved += figures["rate"] * max(0.0, now_ts - figures["since"])
    return saved


def record(outbox: Outbox, previous: Job | None, job: Job) -> None:
    """Queue the figures and counters of a write on ``outbox`` (in the job write's MULTI;
    figures are job-state ops, counters deltas applied at most once); ``previous`` is the
    stored version being replaced (``None`` for a new job)."""
    figures = summary(job)
    was_finished = previous is not None and previous.state.is_terminal()
    before = summary(previous) if was_finished else None
    if job.state.is_terminal():
        saved = saved_usd(figures, 0.0)  # no running placement: nothing accrues any more
        outbox.state(keys.JOB_SUMMARIES, "HDEL", job.id)
        outbox.state(keys.JOBS_FINISHED, "HSET", job.id, repr(saved))
        if before is None:
            outbox.once(keys.METRIC_FINISHED_STATES, "HINCRBY", job.state.value, 1)
        elif before["state"] != job.state.value:  # rewritten after it finished (rare)
            outbox.once(keys.METRIC_FINISHED_STATES, "HINCRBY", before["state"], -1)
            outbox.once(keys.METRIC_FINISHED_STATES, "HINCRBY", job.state.value, 1)
        delta = saved - (saved_usd(before, 0.0) if before else 0.0)
        if delta:
            outbox.once(keys.METRIC_FINISHED_SAVED, "INCRBYFLOAT", repr(delta))
    else:
        outbox.state(keys.JOB_SUMMARIES, "HSET", job.id,
                     json.dumps(figures, separators=(",", ":")))
    _count_closed_placements(outbox, previous, job)
    for alert, raised in job.waste.raised.items():
        delta = raised - (previous.waste.raised.get(alert, 0) if previous else 0)
        if delta > 0:
            outbox.once(keys.METRIC_WASTE, "HINCRBY", alert, delta)


def _count_closed_placements(outbox: Outbox, previous: Job | None, job: Job) -> None:
    """Count the placements closed since ``previous``. One that ended for a migration reason
    is a migration when the job went on: it is not finished, or a later attempt exists (when
    an older job is counted at once)."""
    placements = job.all_placements()
    for index in range(len(previous.placements) if previous else 0, len(job.placements)):
        placement = placements[index]
        if placement.end_reason is PlacementEnd.PREEMPTED:
            outbox.once(keys.METRIC_PREEMPTIONS, "HINCRBY", placement.offer.provider, 1)
        reason = MIGRATION_REASONS.get(placement.end_reason)
        if reason and (not job.state.is_terminal() or index + 1 < len(placements)):
            outbox.once(keys.METRIC_MIGRATIONS, "HINCRBY", reason, 1)


def _ints(values: dict[str, str]) -> dict[str, int]:
    return {k: int(v) for k, v in values.items()}


# Running jobs whose cost per 1,000 units /metrics lists at most (one series each, by job
# id): bounds the scrape's label cardinality whatever the number of jobs.
WORK_COST_JOBS_MAX = 500


@dataclass
class JobTotals:
    """Jobs by state (every state present, 0 if none), USD saved against all-on-demand, and
    ``(job id, unit, USD per 1,000 units)`` of running jobs with a measured rate (the first
    :data:`WORK_COST_JOBS_MAX` by job id)."""

    by_state: dict[str, int]
    saved_usd: float
    work_cost: list[tuple[str, str, float]] = field(default_factory=list)


class JobStats:
    """Scrape-time reads of the figures above. Thread-safe (one redis-py client)."""

    def __init__(self, client: redis.Redis) -> None:
        self._r = client

    def totals(self, now_ts: float) -> JobTotals:
        """Jobs by state and USD saved as of the UNIX time ``now_ts``: one HVALS over the
        active jobs' figures plus two small reads (~5 ms for 1,000 active jobs)."""
        if not self._r.exists(keys.METRIC_BACKFILLED):
            self._backfill()
        with self._r.pipeline(transaction=False) as pipe:
            pipe.hgetall(keys.JOB_SUMMARIES)
            pipe.hgetall(keys.METRIC_FINISHED_STATES)
            pipe.get(keys.METRIC_FINISHED_SAVED)
            active, finished, finished_saved = pipe.execute()
        states: Counter[str] = Counter(_ints(finished))
        saved = float(finished_saved or 0.0)
        work_cost = []
        for job_id, raw in active.items():
            try:
                item = json.loads(raw)
            except ValueError:
                continue
            states[item.get("state", "")] += 1
            saved += saved_usd(item, now_ts)
            if "cpk" in item:
                work_cost.append((job_id, str(item.get("unit", "")), float(item["cpk"])))
        work_cost.sort()
        return JobTotals({s.value: states.get(s.value, 0) for s in JobState}, saved,
                         work_cost[:WORK_COST_JOBS_MAX])

    def _backfill(self) -> None:
        """Count, once, the jobs stored before these figures existed (an upgrade). Each job
        is counted in a transaction watching its document, and skipped when a write already
        counted it, so a job written meanwhile is never counted twice."""
        if not self._r.set(keys.METRIC_BACKFILLED, "running", nx=True, ex=_BACKFILL_LOCK_S):
            return  # another scrape is at it; this one reports what is counted so far
        counted = 0
        for job_id in self._r.zrange(keys.JOBS_INDEX, 0, -1):
            counted += self._count_once(job_id)
        self._r.set(keys.METRIC_BACKFILLED, "done")
        if counted:
            log.info("counted %d jobs stored before the /metrics figures existed", counted)

    def _count_once(self, job_id: str) -> bool:
        """Queue the counting of one older job in its outbox, in a transaction over its slot
        (its document watched), unless it is counted or a write of it is pending;
        then apply it."""
        with multi.transaction(self._r) as pipe:
            try:
                pipe.watch(keys.job(job_id))
                raw = pipe.get(keys.job(job_id))
                if not raw or pipe.llen(keys.job_outbox(job_id)):
                    return False
                # Other slots: read apart; a write meanwhile changes the document (WATCH).
                if self._r.hexists(keys.JOB_SUMMARIES, job_id) \
                        or self._r.hexists(keys.JOBS_FINISHED, job_id):
                    return False
                job = parse_lenient(Job, raw)
                box = Outbox(job_id, job.version)
                record(box, None, job)
                outbox.mark_dirty(self._r, box.entry_id)
                pipe.multi()
                pipe.rpush(keys.job_outbox(job_id), box.entry())
                pipe.lrange(keys.job_outbox(job_id), 0, -1)
                entries = pipe.execute()[-1]
            except redis.WatchError:
                return False  # written meanwhile: that write counted it
        outbox.apply(self._r, job_id, entries)
        return True

    def counters(self) -> dict[str, dict[str, int]]:
        """``{"preemptions": {provider: n}, "migrations": {reason: n}, "waste": {alert:
        n}}``."""
        with self._r.pipeline(transaction=False) as pipe:
            pipe.hgetall(keys.METRIC_PREEMPTIONS)
            pipe.hgetall(keys.METRIC_MIGRATIONS)
            pipe.hgetall(keys.METRIC_WASTE)
            preempted, migrated, wasted = pipe.execute()
        return {"preemptions": _ints(preempted), "migrations": _ints(migrated),
                "waste": _ints(wasted)}
