"""Leases with fencing: a key with a TTL whose value is ``"<holder>/<fence>"``.

The holder is a random token per process; the fence is a counter INCRemented in the same Lua
script on every fresh acquisition, so it grows with every new holder of the key. Renew and
release act only while the value is still ours, and writes done under a lease (job saves, see
:meth:`scheduler.store.jobs.JobStore.fenced`) check the value in the same transaction: a
replica that paused (GC, SIGSTOP) past its TTL can no longer write once another replica took
the lease, even if it still believes it holds it.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis

from scheduler.store import keys, multi, scripts
from scheduler.store.connection import RedisClient

log = logging.getLogger(__name__)

# Fence counters outlive their lease by far, so fences only grow; a counter idle this long
# (nobody took the lease for a month) may restart, which is harmless: holders are random too.
FENCE_COUNTER_TTL_MS = 30 * 24 * 3600 * 1000


@dataclass(frozen=True)
class Lease:
    """One acquisition of a lease: ``key``, our ``holder`` token and the ``fence`` (≥ 1)."""

    key: str
    holder: str
    fence: int

    @property
    def value(self) -> str:
        """What the lease key holds while this acquisition is current."""
        return f"{self.holder}/{self.fence}"


class Leases:
    """Acquire, renew and release named leases for one holder. Safe to share between threads.

    ``holder`` defaults to ``<replica>:pid:random`` when ``replica`` (a daemon's stable
    identity, see :func:`scheduler.replicas.home_replica_id`) is given, else to
    ``host:pid:random``; readable in Redis when debugging who owns what. A holder
    ``<replica>:...`` other than ours is an earlier process of this replica
    (:meth:`take_over_previous`). The leases acquired and not released are remembered, for
    :meth:`release_all` at shutdown. Raises ``ValueError`` for a ``holder`` with ``/`` or a
    ``replica`` with ``/`` or ``:``.
    """

    def __init__(self, client: RedisClient, holder: str | None = None,
                 replica: str | None = None) -> None:
        self._r = client
        if replica is not None and ("/" in replica or ":" in replica or not replica):
            raise ValueError(f"replica: {replica!r} must be non-empty, without '/' or ':'")
        self.replica = replica
        self.holder = holder or (f"{replica or socket.gethostname()}:{os.getpid()}:"
                                 f"{secrets.token_hex(4)}")
        if "/" in self.holder:
            raise ValueError(f"holder: {self.holder!r} must not contain '/'")
        # Our entry in the sets of :meth:`active_holders`: the replica, so that a restarted
        # daemon replaces the entry of its dead process instead of counting it.
        self.member = replica or self.holder
        self._acquire = client.register_script(scripts.ACQUIRE_LEASE)
        self._renew = client.register_script(scripts.RENEW_LEASE)
        self._release = client.register_script(scripts.RELEASE_LEASE)
        self._take_over = client.register_script(scripts.TAKE_OVER_LEASE)
        self._held: dict[str, Lease] = {}
        self._lock = threading.Lock()

    def acquire(self, key: str, ttl_s: float) -> Lease | None:
        """Take ``key`` (a :mod:`keys` lease key) for ``ttl_s`` seconds, or extend it if we hold
        it already. Returns the :class:`Lease` (with its fence), or ``None`` when another holder
        has it. Raises ``redis.RedisError`` when Redis cannot be reached."""
        value = self._acquire(keys=[key, keys.lease_fence(key)],
                              args=[self.holder, int(ttl_s * 1000), FENCE_COUNTER_TTL_MS])
        with self._lock:
            if not value:
                self._held.pop(key, None)
                return None
            holder, _, fence = value.rpartition("/")
            lease = Lease(key, holder, int(fence))
            self._held[key] = lease
            return lease

    def acquire_many(self, keys_: list[str], ttl_s: float) -> dict[str, Lease | None]:
        """:meth:`acquire` for each of ``keys_`` in one round trip (a pipeline, not a
        transaction: each acquisition is atomic on its own). Returns key → lease or ``None``."""
        if not keys_:
            return {}
        values = multi.run_script_many(self._r, self._acquire, [
            ([key, keys.lease_fence(key)], [self.holder, int(ttl_s * 1000), FENCE_COUNTER_TTL_MS])
            for key in keys_])
        out: dict[str, Lease | None] = {}
        with self._lock:
            for key, value in zip(keys_, values, strict=True):
                if value:
                    holder, _, fence = value.rpartition("/")
                    out[key] = self._held[key] = Lease(key, holder, int(fence))
                else:
                    self._held.pop(key, None)
                    out[key] = None
        return out

    def holders(self, keys_: list[str]) -> list[str | None]:
        """Who holds each of ``keys_`` now (holder tokens, ``None`` when free): one MGET
        (:func:`scheduler.store.multi.mget`)."""
        values = multi.mget(self._r, keys_)
        return [v.rpartition("/")[0] if v else None for v in values]

    def is_previous_incarnation(self, holder: str | None) -> bool:
        """Whether ``holder`` is an earlier process of this replica (never ourselves; always
        ``False`` without a ``replica``)."""
        return (self.replica is not None and holder is not None and holder != self.holder
                and holder.startswith(f"{self.replica}:"))

    def take_over_previous(self) -> int:
        """Take every lease an earlier process of this replica still holds, at once rather
        than after its TTL, each under a new fence (so a save that process had in flight is
        refused) and with its remaining TTL (the tasks renew theirs on their next run).

        Only safe while nothing else of this replica can be running: the daemon calls it
        holding ``GA_HOME/daemon.lock``. Returns how many leases were taken over. Raises
        ``redis.RedisError`` when Redis cannot be reached."""
        if self.replica is None:
            return 0
        found = list(self._r.scan_iter(match=keys.lease("*"), count=1000))
        taken = 0
        for first in range(0, len(found), 500):
            batch = found[first:first + 500]
            for key, value in zip(batch, multi.mget(self._r, batch), strict=True):
                holder = value.rpartition("/")[0] if value else None
                if not self.is_previous_incarnation(holder):
                    continue  # another replica's, a fence counter, or not a lease of ours
                new = self._take_over(keys=[key, keys.lease_fence(key)],
                                      args=[value, self.holder, FENCE_COUNTER_TTL_MS])
                if new:
                    with self._lock:
                        self._held[key] = Lease(key, self.holder, int(new.rpartition("/")[2]))
                    taken += 1
        return taken

    def renew(self, lease: Lease, ttl_s: float) -> bool:
        """Extend ``lease`` if it is still current; ``False`` when it was lost."""
        return bool(self._renew(keys=[lease.key], args=[lease.value, int(ttl_s * 1000)]))

    def holds(self, key: str) -> bool:
        """Whether we took ``key`` and did not release it (our view; it may have expired)."""
        with self._lock:
            return key in self._held

    def active_holders(self, key: str, window_s: float) -> int:
        """Mark this holder (its :attr:`member`) active now in the sorted set ``key`` and count
        the holders active within the last ``window_s`` seconds (ourselves included); older
        ones are dropped."""
        now_ms = int(time.time() * 1000)
        with self._r.pipeline(transaction=True) as pipe:
            pipe.zadd(key, {self.member: now_ms})
            pipe.zremrangebyscore(key, "-inf", now_ms - int(window_s * 1000))
            pipe.zcard(key)
            return int(pipe.execute()[-1])

    def inactive(self, key: str) -> None:
        """Drop this holder from the sorted set ``key`` of :meth:`active_holders` (shutdown)."""
        self._r.zrem(key, self.member)

    def current(self, key: str) -> str | None:
        """The value stored at ``key`` (``"<holder>/<fence>"``), whoever holds it."""
        return self._r.get(key)

    def release_many(self, keys_: list[str]) -> None:
        """:meth:`release` each of ``keys_`` we hold, in one round trip."""
        with self._lock:
            held = [self._held.pop(k) for k in keys_ if k in self._held]
        multi.run_script_many(self._r, self._release,
                              [([lease.key], [lease.value]) for lease in held])

    def release(self, key: str) -> bool:
        """Give ``key`` up if we hold it; ``True`` when it was ours and is now free."""
        with self._lock:
            lease = self._held.pop(key, None)
        if lease is None:
            return False
        return bool(self._release(keys=[key], args=[lease.value]))

    def release_all(self) -> int:
        """Release every lease this holder took (at shutdown, so others take over at once
        instead of after the TTL). Returns how many were released; Redis errors are logged."""
        with self._lock:
            held = list(self._held)
        released = 0
        for key in held:
            try:
                released += self.release(key)
            except redis.RedisError as exc:
                log.warning("could not release lease %s: %s", key, exc)
                break
        return released


class LeasedTask:
    """A periodic task run by one replica at a time: each run first takes (or renews) the
    lease ``key`` for ``ttl_s`` and is skipped when another replica holds it. A dead owner's
    lease expires, so another replica takes the task over within ``ttl_s``.

    ``ttl_s`` should cover a few intervals of the task, so a slow run does not lose it.
    Calling the task returns ``fn``'s result, or ``None`` when skipped or Redis is down (also
    when ``fn`` meets it down: logged as one WARNING line, not raised).
    """

    def __init__(self, leases: Leases, key: str, ttl_s: float, fn: Callable[..., Any],
                 *args: Any) -> None:
        self.leases, self.key, self.ttl_s = leases, key, ttl_s
        self.fn, self.args = fn, args

    def __call__(self) -> Any:
        try:
            if self.leases.acquire(self.key, self.ttl_s) is None:
                return None
        except redis.RedisError as exc:
            log.warning("%s skipped, Redis unavailable: %s", self.key, exc)
            return None
        try:
            return self.fn(*self.args)
        except _UNAVAILABLE as exc:
            # A failover or an outage under way: the next run tries again. Other errors
            # (a bug, a refused command) keep their traceback.
            log.warning("%s stopped, Redis unavailable: %s: %s", self.key, type(exc).__name__,
                        exc)
            return None


# What a run meets while Redis, a cluster slot or a Sentinel master is away or moving.
_UNAVAILABLE = (redis.ConnectionError, redis.TimeoutError, redis.exceptions.ClusterDownError,
                redis.exceptions.TryAgainError, redis.exceptions.ReadOnlyError,
                redis.exceptions.MasterDownError)
