"""Shared pieces of the controller tests: a replay cloud process over a market written by the
test, and a controller context over the test's Redis."""

from __future__ import annotations

import sys

import pytest

from providers.replay import ReplayProvider, shutdown_cloud
from scheduler.controller.context import AgentBootstrap, Context, ProviderRegistry
from scheduler.store import Store
from scheduler.store.agents import AgentTokens

# Stand-in agents that only sleep: agent reports are written by the tests.
SLEEPER = [sys.executable, "-c", "import time; time.sleep(300)"]


@pytest.fixture
def replay_market(tmp_path):
    """``make(market_yaml, files={name: text})`` → a :class:`ReplayProvider` over that market
    (the files are its traces); its cloud process is shut down after the test."""
    made = []

    def make(market_yaml: str, files: dict[str, str] | None = None) -> ReplayProvider:
        folder = tmp_path / "market"
        folder.mkdir(exist_ok=True)
        for name, text in (files or {}).items():
            (folder / name).write_text(text)
        (folder / "market.yaml").write_text(market_yaml)
        made.append(ReplayProvider(folder / "market.yaml", tmp_path / "cloud", SLEEPER))
        return made[-1]

    yield make
    for p in made:
        p.close()
    shutdown_cloud(tmp_path / "cloud")


def controller_context(redis_client, provider) -> Context:
    bootstrap = AgentBootstrap(api_url="http://127.0.0.1:9", store_url="file:///nowhere",
                               tokens=AgentTokens(b"s"))
    return Context(store=Store.over(redis_client), providers=ProviderRegistry([provider]),
                   bootstrap=bootstrap, owner="ga-test")
