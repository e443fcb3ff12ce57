"""The Provider protocol: the only surface the scheduler uses to talk to a market.

Every method may block on network I/O; none touches Redis. Errors come from
:mod:`providers.errors`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol, runtime_checkable

from pydantic import Field

from core.models import Instance, Offer, OfferKey, PriceObservation, StrictModel


class LaunchRequest(StrictModel):
    """What the controller asks a provider to launch.

    - **offer**: the offer chosen by the policy (its key says where and which market).
    - **client_token**: idempotency token (``{job_id}-{attempt}``); a launch repeated with the
      same token returns the instance the first call made and never makes a second one.
    - **tags**: ownership tags (``core.models.instances.TAG_*``) put on the instance.
    - **agent_env**: environment for the node agent on the instance (API URL, agent token,
      job id, checkpoint store). Secrets in it must go only to the instance, never to logs.
    """

    offer: Offer
    client_token: str = Field(min_length=1, max_length=64)
    tags: dict[str, str] = Field(default_factory=dict)
    agent_env: dict[str, str] = Field(default_factory=dict)


@runtime_checkable
class Provider(Protocol):
    """A source of offers and instances.

    ``name`` is the ``provider`` field of every offer it returns. ``time_scale`` is market
    seconds per wall second: 1.0 for real clouds, larger for a replayed market.
    """

    name: str
    time_scale: float

    def list_offers(self) -> list[Offer]:
        """All offers rentable now. Spot offers with no capacity now are left out.

        Raises ``TransientError``/``AuthError`` when the source cannot be read; an empty list
        means the source answered and had nothing.
        """
        ...

    def poll_prices(self, since: datetime | None = None) -> list[PriceObservation]:
        """Price observations newer than ``since`` (all known ones when ``None``)."""
        ...

    def launch(self, request: LaunchRequest) -> Instance:
        """Launch an instance for ``request``; idempotent on ``request.client_token``.

        May return while the instance is still ``pending``. Raises ``CapacityError`` when the
        offer has no capacity, ``QuotaError``, ``AuthError``, ``TransientError``.
        """
        ...

    def terminate(self, instance_id: str) -> None:
        """Terminate an instance. Succeeds quietly when it is already gone or never existed."""
        ...

    def describe(self, tags: dict[str, str] | None = None) -> list[Instance]:
        """Instances carrying all ``tags`` (all instances this provider knows when ``None``),
        including recently terminated ones, with any preemption notice they have received."""
        ...

    def unavailable_reason(self, key: OfferKey) -> str | None:
        """Why ``key`` cannot be launched now (e.g. spot capacity reclaimed), or ``None``."""
        ...

    def close(self) -> None:
        """Release clients and threads. Instances keep running."""
        ...
