"""What every job write publishes besides the job document, in the same MULTI: the new
timeline events to the event stream (:mod:`scheduler.store.events`), the job's figures and
counters for ``/metrics`` (:mod:`scheduler.store.job_stats`), and its spend so far in its
owner's ledger (:mod:`scheduler.store.budgets`; so the final cost of a job is there once it
ends, not only what the last budget step saw). So they exist if and only if the write
committed. :func:`after_commit` logs the new events once the write committed."""

from __future__ import annotations

import redis

from core.models import Job
from scheduler.store import events, job_stats
from scheduler.store.budgets import record_spend


def after_write(pipe: redis.client.Pipeline, previous: Job | None, job: Job) -> None:
    """Queue the side writes of replacing ``previous`` (``None``: a new job) with ``job``."""
    events.publish(pipe, job, len(previous.events) if previous else 0)
    job_stats.record(pipe, previous, job)
    spent = job.cost_usd()
    if spent > 0:
        record_spend(pipe, job.spec.owner, job.id, spent)


def after_commit(previous: Job | None, job: Job) -> None:
    """Log the timeline events the committed write of ``job`` added (INFO, with extras)."""
    events.log_committed(job, len(previous.events) if previous else 0)
