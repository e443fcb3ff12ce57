"""The level-triggered reconcile loop: for each active job, one idempotent step per pass.

A pass first describes every instance we own (once, for all jobs), then for each active job
whose control lease it can take, reads the job and dispatches on its state. Replicas split the
jobs evenly between the ones whose passes run. Any crash between two lines leaves Redis and the
clouds in a state the next pass, on any replica, can continue from.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

import redis

from core.models import TAG_JOB, Job, JobState, PlacementEnd
from providers.errors import ProviderError
from scheduler.controller.budgets import check_budget
from scheduler.controller.context import Context
from scheduler.controller.gang import prefetch_reports
from scheduler.controller.launching import launch
from scheduler.controller.migrating import (
    Move,
    consider_move,
    decide_moves,
    request_move,
)
from scheduler.controller.observing import observe
from scheduler.controller.placing import place
from scheduler.controller.pricing import hold_price, settle
from scheduler.controller.transitions import end_placement, finish, save, wait
from scheduler.observability.metrics import RECONCILE_SECONDS, timed
from scheduler.store import Lease, LeaseLostError, Leases, StaleJobError, keys
from scheduler.timing import (
    JOB_LEASE_TTL_S,
    RECONCILE_BATCH,
    RECONCILER_ACTIVE_WINDOW_S,
)

log = logging.getLogger(__name__)


def step(ctx: Context, job: Job) -> Job | None:
    """Take at most one step for ``job``; return the saved job, or ``None`` if nothing changed."""
    if job.state.is_terminal():
        return None
    if job.cancel_requested and job.placement is None:
        job.record(JobState.CANCELLED, "cancelled before any instance ran", at=ctx.clock())
        return save(ctx, job)
    unconfigured = _unconfigured_provider(ctx, job)
    if unconfigured is not None:
        return _provider_not_configured(ctx, job, unconfigured)
    settled = settle(ctx, job)
    if settled is not None:
        return settled
    budgeted = check_budget(ctx, job)
    if budgeted is not None:
        return budgeted
    if job.state in (JobState.PENDING, JobState.MIGRATING) or job.placement is None:
        return place(ctx, job)
    if job.placement.instance_id is None:  # not launched yet (a gang: not every node)
        if job.cancel_requested:
            # A launch may have reached the cloud although its result was never saved (the
            # cancel bumped the job's version, or a crash): find it by its client token.
            leaked = _launched_anyway(ctx, job)
            return finish(ctx, job, PlacementEnd.CANCELLED, JobState.CANCELLED,
                          "cancelled before launch" if not leaked
                          else f"cancelled while launching; instance(s) {', '.join(leaked)} "
                               "terminated")
        return launch(ctx, job)
    return observe(ctx, job) or hold_price(ctx, job) or consider_move(ctx, job)


def _unconfigured_provider(ctx: Context, job: Job) -> str | None:
    """Why no configured adapter launches for the provider of the job's placement (the daemon
    was restarted with a config without it); ``None`` when one does or there is no placement."""
    if job.placement is None:
        return None
    try:
        ctx.providers.compute(job.placement.offer.provider)
    except KeyError as exc:
        return str(exc.args[0])
    return None


def _provider_not_configured(ctx: Context, job: Job, why: str) -> Job | None:
    """An attempt that never launched is given up and the job placed again. A launched
    instance can be neither observed nor terminated from here, so the job waits rather than
    run twice; a cancel then ends it, saying that the instance must be terminated at the
    provider."""
    placement = job.placement
    assert placement is not None
    name = placement.offer.provider
    launched = ", ".join(placement.instance_ids())
    if not launched:
        end_placement(ctx, job, PlacementEnd.LAUNCH_FAILED)
        job.record(JobState.PENDING, f"{why}; placing the job again", at=ctx.clock())
        return save(ctx, job)
    if job.cancel_requested:
        end_placement(ctx, job, PlacementEnd.CANCELLED)
        job.record(JobState.CANCELLED,
                   f"cancelled; instance {launched} was not terminated ({why}): "
                   f"terminate it at {name}", at=ctx.clock())
        return save(ctx, job)
    return wait(ctx, job, f"{why}: instance {launched} can be neither observed "
                          f"nor terminated; configure {name} again, or cancel the job and "
                          f"terminate the instance at {name}")


def _launched_anyway(ctx: Context, job: Job) -> list[str]:
    """The instances of the current (still launching) placement that reached the cloud: a
    one-node launch whose result was never saved, or a gang's launched nodes (saved or not).
    They are put in the placement, so that ending it terminates them."""
    placement = job.placement
    assert placement is not None
    try:
        found = ctx.providers.compute(placement.offer.provider).describe({TAG_JOB: job.id})
    except (ProviderError, KeyError):
        found = []
    live = {i.client_token: i for i in found if not i.state.is_gone()}
    if not placement.nodes:
        leaked = live.get(placement.client_token)
        if leaked is not None:
            placement.instance_id = leaked.id
        return [leaked.id] if leaked is not None else []
    for node in placement.nodes:
        reached = live.get(node.client_token)
        if node.instance_id is None and reached is not None:
            placement.node_launched(node, reached.id, reached.launched_at)
    return placement.instance_ids()


def reconcile_job(ctx: Context, job_id: str) -> Job | None:
    job = ctx.store.jobs.get(job_id)
    if job is None:
        return None
    return step(ctx, job)


def _our_share(leases: Leases, job_ids: list[str], replicas: int) -> list[str]:
    """The jobs this replica controls in this pass, in order: those whose lease it holds, then
    free ones, up to its share, ceil(jobs / replicas). The leases it holds beyond its share are
    given up now (between two steps, so nothing is in flight); another replica takes them."""
    share = -(-len(job_ids) // max(1, replicas))
    holders = leases.holders([keys.job_lease(j) for j in job_ids])
    ours = [j for j, h in zip(job_ids, holders, strict=True) if h == leases.holder]
    free = [j for j, h in zip(job_ids, holders, strict=True) if h is None]
    leases.release_many([keys.job_lease(j) for j in ours[share:]])
    wanted = set(ours[:share] + free[:max(0, share - len(ours))])
    return [j for j in job_ids if j in wanted]


def _reconcile_leased(ctx: Context, lease: Lease, job: Job) -> int:
    """One step of ``job`` under ``lease``; returns how many saves changed it (0-2). A due
    price-move review is left in ``ctx.deferred_reviews`` (with the job's fenced context)."""
    # Every save of this step is fenced by this acquisition of the job's lease (and renews
    # it): had we paused past the TTL while another replica took the job, nothing we write
    # lands. Provider calls need no fence: launches carry a client token, terminate is
    # idempotent.
    job_ctx = replace(ctx, store=replace(
        ctx.store, jobs=ctx.store.jobs.fenced(lease, JOB_LEASE_TTL_S)))
    changed = 0

    def run() -> None:
        nonlocal changed
        saved = step(job_ctx, job)
        changed += saved is not None
        # A fresh placement is launched in the same pass. Nothing else is chained: the
        # instances observed at the start of the pass predate this step.
        if saved is not None and saved.placement is not None \
                and saved.placement.instance_id is None and not saved.state.is_terminal():
            changed += reconcile_job(job_ctx, job.id) is not None
        if saved is not None and saved.state.is_terminal():
            ctx.store.leases.release(lease.key)  # done with it (and its entry in our table)

    _guarded(job, run)
    return changed


def _guarded(job: Job, run: Callable[[], None]) -> None:
    """Run ``run`` (a step of ``job``); a lost lease, a stale job or any other failure is
    logged, and the job is left to the next pass."""
    try:
        run()
    except LeaseLostError as exc:
        log.warning("%s; leaving the job to its new holder", exc)
    except StaleJobError:
        log.debug("job %s changed under us; next pass", job.id)
    except Exception:
        log.exception("reconcile of job %s failed; retrying next pass", job.id,
                      extra={"job_id": job.id})


def _review_deferred(items: list[tuple[Context, Job]]) -> int:
    """Decide the price-move reviews a batch deferred, together, and save each move under
    its job's context; returns how many jobs were saved. When deciding them together fails,
    each is decided alone (so one job's failure stays its own)."""
    if not items:
        return 0
    changed = 0

    def request(job_ctx: Context, job: Job, move: Move | None) -> None:
        nonlocal changed
        if move is not None:
            changed += request_move(job_ctx, job, move) is not None

    try:
        moves = decide_moves(items)
    except Exception:
        log.warning("deciding %d price-move reviews together failed; one by one", len(items),
                    exc_info=True)
        for job_ctx, job in items:
            _guarded(job, lambda c=job_ctx, j=job: request(c, j, decide_moves([(c, j)])[0]))
        return changed
    for (job_ctx, job), move in zip(items, moves, strict=True):
        if move is not None:
            _guarded(job, lambda c=job_ctx, j=job, m=move: request(c, j, m))
    return changed


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
    ctx = ctx.for_pass()
    try:
        mine = _our_share(leases, job_ids, replicas)
    except redis.RedisError as exc:
        log.warning("reconcile pass skipped, Redis unavailable: %s", exc)
        return 0
    changed = 0
    # In batches: one round trip takes (or renews) a batch's leases, one reads its jobs, just
    # before their steps, so a slow pass does not outrun the leases it took.
    for first in range(0, len(mine), RECONCILE_BATCH):
        batch = mine[first:first + RECONCILE_BATCH]
        try:
            taken = leases.acquire_many([keys.job_lease(j) for j in batch], JOB_LEASE_TTL_S)
            jobs = ctx.store.jobs.get_many(batch)
            ctx.observed.reports = prefetch_reports(ctx.store, jobs.values())
        except redis.RedisError as exc:
            log.warning("reconcile pass cut short, Redis unavailable: %s", exc)
            return changed
        # The batch's due price-move reviews are decided together after its steps.
        batch_ctx = replace(ctx, deferred_reviews=[])
        for job_id in batch:
            lease, job = taken[keys.job_lease(job_id)], jobs.get(job_id)
            if lease is not None and job is not None:  # else another replica took it meanwhile
                changed += _reconcile_leased(batch_ctx, lease, job)
        changed += _review_deferred(batch_ctx.deferred_reviews)
    return changed
