"""What a region-based cloud adapter remembers about the instances it launched or saw, in
memory, so that a cloud's listing gaps do not look like lost instances.

Clouds differ where reconciliation looks: ECS drops a released instance from its listing at
once (EC2 lists a terminated one for about an hour), both may list a new instance a moment
after the launch call answered, and ECS signals a spot reclaim only as a lock, without a time.
:class:`InstanceMemory` fills these gaps for :class:`providers.regional.RegionalCompute`:

- an instance launched but not listed yet is reported ``pending`` for
  :data:`LAUNCH_VISIBILITY_GRACE_S`;
- an instance seen before and no longer listed is reported ``terminated`` for
  :data:`RELEASED_INSTANCE_MEMORY_S`, with ``terminated_reason`` ``preempted`` when it had a
  notice, ``terminated on request`` when we terminated it, else ``released``;
- :meth:`InstanceMemory.flagged_since` dates a reclaim the cloud marks without a time from the
  first listing that showed it, so a notice built from it does not move between describes.

A restarted daemon forgets all this; the controller then sees a released instance as "no
longer reported", which it also treats as gone.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime

from core.models import Instance, InstanceState
from providers.base import LaunchRequest

# A just-launched instance may take a moment to show in the cloud's listing; until then (at
# most this long) it is reported pending rather than gone.
LAUNCH_VISIBILITY_GRACE_S = 120.0
# An instance seen before and no longer listed is reported terminated for this long, so that
# reconciliation can tell "released" from "never existed" (EC2 itself lists one ~1 h).
RELEASED_INSTANCE_MEMORY_S = 3600.0


@dataclass
class _Remembered:
    instance: Instance
    region: str
    known_at: datetime
    listed: bool = False
    flagged_since: datetime | None = None
    deleted_by_us: bool = False
    gone_at: datetime | None = None


class InstanceMemory:
    """Instances of one adapter by id (see the module docstring). ``clock`` gives aware UTC.
    Thread-safe."""

    def __init__(self, clock: Callable[[], datetime]) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._by_id: dict[str, _Remembered] = {}

    def launched(self, instance: Instance, region: str) -> None:
        """The launch call just answered with ``instance`` (listed or not yet)."""
        with self._lock:
            if instance.id not in self._by_id:
                self._by_id[instance.id] = _Remembered(instance, region, self._clock())

    def deleted(self, instance_id: str) -> None:
        """Terminating ``instance_id`` succeeded."""
        with self._lock:
            remembered = self._by_id.get(instance_id)
            if remembered is not None:
                remembered.deleted_by_us = True

    def flagged_since(self, instance_id: str, flagged: bool) -> datetime | None:
        """When ``instance_id`` was first listed ``flagged`` (being reclaimed); None when this
        listing does not flag it."""
        if not flagged:
            return None
        now = self._clock()
        with self._lock:
            remembered = self._by_id.get(instance_id)
            if remembered is None:
                return now
            remembered.flagged_since = remembered.flagged_since or now
            return remembered.flagged_since

    def listed(self, instances: Iterable[Instance], region: str) -> None:
        """The cloud listed ``instances`` in ``region`` (their current view)."""
        now = self._clock()
        with self._lock:
            for instance in instances:
                remembered = self._by_id.get(instance.id)
                if remembered is None:
                    remembered = self._by_id[instance.id] = _Remembered(instance, region, now)
                remembered.instance, remembered.listed, remembered.gone_at = instance, True, None
                if instance.notice is not None and remembered.flagged_since is None:
                    remembered.flagged_since = instance.notice.received_at or now

    def unlisted(self, region: str, listed_ids: Iterable[str],
                 wanted: Callable[[Instance], bool]) -> list[Instance]:
        """Remembered instances of ``region`` that ``wanted`` selects and a complete listing
        (``listed_ids``) left out: ``pending`` ones within the launch grace, ``terminated``
        ones within the memory (see the module docstring). Forgets older ones."""
        now = self._clock()
        seen = set(listed_ids)
        out: list[Instance] = []
        with self._lock:
            for instance_id, r in list(self._by_id.items()):
                if r.region != region or instance_id in seen or not wanted(r.instance):
                    continue
                if r.gone_at is None and not r.listed and not r.deleted_by_us and (
                        now - r.known_at).total_seconds() < LAUNCH_VISIBILITY_GRACE_S:
                    out.append(r.instance)
                    continue
                r.gone_at = r.gone_at or now
                if (now - r.gone_at).total_seconds() > RELEASED_INSTANCE_MEMORY_S:
                    del self._by_id[instance_id]
                    continue
                reason = ("preempted" if r.flagged_since else
                          "terminated on request" if r.deleted_by_us else "released")
                out.append(r.instance.model_copy(update={
                    "state": InstanceState.TERMINATED, "terminated_reason": reason}))
        return out


def has_tags(tags: dict[str, str]) -> Callable[[Instance], bool]:
    """Selects instances carrying every tag of ``tags``."""
    return lambda instance: all(instance.tags.get(k) == v for k, v in tags.items())


def pending_instance(instance_id: str, request: LaunchRequest, launched_at: datetime,
                     extra_tags: dict[str, str]) -> Instance:
    """The instance a launch call just made for ``request``, before the cloud lists it:
    ``pending``, tagged with the request's tags and ``extra_tags``."""
    return Instance(id=instance_id, provider=request.offer.provider, offer=request.offer.key,
                    client_token=request.client_token, state=InstanceState.PENDING,
                    launched_at=launched_at, tags={**request.tags, **extra_tags})
