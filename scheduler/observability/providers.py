"""Counting failed provider calls, per provider, operation and error type, in Redis.

:func:`counted` wraps a :class:`~providers.base.Provider` so each of its cloud operations
(``list_offers``, ``poll_prices``, ``launch``, ``terminate``, ``describe``) that raises a
:class:`~providers.errors.ProviderError` adds one to ``ga_provider_errors_total`` before the
error goes on unchanged. The counter lives in Redis (HINCRBY), so it is the same on every
replica. Counting never gets in the way: a Redis failure while counting is logged and dropped.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

import redis

from providers.base import Provider
from providers.errors import ProviderError
from scheduler.store.job_stats import JobStats

log = logging.getLogger(__name__)

OPERATIONS = ("list_offers", "poll_prices", "launch", "terminate", "describe")


class CountedProvider:
    """``inner`` with its failed operations counted; every other attribute (``name``,
    ``time_scale``, ``provider_names``, ``close``, ...) is ``inner``'s own."""

    def __init__(self, inner: Provider, stats: JobStats) -> None:
        self._inner = inner
        self._stats = stats
        for operation in OPERATIONS:
            method = getattr(inner, operation, None)
            if method is not None:
                setattr(self, operation, self._counting(operation, method))

    def _counting(self, operation: str, method):
        @functools.wraps(method)
        def call(*args: Any, **kwargs: Any):
            try:
                return method(*args, **kwargs)
            except ProviderError as exc:
                self._count(operation, type(exc).__name__)
                raise
        return call

    def _count(self, operation: str, error: str) -> None:
        try:
            self._stats.count_provider_error(self._inner.name, operation, error)
        except redis.RedisError as exc:
            log.warning("could not count a %s error of %s.%s: %s", error, self._inner.name,
                        operation, exc, extra={"provider": self._inner.name})

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __repr__(self) -> str:
        return f"CountedProvider({self._inner!r})"


def counted(adapters: list[Provider], client: redis.Redis) -> list[Provider]:
    """``adapters``, each wrapped in a :class:`CountedProvider` counting into ``client``."""
    stats = JobStats(client)
    return [CountedProvider(a, stats) for a in adapters]  # type: ignore[misc]
