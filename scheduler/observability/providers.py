"""Counting failed provider calls, per provider, operation and error type, in Redis.

:func:`counted` makes every public operation of each adapter (``list_offers``,
``poll_prices``, ``launch``, ``terminate``, ``describe``) that raises a
:class:`~providers.errors.ProviderError` add one to ``ga_provider_errors_total`` before the
error goes on unchanged, through :meth:`providers.base.Provider.report_errors_to`: the
adapters are not wrapped, so their type (and abilities) stay their own. The counter lives in
Redis (:mod:`scheduler.store.provider_errors`), so it is the same on every replica. Counting
never gets in the way: a Redis failure while counting is logged and dropped.
"""

from __future__ import annotations

import logging

import redis

from providers.base import Provider
from providers.errors import ProviderError
from scheduler.store.provider_errors import ProviderErrors

log = logging.getLogger(__name__)


def error_counter(errors: ProviderErrors):
    """The error listener (:data:`providers.base.ErrorListener`) counting into ``errors``."""
    def count(provider: str, operation: str, exc: ProviderError) -> None:
        error = type(exc).__name__
        try:
            errors.count(provider, operation, error)
        except redis.RedisError as redis_exc:
            log.warning("could not count a %s error of %s.%s: %s", error, provider, operation,
                        redis_exc, extra={"provider": provider})
    return count


def counted(adapters: list[Provider], client: redis.Redis) -> list[Provider]:
    """``adapters`` themselves, each now counting its failed calls into ``client``'s Redis."""
    listener = error_counter(ProviderErrors(client))
    for adapter in adapters:
        adapter.report_errors_to(listener)
    return list(adapters)
