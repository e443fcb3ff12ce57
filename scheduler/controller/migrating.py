"""Step for a running job the observation left unchanged: ask the policy whether moving pays
(:func:`policies.decisions.should_migrate`, with its hysteresis: minimum dwell after a start, no
move back to the offer just left within the ping-pong cooldown).

A move is a stop request saved on the job (the API answers the agent's next report with
``stop``); the agent checkpoints and reports ``checkpointed``; the observing step then ends the
placement as ``moved`` (not ``lost``: it does not count toward the lost streak) and the job goes
to ``migrating``; the next pass places it. Each of these is one saved step, so a crash between
any two is continued by the next pass.
"""

from __future__ import annotations

import numpy as np

from core.models import Job, JobState, StopKind, StopRequest
from policies.decisions import should_migrate
from policies.views import NO_OFFER, REASON_TEXT, Reason
from scheduler.controller.context import Context
from scheduler.controller.explain import compare
from scheduler.controller.policy_inputs import job_inputs, snapshot
from scheduler.controller.transitions import save
from scheduler.timing import MOVE_REVIEW_MIN_S

# Reasons of should_migrate that move the job to another offer now.
_MOVES = (Reason.MIGRATE_PRICE, Reason.MIGRATE_TO_SPOT, Reason.SAFETY_NET)


def consider_move(ctx: Context, job: Job) -> Job | None:
    """Request a checkpoint-and-move when the policy says it pays; ``None`` when the job stays."""
    placement = job.placement
    if job.state is not JobState.RUNNING or job.cancel_requested or job.stop_request is not None \
            or placement is None or placement.instance_id is None:
        return None
    snap = snapshot(ctx)
    # Prices change only at offer polls, and a move takes minutes (checkpoint, relaunch,
    # restore), so one review per placement per poll interval, and at most every
    # MOVE_REVIEW_MIN_S, is enough; this keeps a pass over many running jobs cheap (a review is
    # ~1-3 ms of CPU).
    if not ctx.state.reviews.due((job.id, placement.decided_at.timestamp()),
                                 ctx.clock().timestamp(), max(snap.poll_s, MOVE_REVIEW_MIN_S)):
        return None
    inputs = job_inputs(ctx, snap, job)
    if int(inputs.jobs.current[0]) == NO_OFFER:
        return None  # its offer is not listed now: nothing to compare it with
    decision = should_migrate(inputs.jobs, inputs.market)
    target, reason = int(decision.target[0]), Reason(int(decision.reason[0]))
    if not decision.move[0] or target == NO_OFFER or reason not in _MOVES:
        return None  # a budget stop is the budget step's; stop-on-demand is off in the daemon
    offer = snap.offers[target]
    saving, cost = float(decision.saving_usd[0]), float(decision.move_cost_usd[0])
    why = (f"{REASON_TEXT[reason]}: to {offer.provider}/{offer.zone} {offer.instance_type} "
           f"{offer.market.value} ${offer.price_usd_per_hour:.4f}/h, expected saving "
           f"${saving:.2f} vs move cost ${cost:.2f}")
    if inputs.speeds is not None:
        prices = np.asarray(inputs.market.price_usd_per_hour, dtype=float).reshape(-1)
        current = int(inputs.jobs.current[0])
        why += f"; {compare(inputs.speeds, snap.offers, prices, target, current)}"
    job.stop_request = StopRequest(kind=StopKind.MOVE, reason=why[:500], attempt=placement.attempt,
                                   target=offer.key.series())
    job.record(JobState.CHECKPOINTING, f"{why}; agent checkpointing before the move",
               offer=placement.offer, at=ctx.clock(), kind="migration")
    return save(ctx, job)
