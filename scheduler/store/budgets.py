"""Budget state in Redis: spend per owner (user), the budget settings every replica reads, and
the outbox of budget alerts waiting for the webhook.

Each job's spend is written as an absolute value (``HSET job_id usd``) by its reconcile step,
so a repeated or crashed step never double-counts; a user's spend is the sum over their jobs,
stale by at most one reconcile pass for jobs other than the one being decided.

The outbox is three lists under one hash tag (so moves between them are atomic on Redis
Cluster too): queued alerts (``keys.BUDGET_OUTBOX``), the ones a delivery run
took and has not confirmed (``keys.BUDGET_INFLIGHT``), and the ones given up on
(``keys.BUDGET_DEAD``). Items are JSON text; how a delivery run moves them is
:mod:`scheduler.notify.budget_webhook`'s.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import redis

from scheduler.store import keys
from scheduler.store.outbox import Outbox


@dataclass(frozen=True)
class BudgetSettings:
    """Per-user limits (owner → USD, > 0) and whether budget alerts go to a webhook."""

    users: dict[str, float] = field(default_factory=dict)
    webhook: bool = False


def record_spend(client: redis.Redis | redis.client.Pipeline, owner: str, job_id: str,
                 spent_usd: float) -> None:
    """Set (or queue, on a pipeline) ``job_id``'s spend in its owner's ledger (USD, absolute)."""
    client.hset(keys.owner_spend(owner), job_id, repr(float(spent_usd)))


def queue_spend(outbox: Outbox, owner: str, job_id: str, spent_usd: float) -> None:
    """Queue on a job write's ``outbox`` the setting of ``job_id``'s spend in its owner's
    ledger to ``spent_usd`` (USD, absolute) as of that job version: a write applied late
    (after a crash) never replaces what a newer version recorded. Not a maximum: a running
    placement's cost counts up to now, its final bill only up to its end."""
    outbox.state(keys.owner_spend(owner), "HSET", job_id, repr(float(spent_usd)))


class SpendStore:
    """Spend per owner and the published :class:`BudgetSettings`."""

    def __init__(self, client: redis.Redis) -> None:
        self._r = client

    def record(self, owner: str, job_id: str, spent_usd: float) -> None:
        """Set ``job_id``'s spend (USD, absolute) in its owner's ledger."""
        record_spend(self._r, owner, job_id, spent_usd)

    def owner_total(self, owner: str) -> float:
        """USD spent by all of ``owner``'s jobs (as of their last reconcile step)."""
        return sum(float(v) for v in self._r.hvals(keys.owner_spend(owner)))

    def publish_settings(self, settings: BudgetSettings) -> None:
        """Make ``settings`` the budgets every replica's controller applies (the daemon does
        this at start, from its config file; the last replica started wins)."""
        self._r.set(keys.BUDGET_SETTINGS, json.dumps({"users": settings.users,
                                                      "webhook": settings.webhook}))

    def settings(self) -> BudgetSettings:
        """The published settings; none published gives no limits and no webhook."""
        raw = self._r.get(keys.BUDGET_SETTINGS)
        if not raw:
            return BudgetSettings()
        data = json.loads(raw)
        return BudgetSettings(users={k: float(v) for k, v in data.get("users", {}).items()},
                              webhook=bool(data.get("webhook")))


class BudgetOutbox:
    """The queue of budget alerts waiting for the webhook. Every move between two lists is
    one atomic Redis command or transaction, so an item is always in exactly one list."""

    def __init__(self, client: redis.Redis) -> None:
        self._r = client

    def push(self, payload: dict[str, Any]) -> None:
        """Queue ``payload`` (a JSON-able alert) at the back."""
        self._r.rpush(keys.BUDGET_OUTBOX, json.dumps(payload, sort_keys=True))

    def pending(self) -> int:
        """Alerts not delivered and not given up on (queued or in flight)."""
        return int(self._r.llen(keys.BUDGET_OUTBOX)) + int(self._r.llen(keys.BUDGET_INFLIGHT))

    def queued(self) -> int:
        """Alerts waiting in the queue (not in flight)."""
        return int(self._r.llen(keys.BUDGET_OUTBOX))

    def dead(self) -> list[dict[str, Any]]:
        """Alerts given up on, oldest first, as their retry envelopes
        (:mod:`scheduler.notify.budget_webhook`)."""
        return [json.loads(x) for x in self._r.lrange(keys.BUDGET_DEAD, 0, -1)]

    def recover(self) -> None:
        """Put the in-flight items of a run that died back at the front, in order; then
        move the items of the lists older versions used (:data:`keys.LEGACY_BUDGET_LISTS`)
        to the back of these."""
        while self._r.lmove(keys.BUDGET_INFLIGHT, keys.BUDGET_OUTBOX, "RIGHT", "LEFT"):
            pass
        for legacy, to in keys.LEGACY_BUDGET_LISTS:
            # Two slots, so not atomic: copied before it is dropped (a crash between them
            # delivers that alert twice rather than never).
            while (item := self._r.lindex(legacy, 0)) is not None:
                self._r.rpush(to, item)
                self._r.lpop(legacy)

    def take(self) -> str | None:
        """Move the front item to in flight and return its text; ``None`` when empty."""
        return self._r.lmove(keys.BUDGET_OUTBOX, keys.BUDGET_INFLIGHT, "LEFT", "RIGHT")

    def done(self, raw: str) -> None:
        """Drop the in-flight item ``raw`` (delivered)."""
        self._r.lrem(keys.BUDGET_INFLIGHT, 1, raw)

    def requeue(self, raw: str, queued: str) -> None:
        """Move the in-flight item ``raw`` to the back of the queue as ``queued``."""
        self._move(raw, keys.BUDGET_OUTBOX, queued)

    def bury(self, raw: str, dead: str) -> None:
        """Move the in-flight item ``raw`` to the dead-letter list as ``dead``."""
        self._move(raw, keys.BUDGET_DEAD, dead)

    def _move(self, raw: str, to: str, text: str) -> None:
        with self._r.pipeline(transaction=True) as pipe:
            pipe.lrem(keys.BUDGET_INFLIGHT, 1, raw)
            pipe.rpush(to, text)
            pipe.execute()
