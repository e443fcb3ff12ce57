"""In-process "at most every N seconds per key" gates for work a reconcile pass may skip.

Losing them (restart, another replica taking the job) moves the work by at most one interval,
so they are not kept in Redis. Bounded: past ``max_keys`` keys they start afresh.
"""

from __future__ import annotations

import zlib
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


class Spread:
    """A once-per-``every_s`` gate whose keys fall due at different moments, for periodic
    per-job work: key ``k`` is due whenever the clock enters a new slot
    ``[n * every_s - phase(k), (n + 1) * every_s - phase(k))``, its phase a stable hash of the
    key, so a pass runs the work for about ``1 / every_s`` of the keys per second instead of
    for all of them in the same pass (as a plain throttle does after a restart, and forever
    after). A key seen for the first time is not due. In-process and bounded like
    :class:`Throttle`."""

    def __init__(self, max_keys: int = 100_000) -> None:
        self._slot: dict[Hashable, int] = {}
        self._max_keys = max_keys

    def due(self, key: Hashable, now: float, every_s: float) -> bool:
        """Whether ``key`` entered a new slot since it was last asked about (``now``: epoch s)."""
        phase = zlib.crc32(repr(key).encode()) / 2**32 * every_s
        slot = int((now + phase) // every_s)
        last = self._slot.get(key)
        if last == slot:
            return False
        if last is None and len(self._slot) >= self._max_keys:
            self._slot.clear()
        self._slot[key] = slot
        return last is not None
