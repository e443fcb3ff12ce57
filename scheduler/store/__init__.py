"""Redis-backed state: jobs, offers and price history, agents, leases, spend and budget
alerts, users and their tokens, the audit stream. Keys live in :mod:`scheduler.store.keys` only."""

from __future__ import annotations

from dataclasses import dataclass

import redis

from scheduler.store.agents import AgentStore
from scheduler.store.budgets import BudgetOutbox, SpendStore
from scheduler.store.jobs import JobExistsError, JobStore, LeaseLostError, StaleJobError
from scheduler.store.leases import Lease, Leases
from scheduler.store.offers import OfferStore
from scheduler.store.users import AuditLog, UserStore


@dataclass
class Store:
    """All stores over one client."""

    redis: redis.Redis
    jobs: JobStore
    offers: OfferStore
    agents: AgentStore
    leases: Leases
    spend: SpendStore
    budget_outbox: BudgetOutbox
    users: UserStore
    audit: AuditLog

    @classmethod
    def over(cls, client: redis.Redis) -> Store:
        return cls(client, JobStore(client), OfferStore(client), AgentStore(client),
                   Leases(client), SpendStore(client), BudgetOutbox(client), UserStore(client),
                   AuditLog(client))


__all__ = ["AgentStore", "BudgetOutbox", "JobExistsError", "JobStore", "Lease", "LeaseLostError",
           "Leases", "OfferStore", "SpendStore", "StaleJobError", "Store", "UserStore"]
