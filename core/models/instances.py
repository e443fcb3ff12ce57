"""Instances: what a provider launched for a placement, as the provider describes it."""

from __future__ import annotations

from datetime import datetime
from enum import Enum

from pydantic import Field, field_validator

from core.models.base import StrictModel, ensure_utc
from core.models.offers import OfferKey

# Tags every instance we launch carries (dstack-style ownership), so reconciliation and leak
# collection can tell ours from anything else in the account.
TAG_OWNER = "gpu-arbiter:owner"
TAG_JOB = "gpu-arbiter:job"
TAG_ATTEMPT = "gpu-arbiter:attempt"
TAG_RANK = "gpu-arbiter:rank"  # a gang node's rank (0 = the node MASTER_ADDR points at)


class InstanceState(str, Enum):
    PENDING = "pending"
    RUNNING = "running"
    SHUTTING_DOWN = "shutting-down"
    TERMINATED = "terminated"

    def is_gone(self) -> bool:
        return self in (InstanceState.SHUTTING_DOWN, InstanceState.TERMINATED)


class PreemptionNotice(StrictModel):
    """A provider's warning that a spot instance will be reclaimed at ``action_at`` (aware UTC).

    ``action`` follows AWS's ``spot/instance-action``: ``terminate`` | ``stop`` | ``hibernate``.
    """

    action: str = Field(default="terminate", max_length=32)
    action_at: datetime
    received_at: datetime | None = None

    _utc = field_validator("action_at", "received_at")(
        lambda v: None if v is None else ensure_utc(v)
    )


PREEMPTED = "preempted"
"""``terminated_reason`` of an instance the market reclaimed, alone or followed by ``": "`` and
the market's own words (``"preempted: outbid"``)."""


class Instance(StrictModel):
    """One instance as a provider reports it (``Provider.describe``/``launch``).
    ``terminated_reason`` says why it ended; :attr:`preempted` when the market reclaimed it."""

    id: str
    provider: str
    offer: OfferKey
    client_token: str
    state: InstanceState
    launched_at: datetime
    tags: dict[str, str] = Field(default_factory=dict)
    notice: PreemptionNotice | None = None
    terminated_reason: str | None = None

    _utc = field_validator("launched_at")(ensure_utc)

    @property
    def preempted(self) -> bool:
        reason = self.terminated_reason or ""
        return reason == PREEMPTED or reason.startswith(PREEMPTED + ": ")

    @property
    def job_id(self) -> str | None:
        return self.tags.get(TAG_JOB)
