"""Step for a running job the observation left unchanged: ask the policy whether moving pays
(:func:`policies.decisions.should_migrate`, with its hysteresis: minimum dwell after a start, no
move back to the offer just left within the ping-pong cooldown).

A move is a stop request saved on the job (the API answers the agent's next report with
``stop``); the agent checkpoints and reports ``checkpointed``; the observing step then ends the
placement as ``moved`` (not ``lost``: it does not count toward the lost streak) and the job goes
to ``migrating``; the next pass places it. Each of these is one saved step, so a crash between
any two is continued by the next pass.

Reviews are decided many jobs at a time: in a reconcile pass a due review is collected
(``ctx.deferred_reviews``) and the pass decides a batch's reviews together
(:func:`decide_moves`: the jobs sharing a market view in one group, the groups in stacked
policy calls, :func:`policies.decisions.should_migrate_many`; the policy's rows are
independent), then saves each move under its job's lease (:func:`request_move`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.models import Job, JobState, StopKind, StopRequest
from policies.decisions import should_migrate_many
from policies.views import NO_OFFER, REASON_TEXT, Reason
from scheduler.controller.context import Context
from scheduler.controller.explain import compare
from scheduler.controller.policy_inputs import inputs_many, snapshot
from scheduler.controller.transitions import save
from scheduler.timing import MOVE_REVIEW_MIN_S

# Reasons of should_migrate that move the job to another offer now.
_MOVES = (Reason.MIGRATE_PRICE, Reason.MIGRATE_TO_SPOT, Reason.SAFETY_NET)


@dataclass(frozen=True)
class Move:
    """A move the policy decided: why (the stop request's reason and the event's text, with
    the target, the saving and the move cost) and the target offer's series."""

    why: str
    target: str


def consider_move(ctx: Context, job: Job) -> Job | None:
    """Request a checkpoint-and-move when the policy says it pays; ``None`` when the job stays
    or its review is deferred to the pass (``ctx.deferred_reviews``)."""
    if not _review_due(ctx, job):
        return None
    if ctx.deferred_reviews is not None:
        ctx.deferred_reviews.append((ctx, job))
        return None
    (move,) = decide_moves([(ctx, job)])
    return request_move(ctx, job, move) if move is not None else None


def _review_due(ctx: Context, job: Job) -> bool:
    placement = job.placement
    if job.state is not JobState.RUNNING or job.cancel_requested or job.stop_request is not None \
            or placement is None or placement.instance_id is None:
        return False
    snap = snapshot(ctx)
    # Prices change only at offer polls, and a move takes minutes (checkpoint, relaunch,
    # restore), so one review per placement per poll interval, and at most every
    # MOVE_REVIEW_MIN_S, is enough.
    return ctx.state.reviews.due((job.id, placement.decided_at.timestamp()),
                                 ctx.clock().timestamp(), max(snap.poll_s, MOVE_REVIEW_MIN_S))


def decide_moves(items: list[tuple[Context, Job]]) -> list[Move | None]:
    """For each ``(context, running job)``, in order, the move the policy decides now, or
    ``None`` when the job stays. The market and the clock are the first context's (the
    contexts of one pass share them). Raises ``redis.RedisError`` (an owner's spend)."""
    if not items:
        return []
    ctx = items[0][0]
    snap = snapshot(ctx)
    jobs = [job for _, job in items]
    moves: list[Move | None] = [None] * len(items)
    groups = inputs_many(ctx.store, snap, jobs, ctx.clock())
    decisions = should_migrate_many([(inputs.jobs, inputs.market) for _, inputs in groups])
    for (members, inputs), decision in zip(groups, decisions, strict=True):
        prices = np.asarray(inputs.market.price_usd_per_hour, dtype=float).reshape(-1)
        for row, i in enumerate(members):
            current, target = int(inputs.jobs.current[row]), int(decision.target[row])
            reason = Reason(int(decision.reason[row]))
            if current == NO_OFFER:
                continue  # its offer is not listed now: nothing to compare it with
            if not decision.move[row] or target == NO_OFFER or reason not in _MOVES:
                continue  # a budget stop is the budget step's; stop-on-demand is off here
            offer = snap.offers[target]
            saving, cost = float(decision.saving_usd[row]), float(decision.move_cost_usd[row])
            why = (f"{REASON_TEXT[reason]}: to {offer.provider}/{offer.zone} "
                   f"{offer.instance_type} {offer.market.value} "
                   f"${offer.price_usd_per_hour:.4f}/h, expected saving ${saving:.2f} vs move "
                   f"cost ${cost:.2f}")
            if inputs.speeds is not None:
                why += f"; {compare(inputs.speeds, snap.offers, prices, target, current)}"
            moves[i] = Move(why=why, target=offer.key.series())
    return moves


def request_move(ctx: Context, job: Job, move: Move) -> Job | None:
    """Save ``move`` on ``job``: a stop request and a ``migration`` event (the job goes to
    ``checkpointing``). Raises what :func:`~scheduler.controller.transitions.save` raises."""
    placement = job.placement
    assert placement is not None
    job.stop_request = StopRequest(kind=StopKind.MOVE, reason=move.why[:500],
                                   attempt=placement.attempt, target=move.target)
    job.record(JobState.CHECKPOINTING, f"{move.why}; agent checkpointing before the move",
               offer=placement.offer, at=ctx.clock(), kind="migration")
    return save(ctx, job)
