"""Counting failed provider calls (scheduler/observability/providers.py): the adapter itself
reports to the listener, the error goes on unchanged, and a Redis failure while counting is
logged and dropped."""

from __future__ import annotations

import logging

import pytest
import redis

from providers.base import Provider
from providers.errors import AuthError, TransientError
from scheduler.observability.providers import counted


class Flaky(Provider):
    name = "flaky"

    def _list_offers(self):
        raise TransientError("throttled", provider=self.name)

    def _poll_prices(self, since):
        raise AuthError("denied", provider=self.name)


class Hash:
    """The one Redis call counting makes, in memory; ``down`` makes it fail."""

    def __init__(self, down: bool = False) -> None:
        self.down = down
        self.fields: dict[str, int] = {}

    def hincrby(self, key: str, field: str, amount: int) -> int:
        if self.down:
            raise redis.ConnectionError("Redis is down")
        self.fields[field] = self.fields.get(field, 0) + amount
        return self.fields[field]


def test_failed_calls_are_counted_by_operation_and_error_type():
    adapter, client = Flaky(), Hash()
    assert counted([adapter], client) == [adapter]
    for _ in range(2):
        with pytest.raises(TransientError):
            adapter.list_offers()
    with pytest.raises(AuthError):
        adapter.poll_prices()
    assert client.fields == {"flaky|list_offers|TransientError": 2,
                             "flaky|poll_prices|AuthError": 1}


def test_a_redis_failure_while_counting_changes_nothing(caplog):
    adapter = Flaky()
    counted([adapter], Hash(down=True))
    caplog.set_level(logging.WARNING, logger="scheduler.observability.providers")
    with pytest.raises(TransientError, match="throttled"):
        adapter.list_offers()
    assert "could not count a TransientError error of flaky.list_offers" in caplog.text
