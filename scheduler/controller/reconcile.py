"""The level-triggered reconcile loop: for each active job, one idempotent step per pass.

A pass first describes every instance we own (once, for all jobs), then for each active job
whose control lease it can take, reads the job and dispatches on its state. Replicas split the
jobs evenly between the ones whose passes run. Any crash between two lines leaves Redis and the
clouds in a state the next pass, on any replica, can continue from.
"""

from __future__ import annotations

import logging
from dataclasses import replace

import redis

from providers.errors import ProviderError
from scheduler.controller.budgets import check_budget
from scheduler.controller.context import Context
from scheduler.controller.launching import launch
from scheduler.controller.migrating import consider_move
from scheduler.controller.observing import observe
from scheduler.controller.placing import place
from scheduler.controller.transitions import finish, save
from scheduler.models import TAG_JOB, Job, JobState, PlacementEnd
from scheduler.observability.metrics import RECONCILE_SECONDS, timed
from scheduler.store import LeaseLostError, StaleJobError, keys
from scheduler.timing import JOB_LEASE_TTL_S, RECONCILER_ACTIVE_WINDOW_S

log = logging.getLogger(__name__)


def step(ctx: Context, job: Job) -> Job | None:
    """Take at most one step for ``job``; return the saved job, or ``None`` if nothing changed."""
    if job.state.is_terminal():
        return None
    if job.cancel_requested and job.placement is None:
        job.record(JobState.CANCELLED, "cancelled before any instance ran", at=ctx.clock())
        return save(ctx, job)
    budgeted = check_budget(ctx, job)
    if budgeted is not None:
        return budgeted
    if job.state in (JobState.PENDING, JobState.MIGRATING) or job.placement is None:
        return place(ctx, job)
    if job.placement.instance_id is None:
        if job.cancel_requested:
            # A launch may have reached the cloud although its result was never saved (the
            # cancel bumped the job's version, or a crash): find it by its client token.
            leaked = _launched_anyway(ctx, job)
            if leaked is not None:
                job.placement.instance_id = leaked
            return finish(ctx, job, PlacementEnd.CANCELLED, JobState.CANCELLED,
                          "cancelled before launch" if leaked is None
                          else f"cancelled while launching; instance {leaked} terminated")
        return launch(ctx, job)
    return observe(ctx, job) or consider_move(ctx, job)


def _launched_anyway(ctx: Context, job: Job) -> str | None:
    placement = job.placement
    assert placement is not None
    try:
        found = ctx.providers.get(placement.offer.provider).describe({TAG_JOB: job.id})
    except (ProviderError, KeyError):
        return None
    return next((i.id for i in found
                 if i.client_token == placement.client_token and not i.state.is_gone()), None)


def reconcile_job(ctx: Context, job_id: str) -> Job | None:
    job = ctx.store.jobs.get(job_id)
    if job is None:
        return None
    return step(ctx, job)


@timed(RECONCILE_SECONDS)
def reconcile_pass(ctx: Context) -> int:
    """One pass over every active job. Returns how many jobs changed. Never raises: a failing
    job is logged and retried next pass."""
    leases = ctx.store.leases
    try:
        job_ids = ctx.store.jobs.active_ids()
        replicas = leases.active_holders(keys.RECONCILERS, RECONCILER_ACTIVE_WINDOW_S)
    except redis.RedisError as exc:
        log.warning("reconcile pass skipped, Redis unavailable: %s", exc)
        return 0
    if not job_ids:
        return 0
    ctx.observe()
    changed = 0
    # Replicas split the jobs: each controls at most its share, gives up the leases beyond it
    # (between two steps, so nothing is in flight) and takes no more; the others pick them up.
    share, held = -(-len(job_ids) // max(1, replicas)), 0
    for job_id in job_ids:
        key = keys.job_lease(job_id)
        try:
            if held >= share:
                if leases.holds(key):
                    leases.release(key)
                continue
            lease = leases.acquire(key, JOB_LEASE_TTL_S)
        except redis.RedisError as exc:
            log.warning("reconcile pass cut short, Redis unavailable: %s", exc)
            return changed
        if lease is None:
            continue  # another replica controls this job
        held += 1
        # Every save of this job's step is fenced by this acquisition of its lease (and renews
        # it): had we paused past the TTL while another replica took the job, nothing we write
        # lands. Provider calls need no fence: launches carry a client token, terminate is
        # idempotent.
        job_ctx = replace(ctx, store=replace(
            ctx.store, jobs=ctx.store.jobs.fenced(lease, JOB_LEASE_TTL_S)))
        try:
            job = reconcile_job(job_ctx, job_id)
            changed += job is not None
            # A fresh placement is launched in the same pass. Nothing else is chained: the
            # instances observed at the start of the pass predate this step.
            if job is not None and job.placement is not None and job.placement.instance_id is None \
                    and not job.state.is_terminal():
                changed += reconcile_job(job_ctx, job_id) is not None
            if job is not None and job.state.is_terminal():
                leases.release(key)  # done with it (and with its entry in our lease table)
        except LeaseLostError as exc:
            log.warning("%s; leaving the job to its new holder", exc)
        except StaleJobError:
            log.debug("job %s changed under us; next pass", job_id)
        except Exception:
            log.exception("reconcile of job %s failed; retrying next pass", job_id,
                          extra={"job_id": job_id})
    return changed
