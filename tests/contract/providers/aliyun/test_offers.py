"""``AliyunProvider`` offers and prices through the REAL SDK against the fake ECS endpoint:
what is offered (stock, vSwitches), prices in USD with the native ones kept, interruption risk,
every price observation, caching, throttling and failing regions."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest

from core.models import Market, OfferKey
from providers.errors import AuthError
from tests.contract.providers.aliyun.data import (
    CNY_TO_USD,
    GN6I,
    GN6I_2,
    GN6V,
    GN7,
    LIST_CNY,
    ORIGIN_CNY,
    OTHER_REGION,
    REGION,
    SPOT_CNY,
    T0,
)


def _series(offers) -> dict[str, object]:
    return {o.key.series(): o for o in offers}


def test_offers_in_usd_from_stock_prices_and_advice(fake_ecs, make_provider) -> None:
    provider = make_provider(fake_ecs)
    offers = _series(provider.list_offers())
    h, i = f"aliyun/{REGION}/cn-hangzhou-h", f"aliyun/{REGION}/cn-hangzhou-i"
    assert sorted(offers) == sorted([
        f"{h}/{GN6I}/on-demand", f"{h}/{GN6I}/spot", f"{i}/{GN6I}/on-demand",
        f"{h}/{GN6I_2}/on-demand", f"{h}/{GN6I_2}/spot",
        f"{i}/{GN6V}/on-demand", f"{i}/{GN6V}/spot",
    ])  # GN7 sold out (ClosedWithoutStock); GN6I spot in zone i SoldOut; the CPU type ignored
    spot = offers[f"{h}/{GN6I}/spot"]
    assert spot.price_usd_per_hour == pytest.approx(SPOT_CNY[("cn-hangzhou-h", GN6I)] * CNY_TO_USD)
    assert spot.on_demand_price_usd_per_hour == pytest.approx(LIST_CNY[GN6I] * CNY_TO_USD)
    assert (spot.gpu_model, spot.gpu_count, spot.vram_gib, spot.vcpus, spot.memory_gib) == (
        "T4", 1, 16.0, 4, 15.0)
    assert spot.interruption_risk == 0.025 and spot.observed_at == T0
    assert offers[f"{i}/{GN6V}/spot"].interruption_risk == 0.075   # only "5-10%" given
    assert offers[f"{h}/{GN6I_2}/spot"].interruption_risk == 0.125  # region-wide advice
    # No DescribePrice for GN6I_2: the pay-as-you-go price is the spot history's OriginPrice.
    assert offers[f"{h}/{GN6I_2}/on-demand"].price_usd_per_hour == pytest.approx(
        ORIGIN_CNY[GN6I_2] * CNY_TO_USD)
    assert offers[f"{h}/{GN6I_2}/on-demand"].vram_gib == 16.0  # per GPU, 2 GPUs
    native = provider.native_prices.get(spot.key)
    assert (native.price, native.currency, native.usd_per_unit, native.on_demand_price) == (
        SPOT_CNY[("cn-hangzhou-h", GN6I)], "CNY", CNY_TO_USD, LIST_CNY[GN6I])
    assert provider.native_prices.get(OfferKey.from_series(f"{h}/{GN7}/on-demand")) is None
    # Only types with stock were priced and asked for spot prices.
    asked = {c["InstanceType"] for c in fake_ecs.calls("DescribeSpotPriceHistory")}
    assert asked == {GN6I, GN6I_2, GN6V}
    assert GN7 not in {c["InstanceType"] for c in fake_ecs.calls("DescribePrice")}


def test_second_poll_uses_the_caches(fake_ecs, make_provider) -> None:
    provider = make_provider(fake_ecs)
    first = provider.list_offers()
    before = dict(fake_ecs.counts)
    assert provider.list_offers() == first
    new = {a: n - before.get(a, 0) for a, n in fake_ecs.counts.items() if n != before.get(a, 0)}
    assert new == {"DescribeSpotPriceHistory": 3}  # spot prices are always asked again


def test_launch_settings_limit_offers_to_zones_with_a_vswitch(fake_ecs, make_provider) -> None:
    provider = make_provider(fake_ecs, launch={
        "image_id": "ubuntu_22_04_x64_20G_alibase_20240130.vhd",
        "vswitches": {"cn-hangzhou-i": "vsw-i"}, "security_groups": {REGION: "sg-1"}})
    assert {o.zone for o in provider.list_offers()} == {"cn-hangzhou-i"}


def test_markets_setting(fake_ecs, make_provider) -> None:
    provider = make_provider(fake_ecs, markets=["spot"])
    assert {o.market for o in provider.list_offers()} == {Market.SPOT}
    assert fake_ecs.calls("DescribePrice")  # still: spot offers show the on-demand price
    assert {c["SpotStrategy"] for c in fake_ecs.calls("DescribeAvailableResource")} == {
        "SpotAsPriceGo"}


def test_every_price_observation_since(fake_ecs, make_provider) -> None:
    provider = make_provider(fake_ecs)
    first = provider.poll_prices()  # the last 24 h
    spot = [o for o in first if o.series.endswith("/spot")]
    origin = [o for o in first if o.series.endswith("/on-demand") and o.observed_at != T0]
    listed = [o for o in first if o.observed_at == T0]
    series = {o.series for o in spot}
    assert len(series) == 4 and len(spot) == 4 * 24  # hourly records within 24 h
    assert len(origin) == 4 * 24 and len(listed) == 3  # OriginPrice + DescribePrice
    assert min(o.observed_at for o in first) == T0.replace(minute=0) - timedelta(hours=23)
    latest = max((o for o in spot if "cn-hangzhou-h/" + GN6I in o.series),
                 key=lambda o: o.observed_at)
    assert latest.price_usd_per_hour == pytest.approx(
        SPOT_CNY[("cn-hangzhou-h", GN6I)] * CNY_TO_USD)
    assert all(o.observed_at.tzinfo is not None for o in first)
    start = fake_ecs.calls("DescribeSpotPriceHistory")[0]["StartTime"]
    assert start == (T0 - timedelta(hours=24)).strftime("%Y-%m-%dT%H:%M:%SZ")

    since = T0 - timedelta(minutes=90)
    later = provider.poll_prices(since)
    assert {o.observed_at for o in later} == {T0.replace(minute=0) - timedelta(hours=1),
                                              T0.replace(minute=0), T0}
    assert len(later) == 2 * 4 * 2 + 3
    assert provider.poll_prices(T0) == []  # nothing newer


def test_history_never_asks_beyond_30_days(fake_ecs, make_provider) -> None:
    provider = make_provider(fake_ecs, history_lookback_h=720)
    provider.poll_prices(T0 - timedelta(days=45))
    starts = {c["StartTime"] for c in fake_ecs.calls("DescribeSpotPriceHistory")}
    assert len(starts) == 1 and starts.pop() > (T0 - timedelta(days=30)).strftime(
        "%Y-%m-%dT%H:%M:%SZ")


def test_throttled_spot_history_is_retried(fake_ecs, make_provider) -> None:
    provider = make_provider(fake_ecs)
    fake_ecs.fail("DescribeSpotPriceHistory", "Throttling", times=2)
    fake_ecs.fail("DescribePrice", "ServiceUnavailable", status=503, times=1)
    assert len(provider.list_offers()) == 7


def test_a_failing_region_keeps_its_last_good_offers(fake_ecs, make_provider,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    provider = make_provider(fake_ecs, regions=[REGION, OTHER_REGION])
    first = _series(provider.list_offers())
    beijing = {k for k in first if f"/{OTHER_REGION}/" in k}
    assert len(beijing) == 2 and first[f"aliyun/{OTHER_REGION}/cn-beijing-g/{GN6I}/spot"
                                      ].interruption_risk is None  # no advice: unrated
    fake_ecs.fail("DescribeSpotPriceHistory", "Forbidden.RAM", region=OTHER_REGION)
    with caplog.at_level(logging.WARNING, logger="providers.regional"):
        assert set(_series(provider.list_offers())) == set(first)
    assert "aliyun offers for cn-beijing failed, keeping 2 offers" in caplog.text
    fake_ecs.fail("DescribeSpotPriceHistory", "Forbidden.RAM", times=2)
    with pytest.raises(AuthError):  # every region failed
        provider.poll_prices()


def test_a_region_ecs_does_not_know_is_named(fake_ecs, make_provider,
                                             caplog: pytest.LogCaptureFixture) -> None:
    provider = make_provider(fake_ecs, regions=[REGION, "cn-atlantis"])
    with caplog.at_level(logging.WARNING):
        offers = provider.list_offers()
    assert {o.region for o in offers} == {REGION}
    assert "aliyun region cn-atlantis is not in DescribeRegions" in caplog.text
    assert {r.check: r.ok for r in provider.check() if r.region == "-"} == {
        "credentials": True, "DescribeRegions": False}
