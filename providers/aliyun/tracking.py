"""What the adapter remembers about the instances it launched or saw, in memory.

ECS and EC2 differ where reconciliation looks: ECS drops a released instance from
``DescribeInstances`` at once (EC2 lists a terminated one for about an hour), may list a new
instance a moment after ``RunInstances`` answered, and signals a spot reclaim only as the
``Recycling`` operation lock, without a time. :class:`InstanceTracker` fills these gaps:

- an instance launched but not listed yet is reported ``pending`` for
  :data:`~providers.aliyun.cache.LAUNCH_VISIBILITY_GRACE_S`;
- an instance seen before and no longer listed is reported ``terminated`` for
  :data:`~providers.aliyun.cache.RELEASED_INSTANCE_MEMORY_S`, with ``terminated_reason``
  ``preempted`` when it was ``Recycling``, ``terminated on request`` when we deleted it, else
  ``released``;
- the notice of a ``Recycling`` instance is dated from the first time it was seen recycling
  (action five minutes later), so it does not move from one describe to the next.

A restarted daemon forgets all this; the controller then sees a released instance as "no
longer reported", which it also treats as gone.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from core.models import Instance, InstanceState, OfferKey, PreemptionNotice
from providers.aliyun.cache import LAUNCH_VISIBILITY_GRACE_S, RELEASED_INSTANCE_MEMORY_S
from providers.aliyun.instances import recycling_notice


@dataclass
class _Tracked:
    instance: Instance
    region: str
    known_at: datetime
    listed: bool = False
    recycling_since: datetime | None = None
    deleted_by_us: bool = False
    gone_at: datetime | None = None


class InstanceTracker:
    """Instances of one adapter by id (see the module docstring). ``clock`` gives aware UTC.
    Thread-safe."""

    def __init__(self, clock: Callable[[], datetime]) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._by_id: dict[str, _Tracked] = {}

    def launched(self, instance_id: str, offer: OfferKey, client_token: str,
                 tags: Mapping[str, str], region: str) -> Instance:
        """Remember an instance ``RunInstances`` just made and ECS does not list yet; returns
        it ``pending``, tagged with ``tags`` (the client token's tag included)."""
        instance = Instance(id=instance_id, provider=offer.provider, offer=offer,
                            client_token=client_token, state=InstanceState.PENDING,
                            launched_at=self._clock(), tags=dict(tags))
        with self._lock:
            if instance_id not in self._by_id:
                self._by_id[instance_id] = _Tracked(instance, region, self._clock())
        return instance

    def deleted(self, instance_id: str) -> None:
        """``DeleteInstance`` succeeded for ``instance_id``."""
        with self._lock:
            tracked = self._by_id.get(instance_id)
            if tracked is not None:
                tracked.deleted_by_us = True

    def notice_for(self, instance_id: str, recycling: bool) -> PreemptionNotice | None:
        """The notice of an instance listed with (``recycling``) or without the Recycling lock;
        dated from the first time it was seen recycling."""
        if not recycling:
            return None
        now = self._clock()
        with self._lock:
            tracked = self._by_id.get(instance_id)
            since = tracked.recycling_since if tracked and tracked.recycling_since else now
            if tracked is not None:
                tracked.recycling_since = since
        return recycling_notice(since, now)

    def listed(self, instance: Instance, region: str) -> None:
        """``DescribeInstances`` listed ``instance`` in ``region`` (its current view)."""
        now = self._clock()
        with self._lock:
            tracked = self._by_id.get(instance.id)
            if tracked is None:
                tracked = self._by_id[instance.id] = _Tracked(instance, region, now)
            tracked.instance, tracked.listed, tracked.gone_at = instance, True, None
            if instance.notice is not None and tracked.recycling_since is None:
                tracked.recycling_since = instance.notice.received_at or now

    def unlisted(self, region: str, tags: Mapping[str, str], listed_ids: Iterable[str]
                 ) -> list[Instance]:
        """Remembered instances of ``region`` carrying ``tags`` that a complete
        ``DescribeInstances`` answer did not list: ``pending`` ones within the launch grace,
        ``terminated`` ones within the memory (see the module docstring). Forgets older ones."""
        now = self._clock()
        seen = set(listed_ids)
        out: list[Instance] = []
        with self._lock:
            for instance_id, t in list(self._by_id.items()):
                if t.region != region or instance_id in seen:
                    continue
                if any(t.instance.tags.get(k) != v for k, v in tags.items()):
                    continue
                if t.gone_at is None and not t.listed and not t.deleted_by_us and (
                        now - t.known_at).total_seconds() < LAUNCH_VISIBILITY_GRACE_S:
                    out.append(t.instance)
                    continue
                if t.gone_at is None:
                    t.gone_at = now
                if (now - t.gone_at).total_seconds() > RELEASED_INSTANCE_MEMORY_S:
                    del self._by_id[instance_id]
                    continue
                reason = ("preempted" if t.recycling_since else
                          "terminated on request" if t.deleted_by_us else "released")
                out.append(t.instance.model_copy(update={
                    "state": InstanceState.TERMINATED, "terminated_reason": reason}))
        return out
