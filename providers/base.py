"""The one base every provider stands on, and the optional abilities as types.

::

    Provider            a source of offers: list_offers, poll_prices, close (catalogs)
    └── Compute         also launches: launch, terminate, describe, agent_start_timeout_s
    Checked             ``schedctl providers check``: reachability and permission rows
    Renames             can list its offers under another name when its own is taken
    ExactCapacity       lists only what it can launch now (no unavailable-offer cache)

An ability is a class; the scheduler asks ``isinstance(adapter, Compute)``, never ``getattr``.
Region-based clouds share :class:`providers.regional.RegionalCompute` on top of
:class:`Compute`.

Adapters implement the underscored methods (``_list_offers``, ``_launch``, ...); the public
ones are defined here once, so that every failure of every adapter reaches the one error
listener the daemon sets (:meth:`Provider.report_errors_to`: the ``ga_provider_errors_total``
counter) without a wrapper hiding the adapter's type. Every method may block on network I/O;
none touches Redis. Errors come from :mod:`providers.errors`.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime

from pydantic import Field

from core.models import Instance, Offer, PriceObservation, StrictModel
from providers.errors import ProviderError

log = logging.getLogger(__name__)

# (provider name, operation, error) of each failed call, e.g. ("aws", "launch", "CapacityError").
ErrorListener = Callable[[str, str, ProviderError], None]


class LaunchRequest(StrictModel):
    """What the controller asks a provider to launch.

    - **offer**: the offer chosen by the policy (its key says where and which market).
    - **client_token**: idempotency token (``{job_id}-{attempt}``); a launch repeated with the
      same token returns the instance the first call made and never makes a second one.
    - **tags**: ownership tags (``core.models.instances.TAG_*``) put on the instance.
    - **agent_env**: environment for the node agent on the instance (API URL, agent token,
      job id, checkpoint store). Secrets in it must go only to the instance, never to logs.
    - **max_price_usd_per_hour**: the job's price cap (``JobSpec.max_price_usd_per_hour``),
      for markets where the launch itself names a price (a bid); None when the job has none.
    """

    offer: Offer
    client_token: str = Field(min_length=1, max_length=64)
    tags: dict[str, str] = Field(default_factory=dict)
    agent_env: dict[str, str] = Field(default_factory=dict)
    max_price_usd_per_hour: float | None = Field(default=None, gt=0)


@dataclass(frozen=True)
class CheckResult:
    """One row of ``schedctl providers check``: ``check`` (what was tried) in ``region``
    (``-`` when not regional) of ``provider`` succeeded (``ok``) or not, and why (``detail``)."""

    provider: str
    region: str
    check: str
    ok: bool
    detail: str


class Provider(ABC):
    """A source of offers.

    ``name`` is the ``provider`` field of every offer it returns; ``provider_names`` every
    such name it serves (a replayed market or a set of catalogs serves several). ``time_scale``
    is market seconds per wall second: 1.0 for real clouds, larger for a replayed market.
    """

    name: str
    time_scale: float = 1.0
    _error_listener: ErrorListener | None = None

    @property
    def provider_names(self) -> frozenset[str]:
        return frozenset({self.name})

    def report_errors_to(self, listener: ErrorListener | None) -> None:
        """Call ``listener(name, operation, error)`` for every :class:`ProviderError` a public
        operation raises, before it propagates. A listener that raises is logged and ignored."""
        self._error_listener = listener

    @contextmanager
    def _reporting(self, operation: str) -> Iterator[None]:
        try:
            yield
        except ProviderError as exc:
            if self._error_listener is not None:
                try:
                    self._error_listener(self.name, operation, exc)
                except Exception as listener_exc:  # counting must never change the outcome
                    log.warning("error listener failed for %s.%s: %s", self.name, operation,
                                listener_exc)
            raise

    def list_offers(self) -> list[Offer]:
        """All offers rentable now. Spot offers with no capacity now are left out.

        Raises ``TransientError``/``AuthError`` when the source cannot be read; an empty list
        means the source answered and had nothing.
        """
        with self._reporting("list_offers"):
            return self._list_offers()

    def poll_prices(self, since: datetime | None = None) -> list[PriceObservation]:
        """Price observations newer than ``since`` (all known ones when ``None``)."""
        with self._reporting("poll_prices"):
            return self._poll_prices(since)

    def close(self) -> None:
        """Release clients and threads. Instances keep running."""

    @abstractmethod
    def _list_offers(self) -> list[Offer]: ...

    @abstractmethod
    def _poll_prices(self, since: datetime | None) -> list[PriceObservation]: ...


class Compute(Provider):
    """A provider that launches instances.

    ``agent_start_timeout_s``: seconds from launch until the node agent's first report, past
    which the controller replaces the instance; each cloud states its own (boot + agent
    install differ by minutes).
    """

    @property
    @abstractmethod
    def agent_start_timeout_s(self) -> float: ...

    def launch(self, request: LaunchRequest) -> Instance:
        """Launch an instance for ``request``; idempotent on ``request.client_token``.

        May return while the instance is still ``pending``. Raises ``CapacityError`` when the
        offer has no capacity, ``QuotaError``, ``AuthError``, ``TransientError``.
        """
        with self._reporting("launch"):
            return self._launch(request)

    def terminate(self, instance_id: str) -> None:
        """Terminate an instance. Succeeds quietly when it is already gone or never existed."""
        with self._reporting("terminate"):
            self._terminate(instance_id)

    def describe(self, tags: dict[str, str] | None = None) -> list[Instance]:
        """Instances carrying all ``tags`` (all instances this provider knows when ``None``),
        including recently terminated ones, with any preemption notice they have received."""
        with self._reporting("describe"):
            return self._describe(tags)

    @abstractmethod
    def _launch(self, request: LaunchRequest) -> Instance: ...

    @abstractmethod
    def _terminate(self, instance_id: str) -> None: ...

    @abstractmethod
    def _describe(self, tags: dict[str, str] | None) -> list[Instance]: ...


class Checked(ABC):
    """Can say whether it is reachable and permitted, region by region."""

    @abstractmethod
    def check(self) -> list[CheckResult]:
        """One row per thing tried; never raises for a failed check (the row says it)."""


class ExactCapacity(ABC):
    """Lists exactly what it can launch now: the team's own machines, whose free slots come
    from a ledger rather than from a cloud's guess. A refused launch or a reclaim there says
    nothing its next listing will not, so the controller skips the offer only until then,
    not for the minutes it skips a cloud's (Karpenter's unavailable-offerings cache)."""


class Renames(ABC):
    """Can list its offers under another provider name when its own is served by another
    adapter (a catalog or replayed market beside the real cloud of that name)."""

    @abstractmethod
    def avoid_names(self, taken: set[str]) -> dict[str, str]:
        """Rename every served name in ``taken``; returns ``{own name: name shown}``."""

    @property
    @abstractmethod
    def renamed(self) -> dict[str, str]:
        """``{own name: name shown}`` for the names :meth:`avoid_names` changed."""
