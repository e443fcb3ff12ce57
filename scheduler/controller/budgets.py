"""Step for budgets, taken before any other step of an active job: record its spend, raise the
80 / 90 / 100 % alerts once each (job events of kind ``budget``, and the webhook outbox), and
at 100 % of the job's or its owner's limit checkpoint and stop it.

Idempotent: alerts already raised are listed in ``Job.budget_alerts``, saved with the event.
The webhook payload is queued *before* the job is saved, so a crash in between re-queues it
next pass (at-least-once) rather than losing it.
"""

from __future__ import annotations

from core.models import (
    Job,
    JobEvent,
    JobState,
    PlacementEnd,
    StopKind,
    StopRequest,
)
from policies.budget import BudgetAlert
from scheduler.budgets import alert_payload, alert_tag, reached
from scheduler.controller.context import Context
from scheduler.controller.policy_inputs import snapshot
from scheduler.controller.transitions import finish, save
from scheduler.timing import LEDGER_REFRESH_S


def _alerts(ctx: Context, job: Job) -> list[BudgetAlert]:
    """Every threshold reached (of the job's and the owner's limits), raised or not, after
    recording the job's spend in its owner's ledger."""
    now = ctx.clock()
    spent = job.cost_usd(now)
    settings = snapshot(ctx).budgets
    # Owners without a limit get their ledger refreshed once a minute per job, not every
    # pass: that write was most of a pass's Redis time with 1,000 running jobs. A limit set
    # later sees their spend at most a minute stale.
    if spent > 0 and (job.spec.owner in settings.users or ctx.state.ledger_writes.due(
            job.id, now.timestamp(), LEDGER_REFRESH_S)):
        ctx.store.spend.record(job.spec.owner, job.id, spent)
    return reached(ctx.store, settings, job, spent)


def _ever_ran(job: Job) -> bool:
    """Whether any attempt of ``job`` started an instance (only then is there work to keep)."""
    return any(p.started_at is not None for p in job.all_placements())


def check_budget(ctx: Context, job: Job) -> Job | None:
    """Take the budget step for ``job`` if one is due; ``None`` when nothing changed."""
    if job.cancel_requested or job.state.is_terminal():
        return None
    alerts = _alerts(ctx, job)
    ran = _ever_ran(job)
    new = [a for a in alerts if alert_tag(a) not in job.budget_alerts]
    exhausted = [a for a in alerts if a.threshold >= 1.0]
    if new and snapshot(ctx).budgets.webhook:
        for alert in new:
            ctx.store.budget_outbox.push(alert_payload(job, alert, ran, ctx.clock()))
    for alert in new:
        job.budget_alerts.append(alert_tag(alert))
        job.events.append(JobEvent(at=ctx.clock(), state=job.state, message=alert.message(ran),
                                   kind="budget"))
    if exhausted:
        stopped = stop_for_budget(ctx, job, exhausted[0].message().split(";")[0])
        if stopped is not None or not new:
            return stopped
    return save(ctx, job) if new else None


def stop_for_budget(ctx: Context, job: Job, why: str) -> Job | None:
    """Stop ``job`` for its budget: ask the running attempt's agent to checkpoint and stop
    (the final report ends it as ``stopped``), or stop at once when no instance runs.
    ``None`` when a stop is already under way."""
    placement = job.placement
    if placement is not None and placement.instance_id is not None:
        request = job.stop_request
        if request is not None and request.kind is StopKind.BUDGET \
                and request.attempt == placement.attempt:
            return None
        job.stop_request = StopRequest(kind=StopKind.BUDGET, reason=f"budget exhausted ({why})",
                                       attempt=placement.attempt)
        job.record(JobState.CHECKPOINTING, f"budget exhausted ({why}); agent checkpointing "
                   "before the job stops", offer=placement.offer, at=ctx.clock(), kind="budget")
        return save(ctx, job)
    # Nothing runs (or a launch is only decided): orphan collection terminates a launch that
    # reached the cloud anyway, as for a cancel before launch.
    outcome = "stopped (the latest committed checkpoint is kept)" if _ever_ran(job) \
        else "stopped before it ever ran"
    return finish(ctx, job, PlacementEnd.STOPPED, JobState.STOPPED,
                  f"budget exhausted ({why}); {outcome}")
