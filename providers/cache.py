"""The caches the cloud adapters share: :class:`TTLCache`, a small thread-safe map
(dstack's ``ComputeTTLCache``, Karpenter's ``pkg/cache``), and :class:`CachedFile`, a file
downloaded by URL and kept on disk. Each adapter names its TTLs, with their reasons, beside
their use. A cache that cannot be refreshed keeps serving its last good value (Karpenter's
pricing keeps the old prices on error).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Generic, TypeVar
from urllib.parse import unquote, urlsplit

import httpx

from providers.errors import ProviderError

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
# A downloaded file is at most a few MB; a slow host must not hold the poller for long.
FETCH_TIMEOUT_S = 20.0


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


class CachedFile(Generic[V]):
    """A file fetched from ``url``, kept at ``cache_path`` and read through ``parse``.

    - **name**: used in log lines (e.g. ``"spot advisor"``).
    - **url**: ``https://…`` (fetched with httpx) or ``file://…`` (read directly: offline
      installs, tests); either way the body is copied to ``cache_path`` (parent created).
    - **parse**: body bytes → value; raises ``ValueError`` when the body is not the expected
      file, which is then never cached.
    - **max_age_s**: refetch when the cached copy is older (seconds, by file mtime).
    - **retry_s**: after a failed fetch, wait this long before trying again; the stale copy
      (or, with none, no value) is used meanwhile.
    - **clock**: wall-clock seconds (injectable for tests).

    Thread-safe. :meth:`value` and :meth:`refresh` may block on one download
    (:data:`FETCH_TIMEOUT_S`) and never raise for network or format problems (they are logged).
    """

    def __init__(self, name: str, url: str, cache_path: Path, parse: Callable[[bytes], V], *,
                 max_age_s: float, retry_s: float,
                 clock: Callable[[], float] = time.time) -> None:
        self.name, self.url, self.cache_path = name, url, Path(cache_path)
        self.max_age_s, self.retry_s = max_age_s, retry_s
        self._parse, self._clock = parse, clock
        self._lock = threading.Lock()
        self._value: V | None = None
        self._loaded_mtime: float | None = None
        self._last_failure_at: float | None = None

    def cache_age_s(self) -> float | None:
        """Seconds since the cached file was written, or None when there is none."""
        try:
            return max(0.0, self._clock() - self.cache_path.stat().st_mtime)
        except OSError:
            return None

    def status(self) -> tuple[bool, str]:
        """Whether a copy is cached (fetching one when none is), and a line saying how old it
        is or that ``url`` is unreachable. Never raises."""
        if self.cache_age_s() is None:
            self.value()
        age = self.cache_age_s()
        if age is None:
            return False, f"not cached and {self.url} unreachable"
        text = (f"{age:.0f} s" if age < 120 else f"{age / 60:.0f} min" if age < 7200
                else f"{age / 3600:.1f} h")
        return True, (f"cache {self.cache_path} is {text} old (refreshed after "
                      f"{self.max_age_s / 3600:.0f} h)")

    def value(self) -> V | None:
        """The parsed cached file, fetched first when stale; None when there is none."""
        with self._lock:
            age = self.cache_age_s()
            may_retry = (self._last_failure_at is None
                         or self._clock() - self._last_failure_at >= self.retry_s)
            if (age is None or age >= self.max_age_s) and may_retry:
                self._fetch()
            try:
                mtime = self.cache_path.stat().st_mtime
            except OSError:
                return self._value
            if self._value is None or mtime != self._loaded_mtime:
                self._read_cache()
            return self._value

    def refresh(self) -> bool:
        """Fetch now, whatever the cache age. Returns whether a fresh copy was stored."""
        with self._lock:
            ok = self._fetch()
            if ok:
                self._read_cache()
            return ok

    # ----- internals (hold self._lock) -------------------------------------------------------
    def _read_cache(self) -> None:
        try:
            mtime = self.cache_path.stat().st_mtime
            self._value = self._parse(self.cache_path.read_bytes())
            self._loaded_mtime = mtime
        except (OSError, ValueError) as exc:
            log.warning("%s cache %s unreadable (%s)", self.name, self.cache_path, exc)

    def _download(self) -> bytes:
        parts = urlsplit(self.url)
        if parts.scheme == "file":
            return Path(unquote(parts.path)).read_bytes()
        answer = httpx.get(self.url, timeout=FETCH_TIMEOUT_S, follow_redirects=True)
        answer.raise_for_status()
        return answer.content

    def _fetch(self) -> bool:
        try:
            body = self._download()
            self._parse(body)  # refuse to cache something that is not the file
        except (OSError, httpx.HTTPError, ValueError) as exc:
            self._last_failure_at = self._clock()
            kept = "keeping the cached copy" if self.cache_path.exists() else "nothing cached"
            log.warning("%s fetch from %s failed (%s: %s); %s", self.name, self.url,
                        type(exc).__name__, str(exc)[:200], kept)
            return False
        self.cache_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.cache_path.with_name(self.cache_path.name + ".tmp")
        tmp.write_bytes(body)
        os.replace(tmp, self.cache_path)
        self._last_failure_at = None
        return True
