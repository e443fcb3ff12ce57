"""A cloud in memory: :class:`FakeCompute` is a real :class:`providers.base.Compute` (so the
controller sees the same public operations and error reporting as with any adapter) whose
instances are a dict, whose calls are recorded and whose failures are injected per operation.
"""

from __future__ import annotations

import itertools
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TypeVar

from core.models import (
    Instance,
    InstanceState,
    Offer,
    OfferKey,
    PreemptionNotice,
    PriceObservation,
    utcnow,
)
from providers.base import Compute, LaunchRequest

T = TypeVar("T")
OPERATIONS = ("list_offers", "poll_prices", "launch", "terminate", "describe")


class FakeClock:
    """A clock a test moves by hand: ``clock()`` is the current aware UTC time (it starts at
    the wall time, so Redis TTLs and stored timestamps stay plausible)."""

    def __init__(self, start: datetime | None = None) -> None:
        self.now = start or utcnow()

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> datetime:
        self.now += timedelta(seconds=seconds)
        return self.now


@dataclass(frozen=True)
class Call:
    """One recorded call: the public ``operation`` and its argument (the launch request, the
    instance id, the describe tags; ``None`` for the offer and price reads)."""

    operation: str
    arg: object = None


@dataclass
class _Failure:
    error: Exception
    after: bool  # the call takes effect, then its reply is lost


class FakeCompute(Compute):
    """A cloud in memory.

    - **offers**: what ``list_offers`` returns (set ``self.offers`` to change the market);
      ``poll_prices`` returns one observation per offer at the clock's time.
    - **launch** is idempotent on the client token (a repeat returns the first instance) and
      makes a ``pending`` instance named ``{name}-i-{n}``, tagged as requested.
    - **terminate** marks the instance ``terminated`` (reason ``user-terminated``); unknown ids
      succeed quietly, as the base class requires.
    - **describe** returns copies of the instances carrying all the asked tags.

    Test controls: :meth:`fail_next` (inject errors), :meth:`notice` (a preemption notice),
    :meth:`set_state`, :meth:`forget` (an instance the cloud no longer lists), :meth:`plant`
    (an instance made outside the controller), :attr:`calls` / :meth:`calls_of`, :meth:`reset`.
    """

    def __init__(self, offers: Iterable[Offer] = (), *, name: str = "fake",
                 clock: Callable[[], datetime] = utcnow,
                 agent_start_timeout_s: float = 300.0) -> None:
        self.name = name
        self.offers = list(offers)
        self.clock = clock
        self._agent_start_timeout_s = agent_start_timeout_s
        self._lock = threading.Lock()
        self.reset()

    @property
    def agent_start_timeout_s(self) -> float:
        return self._agent_start_timeout_s

    # -- test controls ---------------------------------------------------------------------

    def reset(self) -> None:
        """Forget every instance, recorded call and pending failure."""
        self.instances: dict[str, Instance] = {}
        self.requests: dict[str, LaunchRequest] = {}  # by client token: what was asked
        self.calls: list[Call] = []
        self._failures: dict[str, list[_Failure]] = defaultdict(list)
        self._ids = itertools.count(1)

    def fail_next(self, operation: str, error: Exception, *, times: int = 1,
                  after: bool = False) -> None:
        """Make the next ``times`` calls of ``operation`` raise ``error``. With ``after`` the
        call takes effect first and only its reply is lost (a launch that timed out on the
        way back: the instance exists). Raises ``ValueError`` for an unknown operation."""
        if operation not in OPERATIONS:
            raise ValueError(f"operation must be one of {', '.join(OPERATIONS)}; got {operation!r}")
        self._failures[operation].extend(_Failure(error, after) for _ in range(times))

    def calls_of(self, operation: str) -> list[object]:
        """The arguments of every recorded call of ``operation``, oldest first."""
        return [c.arg for c in self.calls if c.operation == operation]

    def notice(self, instance_id: str, in_s: float = 120.0,
               action: str = "terminate") -> PreemptionNotice:
        """Give ``instance_id`` a preemption notice for ``in_s`` seconds from the clock's now
        (AWS warns 2 min ahead); describe reports it from then on."""
        notice = PreemptionNotice(action=action, action_at=self.clock() + timedelta(seconds=in_s),
                                  received_at=self.clock())
        self._update(instance_id, notice=notice)
        return notice

    def set_state(self, instance_id: str, state: InstanceState,
                  reason: str | None = None) -> None:
        """Put ``instance_id`` in ``state`` (``reason``: its ``terminated_reason``, e.g.
        ``preempted``)."""
        self._update(instance_id, state=state, terminated_reason=reason)

    def forget(self, instance_id: str) -> None:
        """The cloud no longer lists ``instance_id`` (long terminated, or never known)."""
        with self._lock:
            del self.instances[instance_id]

    def plant(self, offer: Offer, client_token: str, tags: dict[str, str],
              launched_at: datetime, state: InstanceState = InstanceState.RUNNING) -> Instance:
        """An instance made outside the controller (a leak, another owner's machine)."""
        with self._lock:
            return self._make(offer.key, client_token, tags, launched_at, state)

    # -- the provider ----------------------------------------------------------------------

    def _list_offers(self) -> list[Offer]:
        lost = self._enter("list_offers")
        return self._reply(lost, list(self.offers))

    def _poll_prices(self, since: datetime | None) -> list[PriceObservation]:
        lost = self._enter("poll_prices")
        now = self.clock()
        return self._reply(lost, [PriceObservation(series=o.key.series(), observed_at=now,
                                                   price_usd_per_hour=o.price_usd_per_hour)
                                  for o in self.offers])

    def _launch(self, request: LaunchRequest) -> Instance:
        lost = self._enter("launch", request)
        with self._lock:
            instance = next((i for i in self.instances.values()
                             if i.client_token == request.client_token), None)
            if instance is None:
                self.requests[request.client_token] = request
                instance = self._make(request.offer.key, request.client_token,
                                      dict(request.tags), self.clock(), InstanceState.PENDING)
        return self._reply(lost, instance.model_copy(deep=True))

    def _terminate(self, instance_id: str) -> None:
        lost = self._enter("terminate", instance_id)
        with self._lock:
            if instance_id in self.instances:
                self._update_locked(instance_id, state=InstanceState.TERMINATED,
                                    terminated_reason="user-terminated")
        self._reply(lost, None)

    def _describe(self, tags: dict[str, str] | None) -> list[Instance]:
        lost = self._enter("describe", dict(tags) if tags is not None else None)
        with self._lock:
            found = [i.model_copy(deep=True) for i in self.instances.values()
                     if all(i.tags.get(k) == v for k, v in (tags or {}).items())]
        return self._reply(lost, found)

    # -- helpers ---------------------------------------------------------------------------

    def _enter(self, operation: str, arg: object = None) -> _Failure | None:
        """Record the call; raise its injected failure now, or hand back one whose reply is
        lost after the call took effect (see :meth:`_reply`)."""
        with self._lock:
            self.calls.append(Call(operation, arg))
            pending = self._failures[operation]
            failure = pending.pop(0) if pending else None
        if failure is not None and not failure.after:
            raise failure.error
        return failure

    @staticmethod
    def _reply(lost: _Failure | None, value: T) -> T:
        if lost is not None:
            raise lost.error
        return value

    def _make(self, key: OfferKey, token: str, tags: dict[str, str], launched_at: datetime,
              state: InstanceState) -> Instance:
        instance = Instance(id=f"{self.name}-i-{next(self._ids)}", provider=self.name,
                            offer=key, client_token=token, state=state,
                            launched_at=launched_at, tags=tags)
        self.instances[instance.id] = instance
        return instance

    def _update(self, instance_id: str, **fields: object) -> None:
        with self._lock:
            self._update_locked(instance_id, **fields)

    def _update_locked(self, instance_id: str, **fields: object) -> None:
        self.instances[instance_id] = self.instances[instance_id].model_copy(update=fields)
