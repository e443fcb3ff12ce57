"""An in-process "at most every N seconds per key" gate for work a reconcile pass may skip.

Losing it (restart, another replica taking the job) only brings the work forward, so it is not
kept in Redis. Bounded: past ``max_keys`` keys it starts afresh.
"""

from __future__ import annotations

from collections.abc import Hashable


class Throttle:
    def __init__(self, max_keys: int = 100_000) -> None:
        self._last: dict[Hashable, float] = {}
        self._max_keys = max_keys

    def due(self, key: Hashable, now: float, every_s: float) -> bool:
        """Whether ``key`` last ran at least ``every_s`` seconds before ``now`` (epoch s); if
        so, records ``now`` as its last run."""
        if now - self._last.get(key, -float("inf")) < every_s:
            return False
        if len(self._last) >= self._max_keys:
            self._last.clear()
        self._last[key] = now
        return True
