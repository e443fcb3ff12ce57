"""Step for a placed job without an instance: launch it, idempotently.

A launch is retried with the same client token, so a crash after the provider made the
instance but before we saved its id never makes a second instance. Capacity, quota and auth
failures mark the offer unavailable for a while and send the job back to placement.
"""

from __future__ import annotations

import logging

from core.models import (
    TAG_ATTEMPT,
    TAG_JOB,
    TAG_OWNER,
    Job,
    JobState,
    PlacementEnd,
)
from providers.base import LaunchRequest
from providers.errors import CapacityError, ProviderError, TransientError
from scheduler.controller.context import Context
from scheduler.controller.transitions import end_placement, save, skip_offer, wait

log = logging.getLogger(__name__)


def launch(ctx: Context, job: Job) -> Job | None:
    placement = job.placement
    assert placement is not None and placement.instance_id is None
    instance = ctx.observed.by_client_token(placement.client_token)
    if instance is None:
        provider = ctx.providers.compute(placement.offer.provider)
        request = LaunchRequest(
            offer=placement.offer,
            client_token=placement.client_token,
            tags={TAG_OWNER: ctx.owner, TAG_JOB: job.id, TAG_ATTEMPT: str(placement.attempt)},
            agent_env=ctx.bootstrap.env_for(job, placement.attempt),
            max_price_usd_per_hour=job.spec.max_price_usd_per_hour,
        )
        try:
            instance = provider.launch(request)
        except TransientError as exc:
            return wait(ctx, job, f"launch failed temporarily, retrying: {exc}")
        except ProviderError as exc:
            return _launch_refused(ctx, job, exc)
    placement.instance_id = instance.id
    placement.started_at = instance.launched_at
    job.waiting_reason = None
    job.record(JobState.PROVISIONING, f"launched instance {instance.id}; waiting for its agent",
               offer=placement.offer, at=ctx.clock())
    return save(ctx, job)


def _launch_refused(ctx: Context, job: Job, exc: ProviderError) -> Job:
    placement = job.placement
    assert placement is not None
    skipped = skip_offer(ctx, placement.offer.key)
    kind = "no capacity" if isinstance(exc, CapacityError) else type(exc).__name__
    offer = placement.offer
    end_placement(ctx, job, PlacementEnd.LAUNCH_FAILED)
    job.record(JobState.PENDING, f"launch refused ({kind}: {exc}); offer skipped for "
               f"{skipped:.0f} s", offer=offer, at=ctx.clock())
    return save(ctx, job)
