"""Spend per owner (user), for per-user budgets, and the budget settings every replica reads.

Each job's spend is written as an absolute value (``HSET job_id usd``) by its reconcile step,
so a repeated or crashed step never double-counts; a user's spend is the sum over their jobs,
stale by at most one reconcile pass for jobs other than the one being decided.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import redis

from scheduler.store import keys


@dataclass(frozen=True)
class BudgetSettings:
    """Per-user limits (owner → USD, > 0) and whether budget alerts go to a webhook."""

    users: dict[str, float] = field(default_factory=dict)
    webhook: bool = False


class SpendStore:
    def __init__(self, client: redis.Redis) -> None:
        self._r = client

    def record(self, owner: str, job_id: str, spent_usd: float) -> None:
        """Set ``job_id``'s spend (USD, absolute) in its owner's ledger."""
        self._r.hset(keys.owner_spend(owner), job_id, repr(float(spent_usd)))

    def owner_total(self, owner: str) -> float:
        """USD spent by all of ``owner``'s jobs (as of their last reconcile step)."""
        return sum(float(v) for v in self._r.hvals(keys.owner_spend(owner)))

    def publish_settings(self, settings: BudgetSettings) -> None:
        """Make ``settings`` the budgets every replica's controller applies (the daemon does
        this at start, from its config file; the last replica started wins)."""
        self._r.set(keys.BUDGET_SETTINGS, json.dumps({"users": settings.users,
                                                      "webhook": settings.webhook}))

    def settings(self) -> BudgetSettings:
        raw = self._r.get(keys.BUDGET_SETTINGS)
        if not raw:
            return BudgetSettings()
        data = json.loads(raw)
        return BudgetSettings(users={k: float(v) for k, v in data.get("users", {}).items()},
                              webhook=bool(data.get("webhook")))
