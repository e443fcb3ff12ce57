"""Step for pending and migrating jobs: choose an offer with the policy
(:func:`policies.decisions.decide_placement`) and record the placement. A job that left its
offer because the price rose above its ``max_price_usd_per_hour`` and finds no compliant offer
waits ``pending``, with a reason naming the price and the limit.

The placement, with its client token, is saved *before* anything is launched, so a crash
between the decision and the launch is repaired by the launch step of the next pass.
"""

from __future__ import annotations

import numpy as np

from core.models import Job, JobState, Market, Offer, Placement
from core.models.placements import GangNode, node_token
from policies import risk
from policies.constraints import explain_no_fit
from policies.decisions import decide_placement
from policies.placement import on_demand_reference
from policies.views import NO_OFFER, Reason
from scheduler.controller.budgets import stop_for_budget
from scheduler.controller.context import Context
from scheduler.controller.explain import compare, cost_text
from scheduler.controller.policy_inputs import (
    JobInputs,
    cooling_down,
    job_inputs,
    snapshot,
)
from scheduler.controller.pricing import left_over_max
from scheduler.controller.transitions import client_token, save, wait
from scheduler.store.known_names import KnownNames


def _no_fit(ctx: Context, job: Job, offers: list[Offer]) -> str:
    """Why no offer fits, constraint by constraint, with the spec's names no provider listed."""
    return explain_no_fit(job.spec, offers, ctx.store.offers.unavailable(),
                          KnownNames(ctx.store.redis).names())


def why(inputs: JobInputs, i: int, explanation: str) -> str:
    """The decision's reason with its numbers: effective cost (risk-aware USD per useful
    hour, or per reference-hour of work with the job's speed model) and the offer's monthly
    interruption risk."""
    eff = float(risk.effective_price(inputs.jobs, inputs.market)[0, i])
    per = "/h" if inputs.speeds is None else " per reference-hour"
    risk_pct = float(inputs.table.interruption_risk[i]) * 100
    eligible = int(inputs.eligible.sum())
    return (f"{explanation} (effective ${eff:.4f}{per} at {risk_pct:.0f} % monthly "
            f"interruption risk; {eligible} of {len(inputs.table)} offers eligible)")


def against_cheapest(inputs: JobInputs, offers: list[Offer], i: int) -> str:
    """With the job's speed model: offer ``i`` against the cheapest eligible offer per hour
    (``""`` without a speed model)."""
    speeds = inputs.speeds
    if speeds is None:
        return ""
    prices = np.asarray(inputs.market.price_usd_per_hour, dtype=float).reshape(-1)
    cheapest = int(np.argmin(np.where(inputs.eligible, prices, np.inf)))
    if cheapest == i or not inputs.eligible[cheapest]:
        return f"; {cost_text(speeds, i, float(prices[i]))}, the cheapest per hour too"
    return f"; {compare(speeds, offers, prices, i, cheapest)}"


def gang_nodes(token: str, nodes: int) -> list[GangNode]:
    """The nodes of a placement with client token ``token`` for a job on ``nodes`` instances:
    one per rank, each with its own launch token; none for one node."""
    if nodes <= 1:
        return []
    return [GangNode(rank=r, client_token=node_token(token, r)) for r in range(nodes)]


def place(ctx: Context, job: Job) -> Job | None:
    snap = snapshot(ctx)
    if job.on_demand_reference_usd_per_hour is None:
        job.on_demand_reference_usd_per_hour = on_demand_reference(job.spec, snap.offers)
    inputs = job_inputs(ctx, snap, job)
    decision = decide_placement(inputs.jobs, inputs.market)
    index, reason = int(decision.offer[0]), Reason(int(decision.reason[0]))
    if reason is Reason.BUDGET_STOP:
        return stop_for_budget(ctx, job, decision.explain())
    if index == NO_OFFER:
        explanation = _no_fit(ctx, job, snap.offers) if not np.any(inputs.eligible) \
            else decision.explain()
        cooling = cooling_down(job, ctx.clock())
        if cooling is not None:
            job.state = JobState.PENDING  # checkpointed, waiting as after a max-price stop
            explanation += (f"; not back on {cooling[0]}, left by choice, before "
                            f"{cooling[1]:%Y-%m-%d %H:%M:%S} UTC")
        left = left_over_max(ctx, job)
        if left is not None:
            # It left its offer for the price limit and nothing compliant is listed: it waits,
            # checkpointed, and says for what.
            job.state = JobState.PENDING
            return wait(ctx, job, f"{left}; waiting for a compliant offer ({explanation})")
        return wait(ctx, job, explanation)
    offer = snap.offers[index]
    try:
        provider = ctx.providers.compute(offer.provider)
    except KeyError as exc:
        return wait(ctx, job, str(exc))
    attempt = job.attempt + 1
    job.attempt = attempt
    token = client_token(job.id, attempt)
    job.placement = Placement(
        attempt=attempt, offer=offer, client_token=token,
        decided_at=ctx.clock(), time_scale=provider.time_scale,
        progress_at_start_h=job.progress_h, nodes=gang_nodes(token, job.spec.resources.nodes),
    )
    job.waiting_reason = None
    market = "spot" if offer.market is Market.SPOT else "on-demand"
    nodes = job.spec.resources.nodes
    gang = f"a gang of {nodes} x " if nodes > 1 else ""
    each = " each" if nodes > 1 else ""
    job.record(
        JobState.PROVISIONING,
        f"attempt {attempt}: {gang}{offer.instance_type} ({offer.gpu_count}x "
        f"{offer.gpu_model}) {offer.provider}/{offer.zone} {market} "
        f"${offer.price_usd_per_hour:.4f}/h{each}, "
        f"{why(inputs, index, decision.explain())}{against_cheapest(inputs, snap.offers, index)}",
        offer=offer, at=ctx.clock(),
    )
    return save(ctx, job)
