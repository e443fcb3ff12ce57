"""Step for a placed job without an instance: launch it, idempotently.

A launch is retried with the same client token, so a crash after the provider made the
instance but before we saved its id never makes a second instance. Capacity, quota and auth
failures mark the offer unavailable for a while and send the job back to placement.

A gang launches one instance per node, each with its own client token (found again in this
pass's describe, so no rank is launched twice), all or nothing: a refusal on any node
terminates the nodes launched so far and places the job again; a temporary failure keeps
them and waits, but not past the provider's agent start timeout from the first launch (a
half gang must not bill forever).
"""

from __future__ import annotations

import logging

from core.models import (
    TAG_ATTEMPT,
    TAG_JOB,
    TAG_OWNER,
    TAG_RANK,
    Job,
    JobState,
    PlacementEnd,
)
from providers.base import LaunchRequest
from providers.errors import CapacityError, ProviderError, TransientError
from scheduler.controller import gang
from scheduler.controller.context import Context
from scheduler.controller.transitions import end_placement, save, skip_offer, wait

log = logging.getLogger(__name__)


def launch(ctx: Context, job: Job) -> Job | None:
    placement = job.placement
    assert placement is not None and placement.instance_id is None
    if placement.nodes:
        return _launch_gang(ctx, job)
    instance = ctx.observed.by_client_token(placement.client_token)
    if instance is None:
        provider = ctx.providers.compute(placement.offer.provider)
        try:
            instance = provider.launch(_request(ctx, job, placement.client_token))
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


def _request(ctx: Context, job: Job, client_token: str, rank: int | None = None) -> LaunchRequest:
    """The launch of the current placement's instance with ``client_token``: ownership tags
    (a gang node's ``rank`` too) and its agent's environment."""
    placement = job.placement
    assert placement is not None
    tags = {TAG_OWNER: ctx.owner, TAG_JOB: job.id, TAG_ATTEMPT: str(placement.attempt)}
    if rank is not None:
        tags[TAG_RANK] = str(rank)
    return LaunchRequest(offer=placement.offer, client_token=client_token, tags=tags,
                         agent_env=ctx.bootstrap.env_for(job, placement.attempt, rank or 0),
                         max_price_usd_per_hour=job.spec.max_price_usd_per_hour)


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


def _launch_gang(ctx: Context, job: Job) -> Job | None:
    """Launch every node of the gang without an instance, rank by rank; once all are
    launched, the placement's ``instance_id`` is rank 0's and the job waits for the agents."""
    placement = job.placement
    assert placement is not None
    provider = ctx.providers.compute(placement.offer.provider)
    timeout_s = provider.agent_start_timeout_s
    if placement.started_at is not None and \
            (ctx.clock() - placement.started_at).total_seconds() > timeout_s:
        missing = [n.rank for n in placement.nodes if n.instance_id is None]
        return gang.give_up(ctx, job, f"gang incomplete: rank(s) {gang.ranks_text(missing)} "
                                      f"not launched within {timeout_s:.0f} s")
    launched_now = False
    for node in placement.nodes:
        if node.instance_id is not None:
            continue
        instance = ctx.observed.by_client_token(node.client_token)
        if instance is None:
            try:
                instance = provider.launch(_request(ctx, job, node.client_token, node.rank))
            except TransientError as exc:
                why = f"launch of rank {node.rank} failed temporarily, retrying: {exc}"
                if launched_now:  # keep the nodes launched so far
                    return _wait_saved(ctx, job, why)
                return wait(ctx, job, why)
            except ProviderError as exc:
                kind = "no capacity" if isinstance(exc, CapacityError) else type(exc).__name__
                return gang.give_up(ctx, job, f"launch refused on rank {node.rank} "
                                              f"({kind}: {exc})")
        placement.node_launched(node, instance.id, instance.launched_at)
        launched_now = True
    placement.instance_id = placement.nodes[0].instance_id
    job.waiting_reason = None
    ids = ", ".join(n.instance_id or "" for n in placement.nodes)
    job.record(JobState.PROVISIONING, f"launched {len(placement.nodes)} instances ({ids}); "
               "waiting for every node's agent", offer=placement.offer, at=ctx.clock())
    return save(ctx, job)


def _wait_saved(ctx: Context, job: Job, reason: str) -> Job:
    """:func:`wait`, but the job is saved even when the reason is not new (it changed)."""
    return wait(ctx, job, reason) or save(ctx, job)
