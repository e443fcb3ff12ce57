"""Hand-made replay markets written to a temp folder: the simulator reads them through
providers.replay.market.load_market, exactly as ``schedctl simulate`` does."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from providers.replay.market import load_market
from core.models import JobSpec
from scheduler.simulator.market import build_sim_market

OFFER = ("{provider: aws, region: r1, zone: %s, instance_type: p3.2xlarge, gpu_model: V100, "
         "gpu_count: 1, vram_gib: 16, vcpus: 8, memory_gib: 61%s}")


def write_market(folder: Path, traces: dict[str, list[int]], spot_usd: float = 1.0,
                 on_demand_usd: float | None = 3.0, gap_s: int = 600,
                 notices: dict[str, str] | None = None) -> Path:
    """A market with one spot offer per zone (trace ``traces[zone]``, 1 = available) and an
    on-demand offer in the first zone; ``notices`` gives a zone's offer a ``notice`` (YAML
    flow text, e.g. ``{style: none}``; default AWS's, with the market's 120 s)."""
    lines = ["name: hand", "offers:"]
    for i, (zone, data) in enumerate(traces.items()):
        (folder / f"{zone}.json").write_text(json.dumps(
            {"metadata": {"gap_seconds": gap_s}, "data": data}))
        prices = f", spot_price_usd_per_hour: {spot_usd}, availability_trace: {zone}.json"
        if i == 0 and on_demand_usd is not None:
            prices += f", on_demand_price_usd_per_hour: {on_demand_usd}"
        if notices and zone in notices:
            prices += f", notice: {notices[zone]}"
        lines.append("  - " + OFFER % (zone, prices))
    path = folder / "market.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def sim_market(tmp_path):
    def build(traces: dict[str, list[int]], ticks: int | None = None, **kw):
        path = write_market(tmp_path, traces, **kw)
        n = ticks or max(len(v) for v in traces.values())
        return build_sim_market(load_market(path), JobSpec(name="t", command="true"), n)
    return build


def markov_trace(rng: np.random.Generator, n: int, p_up: float, p_down: float) -> list[int]:
    """A 0/1 availability trace: stay up with prob ``p_up``, stay down with ``p_down``."""
    out, state = [], 1
    for _ in range(n):
        out.append(state)
        state = int(rng.random() < (p_up if state else 1 - p_down))
    return out
