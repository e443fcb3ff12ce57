"""Fixtures for replay integration tests: a small market, a stand-in agent, a provider whose
cloud process (and every instance it started) is stopped after each test."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from providers.replay import ReplayProvider, shutdown_cloud

STANDIN_AGENT = Path(__file__).with_name("standin_agent.py")

# time_scale 60 with 60 s ticks: one trace tick per wall second.
MARKET_YAML = """
name: itest
time_scale: 60
notice_seconds: 1.5
offers:
  - {region: r1, zone: r1a, instance_type: steady, gpu_model: T4, gpu_count: 1, vram_gib: 16,
     vcpus: 4, memory_gib: 16, on_demand_price_usd_per_hour: 0.5,
     spot_price_usd_per_hour: 0.2, spot_price_series: [{at_hours: 0.02, price: 0.22}]}
  - {region: r1, zone: r1b, instance_type: flaky, gpu_model: T4, gpu_count: 1, vram_gib: 16,
     vcpus: 4, memory_gib: 16, spot_price_usd_per_hour: 0.15, availability_trace: flaky.json}
  - {provider: other, region: r2, zone: r2a, instance_type: gone, gpu_model: A10G,
     gpu_count: 1, vram_gib: 22, vcpus: 4, memory_gib: 16, spot_price_usd_per_hour: 0.3,
     availability_trace: gone.json}
"""


@pytest.fixture
def market_file(tmp_path: Path) -> Path:
    """A market: ``steady`` (on-demand + spot, always available, a spot price step at 1.2 s),
    ``flaky`` (spot, reclaimed 3 s after the cloud starts), ``gone`` (spot, never available,
    provider ``other``)."""
    folder = tmp_path / "market"
    folder.mkdir()
    (folder / "flaky.json").write_text(
        json.dumps({"metadata": {"gap_seconds": 60}, "data": [1, 1, 1] + [0] * 60}))
    (folder / "gone.json").write_text(json.dumps({"metadata": {"gap_seconds": 60}, "data": [0]}))
    path = folder / "market.yaml"
    path.write_text(MARKET_YAML)
    return path


@pytest.fixture
def state_dir(tmp_path: Path) -> Iterator[Path]:
    """A fresh cloud state dir; whatever cloud serves it is shut down after the test."""
    path = tmp_path / "cloud"
    yield path
    shutdown_cloud(path)


@pytest.fixture
def make_provider(market_file: Path, state_dir: Path) -> Iterator[Callable[..., ReplayProvider]]:
    """Factory of providers over the test market and state dir, using the stand-in agent."""
    made: list[ReplayProvider] = []

    def make(**kwargs: object) -> ReplayProvider:
        provider = ReplayProvider(market_file, state_dir,
                                  [sys.executable, str(STANDIN_AGENT)], **kwargs)
        made.append(provider)
        return provider

    yield make
    for provider in made:
        provider.close()


@pytest.fixture
def provider(make_provider: Callable[..., ReplayProvider]) -> ReplayProvider:
    return make_provider()
