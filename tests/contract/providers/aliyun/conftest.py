"""Fixtures for the Alibaba Cloud adapter contract tests: test-only credentials in the
environment (where the adapter reads them), the local fake ECS endpoint and a provider builder
pointed at it through the REAL SDK."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

import pytest

from providers.aliyun import AliyunProvider, AliyunSettings
from providers.aliyun.client import ACCESS_KEY_ENV, SECURITY_TOKEN_ENV
from tests.contract.providers.aliyun.data import (
    CNY_TO_USD,
    REGION,
    T0,
    TEST_KEY_ID,
    TEST_KEY_SECRET,
    catalog,
)
from tests.contract.providers.aliyun.fake_ecs import FakeEcs


def isolate_aliyun_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the test key pair in the environment (no STS token, no SDK-style variables)."""
    for pair in ACCESS_KEY_ENV:
        for name in pair:
            monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv(SECURITY_TOKEN_ENV, raising=False)
    monkeypatch.setenv("ALIBABA_CLOUD_ACCESS_KEY_ID", TEST_KEY_ID)
    monkeypatch.setenv("ALIBABA_CLOUD_ACCESS_KEY_SECRET", TEST_KEY_SECRET)


@pytest.fixture
def aliyun_env(monkeypatch: pytest.MonkeyPatch) -> None:
    isolate_aliyun_env(monkeypatch)


@pytest.fixture
def fake_ecs_factory() -> Iterator[Callable[..., FakeEcs]]:
    """``fake_ecs_factory(**kwargs) -> FakeEcs`` over :func:`data.catalog` (its clock at T0)
    accepting the test key pair; stopped after the test."""
    started: list[FakeEcs] = []

    def make(**kwargs: Any) -> FakeEcs:
        kwargs.setdefault("now", lambda: T0)
        fake = FakeEcs(kwargs.pop("catalog", None) or catalog(),
                       {TEST_KEY_ID: TEST_KEY_SECRET}, **kwargs)
        started.append(fake)
        return fake

    yield make
    for fake in started:
        fake.stop()


@pytest.fixture
def fake_ecs(fake_ecs_factory: Callable[..., FakeEcs]) -> FakeEcs:
    return fake_ecs_factory()


def settings_for(fake: FakeEcs, regions: list[str] | None = None, **values: Any) -> AliyunSettings:
    """China-site settings on the fake's endpoint, fast retries (tests must not sleep long)."""
    base: dict[str, Any] = {
        "regions": regions or [REGION], "site": "china",
        "exchange_rates_usd": {"CNY": CNY_TO_USD}, "endpoint_url": fake.url,
        "retry_base_wait_s": 0.01, "retry_max_wait_s": 0.05}
    return AliyunSettings(**{**base, **values})


@pytest.fixture
def make_provider(aliyun_env: None) -> Iterator[Callable[..., AliyunProvider]]:
    """``make_provider(fake, regions=None, clock=None, **settings) -> AliyunProvider`` on the
    fake's endpoint (clock default: T0)."""
    made: list[AliyunProvider] = []

    def make(fake: FakeEcs, regions: list[str] | None = None,
             clock: Callable[[], datetime] | None = None, **values: Any) -> AliyunProvider:
        provider = AliyunProvider(settings_for(fake, regions, **values), clock=clock or (lambda: T0))
        made.append(provider)
        return provider

    yield make
    for provider in made:
        provider.close()
