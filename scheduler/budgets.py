"""Budgets as the service applies them: a job's and its owner's spend against their limits.

The rule (alert thresholds, levels, the stop at 100 %) is :mod:`policies.budget`'s; spend and
the per-user limits are read from the store. A user's limit is the ``budget_usd`` of their
user record (:class:`~scheduler.store.users.UserStore`, set with ``schedctl users``) when it
has one, else the daemon config's ``budgets`` entry for the name (published to Redis by the
daemon at start, :attr:`Store.spend <scheduler.store.Store.spend>`); this module is the one
place that merges the two (:func:`budget_settings`, :func:`owner_limit`). Used by submission
(:func:`check_owner_budget`), the controller's budget step (alerts
and stops, :mod:`scheduler.controller.budgets`) and the policy's inputs (the owner's spend
beside the job's, :mod:`scheduler.controller.policy_inputs`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from core.models import Job
from policies.budget import BudgetAlert, budget_level, thresholds_reached
from scheduler.store import Store
from scheduler.store.budgets import BudgetSettings


class BudgetExhausted(ValueError):
    """The owner's budget is already spent: a new job could only be stopped at once."""


def budget_settings(store: Store) -> BudgetSettings:
    """The budget settings in force: the published config's, with each user record's
    ``budget_usd`` over the config's entry for that name. Two Redis reads. Raises
    ``redis.RedisError``."""
    config = store.spend.settings()
    return BudgetSettings(users={**config.users, **store.users.budgets()},
                          webhook=config.webhook)


def owner_limit(store: Store, owner: str) -> float | None:
    """The USD limit over all of ``owner``'s jobs (their user record's, else the config's),
    or ``None`` without one. Raises ``redis.RedisError``."""
    user = store.users.get(owner)
    if user is not None and user.budget_usd is not None:
        return user.budget_usd
    return store.spend.settings().users.get(owner)


def owner_spent(store: Store, settings: BudgetSettings, owner: str) -> float:
    """USD spent by all of ``owner``'s jobs when ``settings`` give the owner a limit; 0.0
    without one (nothing is read). Raises ``redis.RedisError``."""
    return store.spend.owner_total(owner) if owner in settings.users else 0.0


def check_owner_budget(store: Store, owner: str) -> None:
    """Refuse a new job of ``owner`` when their per-user budget (:func:`owner_limit`) is
    already at 100 %. Raises :class:`BudgetExhausted`, ``redis.RedisError``."""
    limit = owner_limit(store, owner)
    if limit is None:
        return
    spent = store.spend.owner_total(owner)
    if budget_level(spent, limit) >= 1.0:
        raise BudgetExhausted(f"owner {owner!r} has spent ${spent:.2f} of the ${limit:.2f} "
                              "budget; an admin raises it (`schedctl users set "
                              f"{owner} --budget USD`, or the daemon config's 'budgets' "
                              "for a user without one) to submit more jobs")


def reached(store: Store, settings: BudgetSettings, job: Job,
            spent_usd: float) -> list[BudgetAlert]:
    """Every threshold ``job`` has reached, raised before or not: of its own ``budget_usd``
    against ``spent_usd`` (its cost so far), and of its owner's limit against the owner's
    ledger. Raises ``redis.RedisError``."""
    limits = []
    if job.spec.budget_usd is not None:
        limits.append(("job", spent_usd, job.spec.budget_usd))
    user_limit = settings.users.get(job.spec.owner)
    if user_limit is not None:
        limits.append(("user", owner_spent(store, settings, job.spec.owner), user_limit))
    return [a for scope, used, limit in limits for a in thresholds_reached(scope, used, limit)]


def alert_tag(alert: BudgetAlert) -> str:
    """How ``Job.budget_alerts`` names a raised alert: ``"job:80"``, ``"user:100"``."""
    return f"{alert.scope}:{round(alert.threshold * 100)}"


def alert_payload(job: Job, alert: BudgetAlert, ran: bool, at: datetime) -> dict[str, Any]:
    """What the webhook receives for ``alert`` of ``job`` (the shape is documented in
    :mod:`scheduler.notify.budget_webhook`); ``ran``: whether the job ever ran."""
    return {"job_id": job.id, "owner": job.spec.owner, "scope": alert.scope,
            "threshold": alert.threshold, "spent_usd": round(alert.spent_usd, 6),
            "budget_usd": alert.limit_usd, "at": at.isoformat(), "message": alert.message(ran)}
