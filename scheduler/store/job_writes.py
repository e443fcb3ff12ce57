"""What every job write publishes besides the job document: its indexes (``ga:jobs``,
``ga:jobs:active``), the new timeline events to the event stream
(:mod:`scheduler.store.events`), the job's figures and counters for ``/metrics``
(:mod:`scheduler.store.job_stats`), and its spend so far in its owner's ledger
(:mod:`scheduler.store.budgets`; so the final cost of a job is there once it ends, not only
what the last budget step saw). They are keys of other hash slots, so they are queued in the
job's outbox in the write's own MULTI and applied after it (:mod:`scheduler.store.outbox`):
each exactly once if and only if the write committed. :func:`after_commit` logs the new
events once the write committed."""

from __future__ import annotations

from core.models import Job
from scheduler.store import events, job_stats, keys
from scheduler.store.budgets import queue_spend
from scheduler.store.outbox import Outbox


def after_write(previous: Job | None, job: Job) -> Outbox:
    """The side writes of replacing ``previous`` (``None``: a new job) with ``job`` (its new
    version), in the order they apply."""
    box = Outbox(job.id, job.version)
    box.plain(keys.JOBS_INDEX, "ZADD", int(job.created_at.timestamp() * 1000), job.id)
    if job.state.is_terminal():
        box.state(keys.ACTIVE_JOBS, "SREM", job.id)
    else:
        box.state(keys.ACTIVE_JOBS, "SADD", job.id)
    events.publish(box, job, len(previous.events) if previous else 0)
    job_stats.record(box, previous, job)
    spent = job.cost_usd()
    if spent > 0:
        queue_spend(box, job.spec.owner, job.id, spent)
    return box


def after_commit(previous: Job | None, job: Job) -> None:
    """Log the timeline events the committed write of ``job`` added (INFO, with extras)."""
    events.log_committed(job, len(previous.events) if previous else 0)
