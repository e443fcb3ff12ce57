"""A small thread-safe TTL cache shared by the cloud adapters (dstack's ``ComputeTTLCache``,
Karpenter's ``pkg/cache``). Each adapter names its TTLs, with their reasons, in its own
``cache.py``. A cache that cannot be refreshed keeps serving its last good value (Karpenter's
pricing keeps the old prices on error).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from providers.errors import ProviderError

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class TTLCache(Generic[K, V]):
    """A thread-safe map whose entries are fresh for ``ttl_s`` seconds after they were stored.

    - **name**: used in log lines (e.g. ``"instance types"``).
    - **ttl_s**: seconds an entry is fresh.
    - **clock**: monotonic seconds (injectable for tests); default :func:`time.monotonic`.

    Stale entries are kept: :meth:`get_or_load` serves one when a refresh fails.
    Loaders run outside the lock, so a slow region never blocks another; two threads missing
    the same key at once may both load it (the second result wins, both are valid).
    """

    def __init__(self, name: str, ttl_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self.ttl_s = ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: dict[K, tuple[float, V]] = {}

    def get(self, key: K, *, allow_stale: bool = False) -> V | None:
        """The value for ``key`` if fresh (or any stored value with ``allow_stale``), else None."""
        with self._lock:
            entry = self._entries.get(key)
        if entry is None:
            return None
        stored_at, value = entry
        if allow_stale or self._clock() - stored_at < self.ttl_s:
            return value
        return None

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._entries[key] = (self._clock(), value)

    def age_s(self, key: K) -> float | None:
        """Seconds since ``key`` was stored, or None when it never was."""
        with self._lock:
            entry = self._entries.get(key)
        return None if entry is None else self._clock() - entry[0]

    def invalidate(self, key: K) -> None:
        with self._lock:
            self._entries.pop(key, None)

    def get_or_load(self, key: K, loader: Callable[[], V]) -> V:
        """The fresh value for ``key``, else ``loader()`` stored and returned.

        Raises whatever ``loader`` raises when there is no stored value at all. When a stored
        (stale) value exists and the loader raises :class:`ProviderError`, logs a warning and
        returns the stale value; its age is left unchanged so the next call retries.
        """
        fresh = self.get(key)
        if fresh is not None:
            return fresh
        try:
            value = loader()
        except ProviderError as exc:
            stale = self.get(key, allow_stale=True)
            if stale is None:
                raise
            log.warning("refreshing %s for %s failed, keeping the last good data (%.0f s old): %s",
                        self.name, key, self.age_s(key) or 0.0, exc)
            return stale
        self.put(key, value)
        return value
