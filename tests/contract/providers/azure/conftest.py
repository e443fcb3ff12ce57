"""Fixtures for the Azure adapter contract tests: a small ``TokenCredential`` (azure-core's
``AccessToken``) standing in for DefaultAzureCredential, the local fake Resource Manager and
Retail Prices endpoints over HTTPS, and a provider builder pointed at them through the REAL
SDK and httpx, verifying TLS against the fake's CA."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from azure.core.credentials import AccessToken

from providers.azure import AzureProvider, AzureSettings
from tests.contract.providers.azure.data import (
    LOCATION,
    RESOURCE_GROUP,
    SSH_KEY,
    SUBNET,
    SUBSCRIPTION,
    T0,
    retail_items,
    skus,
)
from tests.contract.providers.azure.fake_azure import FakeAzure

TEST_TOKEN = "test-bearer-token-0f1e2d3c4b5a"


class StaticToken:
    """A ``TokenCredential`` handing out :data:`TEST_TOKEN`; counts the scopes asked for."""

    def __init__(self, token: str = TEST_TOKEN) -> None:
        self.token = token
        self.scopes: list[str] = []

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        self.scopes.extend(scopes)
        return AccessToken(self.token, int(time.time()) + 3600)


@pytest.fixture
def fake_azure_factory(tmp_path: Path) -> Iterator[Callable[..., FakeAzure]]:
    """``fake_azure_factory(**kwargs) -> FakeAzure`` over :mod:`.data`; stopped after the
    test."""
    started: list[FakeAzure] = []

    def make(**kwargs: Any) -> FakeAzure:
        kwargs.setdefault("skus", skus())
        kwargs.setdefault("retail_items", retail_items())
        fake = FakeAzure(token=TEST_TOKEN, workdir=tmp_path, subscription=SUBSCRIPTION,
                         **kwargs)
        started.append(fake)
        return fake

    yield make
    for fake in started:
        fake.stop()


@pytest.fixture
def fake_azure(fake_azure_factory: Callable[..., FakeAzure]) -> FakeAzure:
    return fake_azure_factory()


def launch_section(**values: Any) -> dict[str, Any]:
    return {"image": "microsoft-dsvm:ubuntu-hpc:2204:latest", "subnets": {LOCATION: SUBNET},
            "ssh_public_key": SSH_KEY, **values}


def settings_for(fake: FakeAzure, **values: Any) -> AzureSettings:
    """Settings on the fake's endpoints, one retry without a long wait."""
    base: dict[str, Any] = {
        "subscription_id": SUBSCRIPTION, "locations": [LOCATION],
        "resource_group": RESOURCE_GROUP, "endpoint_url": fake.url,
        "retail_prices_url": f"{fake.url}/api/retail/prices", "max_attempts": 2,
        "retry_base_wait_s": 0.01, "launch": launch_section()}
    return AzureSettings.model_validate({**base, **values})


@pytest.fixture
def make_provider() -> Iterator[Callable[..., AzureProvider]]:
    """``make_provider(fake, credential=None, clock=None, **settings) -> AzureProvider``
    (clock default: T0)."""
    made: list[AzureProvider] = []

    def make(fake: FakeAzure, credential: Any = None, clock: Any = None,
             **values: Any) -> AzureProvider:
        provider = AzureProvider(settings_for(fake, **values),
                                 credential=credential or StaticToken(), verify=fake.ca_file,
                                 clock=clock or (lambda: T0))
        made.append(provider)
        return provider

    yield make
    for provider in made:
        provider.close()
