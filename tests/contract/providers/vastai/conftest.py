"""Fixtures for the Vast.ai adapter contract tests: a test-only API key in the environment
(the SDK's chain, isolated from any key file of the machine), a local fake of Vast's API and a
provider builder pointed at it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from providers.vastai import VastProvider, VastSettings
from tests.contract.providers.vastai.fake_vast import FakeVast

TEST_API_KEY = "vast-test-key-0123456789abcdef0123456789abcdef"


@pytest.fixture
def vast_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The test key in VAST_API_KEY; no key file the SDK could find instead."""
    monkeypatch.setenv("VAST_API_KEY", TEST_API_KEY)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("VAST_URL", raising=False)


@pytest.fixture
def fake_vast_factory() -> Iterator[Callable[..., FakeVast]]:
    started: list[FakeVast] = []

    def make(asks: list[dict[str, Any]], **kwargs: Any) -> FakeVast:
        fake = FakeVast(asks, api_key=kwargs.pop("api_key", TEST_API_KEY), **kwargs)
        started.append(fake)
        return fake

    yield make
    for fake in started:
        fake.stop()


@pytest.fixture
def make_provider(vast_env: None) -> Iterator[Callable[..., VastProvider]]:
    """``make_provider(fake, clock=None, **settings) -> VastProvider`` on the fake, one
    attempt per request (the SDK's retries sleep), with a launch section unless
    ``launch=None`` is given."""
    made: list[VastProvider] = []

    def make(fake: FakeVast, clock: Callable[[], datetime] | None = None,
             **settings: Any) -> VastProvider:
        values: dict[str, Any] = {"server_url": fake.url, "retries": 1,
                                  "launch": {"image": "pytorch/pytorch:2.4.0-cuda12.4-cudnn9-runtime",
                                             "disk_gib": 40}, **settings}
        provider = VastProvider(VastSettings(**values), clock=clock)
        made.append(provider)
        return provider

    yield make
    for provider in made:
        provider.close()
