"""Failed provider calls, counted in Redis for ``ga_provider_errors_total``.

``ga:metrics:provider-errors`` (:data:`scheduler.store.keys.METRIC_PROVIDER_ERRORS`): hash
``provider|operation|error`` → calls that failed, e.g. ``aws|launch|CapacityError``. HINCRBY
keeps it exact across the replicas sharing the Redis; the daemon counts through
:func:`scheduler.observability.providers.counted`.
"""

from __future__ import annotations

from scheduler.store import keys
from scheduler.store.connection import RedisClient


class ProviderErrors:
    """Counts of failed provider calls. Thread-safe (one redis-py client)."""

    def __init__(self, client: RedisClient) -> None:
        self._r = client

    def count(self, provider: str, operation: str, error: str) -> None:
        """Add one failed call of ``provider``'s ``operation`` (``list_offers``, ``launch``,
        ...) that raised ``error`` (the exception's class name). Raises ``redis.RedisError``."""
        self._r.hincrby(keys.METRIC_PROVIDER_ERRORS, f"{provider}|{operation}|{error}", 1)

    def counts(self) -> dict[tuple[str, str, str], int]:
        """``{(provider, operation, error): calls}``; malformed fields are left out."""
        out = {}
        for field, value in self._r.hgetall(keys.METRIC_PROVIDER_ERRORS).items():
            labels = tuple(str(field).split("|", 2))
            if len(labels) == 3:
                out[labels] = int(value)
        return out
