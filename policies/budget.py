"""Budgets: a per-job and a per-user spending limit, alerts at 80 %, 90 % and 100 %.

At 100 % of either limit the job must checkpoint and stop (the decision engine answers
``NO_OFFER`` with :attr:`~policies.views.Reason.BUDGET_STOP`). The caller sums a user's spend over
all their jobs; these functions only compare numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

THRESHOLDS = (0.8, 0.9, 1.0)
"""Alert levels as fractions of the limit."""


@dataclass(frozen=True)
class BudgetAlert:
    """One threshold crossed by one job: ``scope`` is ``"job"`` or ``"user"``, ``threshold`` one
    of :data:`THRESHOLDS`, amounts in USD."""

    job: int
    scope: str
    threshold: float
    spent_usd: float
    limit_usd: float

    def message(self, ran: bool = True) -> str:
        """The alert as one line; ``ran``: whether the job ever ran (at 100 % a job that
        never ran has nothing to checkpoint)."""
        pct = round(self.threshold * 100)
        tail = ""
        if self.threshold >= 1.0:
            tail = "; checkpointing and stopping" if ran else "; stopping (the job never ran)"
        return (f"{self.scope} budget at {pct} %: ${self.spent_usd:.2f} of "
                f"${self.limit_usd:.2f}{tail}")


def budget_level(spent_usd: np.ndarray, limit_usd: np.ndarray) -> np.ndarray:
    """Highest threshold reached, ``(n,)``: 0, 0.8, 0.9 or 1.0. No limit (``inf``) gives 0.

    Raises:
        ValueError: a limit is negative or nan.
    """
    spent = np.asarray(spent_usd, dtype=float)
    limit = np.asarray(limit_usd, dtype=float)
    if np.any(np.isnan(limit)) or np.any(limit < 0):
        raise ValueError("budget limits must be >= 0 (inf for none)")
    level = np.zeros(np.broadcast(spent, limit).shape)
    for t in THRESHOLDS:
        level = np.where(spent >= t * limit, t, level)
    return np.where(np.isinf(limit), 0.0, level)


def thresholds_reached(scope: str, spent_usd: float, limit_usd: float) -> list[BudgetAlert]:
    """One alert per threshold of ``limit_usd`` (USD) that ``spent_usd`` has reached, lowest
    first, for one job (``job`` index 0); none without a limit (``inf``)."""
    level = float(budget_level(spent_usd, limit_usd))
    return [BudgetAlert(0, scope, t, spent_usd, limit_usd) for t in THRESHOLDS if t <= level]


def crossed(prev_spent_usd: np.ndarray, spent_usd: np.ndarray, limit_usd: np.ndarray,
            scope: str = "job") -> list[BudgetAlert]:
    """Alerts for every threshold crossed between two spend readings (oldest threshold first).

    A jump over several thresholds at once yields one alert per threshold. Arrays ``(n,)``.
    """
    prev = budget_level(prev_spent_usd, limit_usd)
    now = budget_level(spent_usd, limit_usd)
    spent = np.broadcast_to(spent_usd, now.shape)
    limit = np.broadcast_to(limit_usd, now.shape)
    alerts = []
    for i in np.flatnonzero(now > prev):
        for t in THRESHOLDS:
            if prev[i] < t <= now[i]:
                alerts.append(BudgetAlert(int(i), scope, t, float(spent[i]), float(limit[i])))
    return alerts


def must_stop(spent_usd: np.ndarray, budget_usd: np.ndarray, user_spent_usd: np.ndarray,
              user_budget_usd: np.ndarray) -> np.ndarray:
    """``(n,)`` bool: the job's or its user's spend reached 100 % of the limit."""
    return (budget_level(spent_usd, budget_usd) >= 1.0) | \
        (budget_level(user_spent_usd, user_budget_usd) >= 1.0)
