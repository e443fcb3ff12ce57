"""Fixtures for the GCP adapter contract tests: a local fake of Compute Engine and the Cloud
Billing Catalog (:mod:`.fake_gcp`), an environment without the machine's Application Default
Credentials, and a provider builder that reaches the fake through the real SDKs with a
fixed-token credential (the fake checks the ``Authorization`` header)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import google.oauth2.credentials
import pytest

from providers.gcp import GcpProvider, GcpSettings
from providers.gcp.client import GcpClient
from tests.contract.providers.gcp.data import PROJECT, fake_kwargs
from tests.contract.providers.gcp.fake_gcp import FakeGcp

ACCESS_TOKEN = "test-access-token"


@pytest.fixture(autouse=True)
def no_machine_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No ADC of this machine: a missing GOOGLE_APPLICATION_CREDENTIALS file, no gcloud
    config directory."""
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "no-adc.json"))
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "no-gcloud"))


@pytest.fixture
def fake() -> Iterator[FakeGcp]:
    server = FakeGcp(**fake_kwargs())
    yield server
    server.stop()


def token_credentials(token: str = ACCESS_TOKEN) -> google.oauth2.credentials.Credentials:
    """A credential that sends ``Authorization: Bearer <token>`` and never refreshes."""
    return google.oauth2.credentials.Credentials(token=token)


@pytest.fixture
def make_provider() -> Iterator[Callable[..., GcpProvider]]:
    """``make_provider(fake, regions=["us-central1"], token=ACCESS_TOKEN, clock=None,
    **settings) -> GcpProvider`` on the fake's endpoints."""
    made: list[GcpProvider] = []

    def make(fake: FakeGcp, regions: list[str] | None = None, token: str = ACCESS_TOKEN,
             clock: Callable[[], datetime] | None = None, **settings: Any) -> GcpProvider:
        values: dict[str, Any] = {"project": PROJECT, "regions": regions or ["us-central1"],
                                  "api_endpoint": fake.url, "billing_api_endpoint": fake.url,
                                  **settings}
        parsed = GcpSettings(**values)
        client = GcpClient(PROJECT, api_endpoint=fake.url, billing_api_endpoint=fake.url,
                           credentials=token_credentials(token))
        provider = GcpProvider(parsed, client=client, **({"clock": clock} if clock else {}))
        made.append(provider)
        return provider

    yield make
    for provider in made:
        provider.close()
