"""Small shared moves of the reconcile steps: end the current placement, save with a reason."""

from __future__ import annotations

import hashlib
import logging
from datetime import datetime

from core.models import Job, JobEvent, JobState, Market, OfferKey, PlacementEnd
from providers.base import ExactCapacity
from providers.errors import ProviderError
from scheduler.controller.context import Context
from scheduler.controller.pricing import catch_up
from scheduler.timing import OFFER_POLL_S, REPLAY_OFFER_POLL_S, UNAVAILABLE_OFFER_TTL_S

log = logging.getLogger(__name__)


def client_token(job_id: str, attempt: int) -> str:
    """Idempotency token of one launch attempt: stable, short (≤ 64 chars, as EC2 requires)."""
    digest = hashlib.sha256(job_id.encode()).hexdigest()[:24]
    return f"ga-{digest}-{attempt}"


def save(ctx: Context, job: Job) -> Job:
    return ctx.store.jobs.save(job)


def wait(ctx: Context, job: Job, reason: str) -> Job | None:
    """Record why the job cannot progress, once per distinct reason (no event spam)."""
    if job.waiting_reason == reason:
        return None
    job.waiting_reason = reason
    job.events.append(JobEvent(at=ctx.clock(), state=job.state, message=f"waiting: {reason}"))
    return save(ctx, job)


def terminate_current(ctx: Context, job: Job) -> None:
    """Terminate the current placement's instance, or every launched node of a gang (also
    while the gang is still launching), if any (idempotent: terminating a terminated or
    unknown instance succeeds).

    Raises ``ProviderError`` when the provider cannot be reached: the caller leaves the job as
    it is and the next pass tries again (the nodes terminated already are terminated again).
    """
    placement = job.placement
    if placement is None:
        return
    ids = placement.instance_ids()
    if ids:
        provider = ctx.providers.compute(placement.offer.provider)
        for instance_id in ids:
            provider.terminate(instance_id)


def skip_offer(ctx: Context, key: OfferKey) -> float:
    """Skip ``key`` after a capacity refusal or a reclaim, for :data:`UNAVAILABLE_OFFER_TTL_S`,
    or, when its provider lists exactly what it can launch (:class:`ExactCapacity`), only until
    that provider's next offer poll: the stored offers are a poll old, and a slot they still
    show free would be tried again every pass. Returns the seconds skipped."""
    try:
        provider = ctx.providers.get(key.provider)
    except KeyError:
        provider = None
    if isinstance(provider, ExactCapacity):
        ttl = REPLAY_OFFER_POLL_S if provider.time_scale > 1 else OFFER_POLL_S
    else:
        ttl = UNAVAILABLE_OFFER_TTL_S
    ctx.store.offers.mark_unavailable(key, ttl)
    return ttl


def end_placement(ctx: Context, job: Job, reason: PlacementEnd,
                  billed_until: datetime | None = None) -> None:
    """Close the current placement and move it to the history. Billing stops now, or at
    ``billed_until`` when the cloud stopped billing earlier (a reclaim seen late); the held
    offer's price changes up to then are read from price history first, so the bill is
    complete (one Redis read)."""
    placement = job.placement
    if placement is None:
        return
    now = ctx.clock()
    end = now if billed_until is None else min(now, billed_until)
    placement.ended_at = max(end, placement.started_at) if placement.started_at else end
    placement.end_reason = reason
    if placement.started_at is not None:
        catch_up(ctx, placement, placement.ended_at)  # the bill's last price changes
    if placement.offer.market is Market.SPOT:
        ctx.store.offers.record_spot_hours(placement.offer.key, placement.billed_hours())
    if reason is PlacementEnd.PREEMPTED:
        ctx.store.offers.record_preemption(placement.offer.key)
    job.placements.append(placement)
    job.placement = None
    job.stop_request = None  # it was for this placement's agent


def finish(ctx: Context, job: Job, reason: PlacementEnd, state: JobState, message: str) -> Job | None:
    """Terminate the instance, close the placement and move the job to ``state``."""
    try:
        terminate_current(ctx, job)
    except ProviderError as exc:
        return wait(ctx, job, f"terminating the instance failed, retrying: {exc}")
    offer = job.placement.offer if job.placement else None
    end_placement(ctx, job, reason)
    job.waiting_reason = None
    job.record(state, message, offer=offer, at=ctx.clock())
    return save(ctx, job)
