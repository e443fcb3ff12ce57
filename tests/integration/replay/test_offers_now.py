"""``ReplayProvider.offers_now``: the offers a cloud would list, without starting one (planning
before any daemon ran), and the running cloud's own list when one runs."""

from __future__ import annotations

import json
import time
from pathlib import Path

from providers.replay import ReplayProvider
from providers.replay.client import running_cloud_url


def _series(offers) -> set[str]:
    return {o.key.series() for o in offers}


def test_no_cloud_is_started_and_the_list_is_the_clouds(provider: ReplayProvider,
                                                        state_dir: Path) -> None:
    before = provider.offers_now()
    assert running_cloud_url(state_dir) is None and not (state_dir / "cloud.json").exists()
    assert not (state_dir / "state.json").exists()  # nothing written: the market clock is untouched
    # "gone" reads 0 from the start and "flaky" 1 for its first 3 s: as a fresh cloud lists them.
    assert _series(before) == {"replay/r1/r1a/steady/on-demand", "replay/r1/r1a/steady/spot",
                               "replay/r1/r1b/flaky/spot"}
    listed = provider.list_offers()  # starts the cloud: its clock starts now
    assert running_cloud_url(state_dir) is not None
    assert _series(provider.offers_now()) == _series(listed) == _series(before)
    assert {o.key.series(): o.price_usd_per_hour for o in before} == \
        {o.key.series(): o.price_usd_per_hour for o in listed}


def test_a_stopped_cloud_keeps_its_market_clock(provider: ReplayProvider, state_dir: Path) -> None:
    provider.list_offers()
    provider.shutdown_cloud()
    assert running_cloud_url(state_dir) is None
    # Move the recorded epoch 10 wall s back: market minute 10, past flaky's 3 available ticks.
    state = json.loads((state_dir / "state.json").read_text())
    epoch = time.time() - 10
    state["epoch_wall"] = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(epoch))
    (state_dir / "state.json").write_text(json.dumps(state))
    assert _series(provider.offers_now()) == {"replay/r1/r1a/steady/on-demand",
                                              "replay/r1/r1a/steady/spot"}
    assert running_cloud_url(state_dir) is None
