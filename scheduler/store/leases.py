"""Leases: a key with a TTL and a random holder token (renew/release only while the token
matches), so a replica that dies loses its work to whichever replica asks next."""

from __future__ import annotations

import secrets

import redis

from scheduler.store import scripts


class Leases:
    """Acquire, renew and release named leases. Safe to share between threads."""

    def __init__(self, client: redis.Redis, holder: str | None = None) -> None:
        self._r = client
        self.holder = holder or secrets.token_hex(8)
        self._renew = client.register_script(scripts.RENEW_LEASE)
        self._release = client.register_script(scripts.RELEASE_LEASE)

    def acquire(self, key: str, ttl_s: float) -> bool:
        """Take ``key`` (a :mod:`keys` lease key) for ``ttl_s`` seconds, or extend it if we hold
        it already. Returns ``False`` when another holder has it."""
        ttl_ms = int(ttl_s * 1000)
        if self._r.set(key, self.holder, nx=True, px=ttl_ms):
            return True
        return bool(self._renew(keys=[key], args=[self.holder, ttl_ms]))

    def release(self, key: str) -> bool:
        return bool(self._release(keys=[key], args=[self.holder]))
