"""Step for pending and migrating jobs: choose an offer (policy v1) and record the placement.

The placement, with its client token, is saved *before* anything is launched, so a crash
between the decision and the launch is repaired by the launch step of the next pass.
"""

from __future__ import annotations

from policies.placement import choose_offer
from scheduler.controller.context import Context
from scheduler.controller.transitions import client_token, save, wait
from scheduler.models import Job, JobState, Market, Placement


def _launchable(ctx: Context, provider: str) -> bool:
    """Offers of display-only sources (public catalogs) and of providers no longer configured
    are shown by ``schedctl offers`` but never placed on."""
    try:
        return bool(getattr(ctx.providers.get(provider), "launchable", True))
    except KeyError:
        return False


def place(ctx: Context, job: Job) -> Job | None:
    offers = [o for o in ctx.store.offers.all_offers() if _launchable(ctx, o.provider)]
    decision = choose_offer(job.spec, offers, ctx.store.offers.unavailable())
    if job.on_demand_reference_usd_per_hour is None:
        job.on_demand_reference_usd_per_hour = decision.on_demand_reference_usd_per_hour
    offer = decision.offer
    if offer is None:
        return wait(ctx, job, decision.reason)
    try:
        provider = ctx.providers.get(offer.provider)
    except KeyError as exc:
        return wait(ctx, job, str(exc))
    attempt = job.attempt + 1
    job.attempt = attempt
    job.placement = Placement(
        attempt=attempt, offer=offer, client_token=client_token(job.id, attempt),
        decided_at=ctx.clock(), time_scale=provider.time_scale,
    )
    job.waiting_reason = None
    market = "spot" if offer.market is Market.SPOT else "on-demand"
    job.record(
        JobState.PROVISIONING,
        f"attempt {attempt}: {offer.instance_type} ({offer.gpu_count}x {offer.gpu_model}) "
        f"{offer.provider}/{offer.zone} {market} ${offer.price_usd_per_hour:.4f}/h, "
        f"{decision.reason}",
        offer=offer, at=ctx.clock(),
    )
    return save(ctx, job)
