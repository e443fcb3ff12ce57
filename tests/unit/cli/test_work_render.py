"""How the CLI writes work figures: costs per 1,000 units, unit counts, the status work line."""

from __future__ import annotations

import pytest

from scheduler.cli.render.jobs import work_line
from scheduler.cli.render.tables import count, per_1k


@pytest.mark.parametrize(("value", "shown"), [
    (None, "-"), (0.0, "$0.00"), (12.345, "$12.35"), (0.5, "$0.50"), (0.01, "$0.01"),
    (0.0099999, "$0.01"),      # rounds to 2 significant digits first: not $0.0100
    (0.0099, "$0.0099"), (0.000417, "$0.00042"), (5.1e-5, "$0.000051"),
])
def test_cost_per_1k(value, shown):
    assert per_1k(value) == shown


@pytest.mark.parametrize(("value", "shown"), [
    (None, "?"), (0, "0"), (950, "950"), (999.5, "999.5"), (1000, "1k"), (12_500, "12.5k"),
    (3e6, "3M"), (1.28e6, "1.28M"), (2.5e9, "2.5G"), (1e12, "1.00e+12"),
])
def test_count(value, shown):
    assert count(value) == shown


def _job(state: str, work) -> dict:
    return {"state": state, "derived": {"work": work}}


WORK = {"unit": "tokens", "done": 3e8, "total": 1e9, "rate_units_per_h": 4e7,
        "rate_source": "prior", "gpu_model": "RTX4090", "gpu_count": 2,
        "price_usd_per_hour": 0.8, "cost_per_1k_usd": 0.8 * 1000 / 4e7,
        "hours_to_finish": 7e8 / 4e7, "cost_to_finish_usd": 7e8 / 4e7 * 0.8}


def test_work_line():
    assert work_line(_job("running", None)) is None
    assert str(work_line(_job("running", WORK))) == (
        "work: 300M of 1G tokens · 40M tokens/h on 2x RTX4090 (prior) at $0.8000/h = "
        "$0.000020 per 1k tokens · 17.5 h, $14.00 to finish")
    # A finished job has nothing left to finish; one without a rate shows its count only.
    assert str(work_line(_job("succeeded", WORK))).endswith("= $0.000020 per 1k tokens")
    bare = {"unit": "steps", "done": 120.0, "total": None}
    assert str(work_line(_job("pending", bare))) == "work: 120 steps"
