"""``schedctl offers`` shows each price's age: since when the current price is in force (its
first observation at that value), not the last poll. Real Redis; a real replay cloud polled
by the real poller; the table as ``GET /v1/offers`` serves it and the CLI draws it."""

from __future__ import annotations

import sys
import time
from datetime import datetime, timedelta

import pytest

from providers.replay import ReplayProvider, shutdown_cloud
from scheduler.cli import render
from scheduler.poller.offers import OfferPoller
from scheduler.services import offers as offer_service
from tests.factories.offers import T0, offer

MS = timedelta(milliseconds=1)
# One spot offer whose price steps once, 3 s (wall) after the cloud starts (time_scale 60).
MARKET = """
name: agetest
time_scale: 60
notice_seconds: 10
offers:
  - {provider: aws, region: us-east-1, zone: us-east-1c, instance_type: p3.2xlarge,
     gpu_model: V100, gpu_count: 1, vram_gib: 16, vcpus: 8, memory_gib: 61,
     spot_price_usd_per_hour: 0.918, spot_price_series: [{at_hours: 0.05, price: 0.952}]}
"""


@pytest.fixture
def replay(tmp_path):
    (tmp_path / "market.yaml").write_text(MARKET)
    provider = ReplayProvider(tmp_path / "market.yaml", tmp_path / "cloud",
                              [sys.executable, "-c", "pass"])
    yield provider
    provider.close()
    shutdown_cloud(tmp_path / "cloud")


def _row(store) -> dict:
    [row] = offer_service.table(store)
    return row


def test_age_grows_while_the_price_holds_and_restarts_when_it_changes(store, replay):
    poll = OfferPoller(store, replay)
    poll()
    first = _row(store)
    assert first["spot_usd_per_hour"] == 0.918
    ages = [first["price_age_s"]]
    for _ in range(3):  # three more polls at the same price
        time.sleep(0.4)
        poll()
        row = _row(store)
        assert row["price_since"] == first["price_since"]  # not the last poll
        assert row["observed_at"] > first["observed_at"]
        ages.append(row["price_age_s"])
    assert ages == sorted(ages) and ages[-1] - ages[0] >= 1.0

    time.sleep(max(0.0, 3.3 - ages[-1]))  # past the step at market hour 0.05
    poll()
    changed = _row(store)
    assert changed["spot_usd_per_hour"] == 0.952
    assert changed["price_since"] > first["price_since"]
    assert changed["price_age_s"] < ages[-1]
    # the start is when the market moved (the replayed change), not when we happened to poll
    [step] = [o for o in replay.poll_prices(None) if o.price_usd_per_hour == 0.952]
    assert abs(datetime.fromisoformat(changed["price_since"]) - step.observed_at) < MS  # ms stored

    table = render.offers_table([changed])
    assert table.columns[-1].header == "age" and "age: since the price started" in table.title
    assert list(table.columns[-1].cells) == [render.price_age(changed["price_age_s"])]


def test_first_seen_price_is_kept_across_polls_without_history(store):
    """No price history at all (a catalog-like provider): the start is the first poll that
    listed the price."""
    store.offers.replace_offers("aws", [offer(observed_at=T0)])
    store.offers.replace_offers("aws", [offer(observed_at=T0 + timedelta(minutes=5))])
    series = offer().key.series()
    assert store.offers.price_since([series]) == {series: T0}
    store.offers.replace_offers("aws", [offer(observed_at=T0 + timedelta(minutes=9),
                                              price_usd_per_hour=1.01)])
    assert store.offers.price_since([series]) == {series: T0 + timedelta(minutes=9)}


@pytest.mark.parametrize("seconds, shown", [(None, "-"), (42, "42s"), (125, "2m"),
                                            (3 * 3600 + 5, "3h"), (6 * 86400, "6d"),
                                            (800 * 86400, "2y")])
def test_price_age_reads_in_the_largest_whole_unit(seconds, shown):
    assert render.price_age(seconds) == shown
