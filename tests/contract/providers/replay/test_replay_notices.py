"""How a replayed market warns of a reclaim: the ``notice`` of an offer or catalog, its
defaults (the imitated cloud's style, the market's ``notice_seconds``), and the
``interruption_notice_s`` its offers carry."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from core.config import examples_dir
from core.models import Market
from providers.replay.market import (
    MarketError,
    Notice,
    ReplayMarket,
    ReplayOffer,
    load_market,
)
from providers.replay.timeline import PriceSeries
from tests.fixtures.shared_data import needs_shared_data

NOW = datetime(2026, 1, 1, tzinfo=UTC)
OFFER = ("region: r, zone: {zone}, instance_type: t, gpu_model: T4, gpu_count: 1, "
         "vram_gib: 16, vcpus: 4, memory_gib: 16")


def _market(tmp_path: Path, *offers: str, notice_seconds: float = 12) -> ReplayMarket:
    lines = "".join(f"\n  - {{{OFFER.format(zone=f'z{i}')}, {o}}}" for i, o in enumerate(offers))
    path = tmp_path / "m.yaml"
    path.write_text(f"name: n\nnotice_seconds: {notice_seconds}\noffers:{lines}\n")
    return load_market(path)


def test_style_follows_the_imitated_cloud_and_seconds_the_market(tmp_path: Path) -> None:
    market = _market(tmp_path, *(f"provider: {p}, spot_price_usd_per_hour: 0.1" for p in
                                 ("aws", "aliyun", "azure", "gcp", "vastai", "replay")))
    got = [(o.provider, market.notice_of(o)) for o in market.offers]
    assert got == [("aws", Notice("aws", 12)), ("aliyun", Notice("aliyun", 12)),
                   ("azure", Notice("azure", 12)), ("gcp", Notice("gcp", 12)),
                   ("vastai", Notice("none", 0)), ("replay", Notice("aws", 12))]
    notices = [o.to_offer(Market.SPOT, 0, NOW).interruption_notice_s for o in market.offers]
    assert notices == [12, 12, 12, 12, 0, 12]


def test_an_offers_notice_overrides_the_defaults(tmp_path: Path) -> None:
    market = _market(tmp_path,
                     "provider: azure, spot_price_usd_per_hour: 0.1, notice: {style: azure, "
                     "seconds: 30}",
                     "provider: vastai, spot_price_usd_per_hour: 0.1, notice: {style: gcp}",
                     "provider: aws, spot_price_usd_per_hour: 0.1, on_demand_price_usd_per_hour: 1,"
                     " notice: {style: none, seconds: 99}")
    azure, vast_as_gcp, aws_silent = market.offers
    assert market.notice_of(azure) == Notice("azure", 30)
    assert market.notice_of(vast_as_gcp) == Notice("gcp", 12)
    assert market.notice_of(aws_silent) == Notice("none", 0)
    assert aws_silent.to_offer(Market.SPOT, 0, NOW).interruption_notice_s == 0
    # On-demand instances are never reclaimed: no notice to speak of.
    assert aws_silent.to_offer(Market.ON_DEMAND, 0, NOW).interruption_notice_s is None


@pytest.mark.parametrize("notice, problem", [
    ("{style: ibm}", "offers[0].notice.style: got 'ibm'; Input should be 'aws', 'aliyun'"),
    ("{style: azure, seconds: -1}", "offers[0].notice.seconds"),
    ("{style: azure, lead: 3}", "offers[0].notice.lead"),
])
def test_bad_notices_name_the_field(tmp_path: Path, notice: str, problem: str) -> None:
    with pytest.raises(MarketError, match=re.escape(problem)):
        _market(tmp_path, f"spot_price_usd_per_hour: 0.1, notice: {notice}")


def test_a_notice_needs_a_spot_market(tmp_path: Path) -> None:
    with pytest.raises(MarketError, match="notice applies to the spot market"):
        _market(tmp_path, "on_demand_price_usd_per_hour: 1, notice: {style: aws}")


def test_a_catalogs_notice_applies_to_its_rows(data_dir: Path, tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(
        "name: n\nnotice_seconds: 7\ncatalogs:\n"
        "  - path: ${GA_DATA_DIR}/catalogs/aws_skypilot_v7_gpu/vms_gpu_rows_partial.csv\n"
        "    provider: aws\n    instance_types: [p3.2xlarge]\n    regions: [us-west-2]\n"
        "    notice: {style: azure, seconds: 30}\n")
    market = load_market(path)
    assert market.offers and {market.notice_of(o) for o in market.offers} == {Notice("azure", 30)}


def test_offers_built_in_code_leave_the_notice_unknown() -> None:
    offer = ReplayOffer(provider="aws", region="r", zone="z", instance_type="t", gpu_model="T4",
                        gpu_count=1, vram_gib=16, vcpus=4, memory_gib=16,
                        on_demand_price_usd_per_hour=1.0, spot_prices=PriceSeries(0.3))
    market = ReplayMarket(name="n", path=Path("."), time_scale=1.0, notice_seconds=120,
                          start_offset_hours=0.0, offers=[offer])
    assert offer.to_offer(Market.SPOT, 0, NOW).interruption_notice_s is None
    assert market.notice_of(offer) == Notice("aws", 120)  # what the replay cloud applies


@needs_shared_data  # aws-real.yaml reads a catalog of the shared data
def test_the_example_markets_still_load_with_their_clouds_notices() -> None:
    demo = load_market(examples_dir() / "market.yaml")
    assert {(o.provider, market_notice) for o in demo.offers
            for market_notice in [demo.notice_of(o)]} == {("aws", Notice("aws", 10)),
                                                          ("gcp", Notice("gcp", 10))}
    for name in ("aws-aliyun.yaml", "aws-real.yaml"):
        market = load_market(examples_dir() / "markets" / name)
        assert {market.notice_of(o).seconds for o in market.offers} == {10}
