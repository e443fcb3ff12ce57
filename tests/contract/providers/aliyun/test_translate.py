"""Pure translation, fed the documented ECS answers (shared/data/api_examples/aliyun_ecs) and
hand-written records in the same shapes."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from core.models import InstanceState, Market
from providers.aliyun import instances, translate
from providers.aliyun.launch import CLIENT_TOKEN_TAG
from providers.aliyun.settings import AliyunSettings
from providers.regional_api import Currencies, latest_prices
from tests.contract.providers.aliyun.data import (
    CNY_TO_USD,
    GN6I,
    GN6I_2,
    GN6V,
    GN7,
    INSTANCE_TYPES,
    REGION,
    example,
    needs_examples,
)

ANY = AliyunSettings(regions=["cn-hangzhou"]).wants_type  # no patterns: every type
CNY = Currencies("CNY", {"CNY": CNY_TO_USD})
USD = Currencies("USD", {})
AT = datetime(2026, 3, 2, 12, tzinfo=UTC)


@needs_examples
def test_documented_instance_type_is_a_cpu_type() -> None:
    (record,) = example("DescribeInstanceTypes")["InstanceTypes"]["InstanceType"]
    assert record["GPUAmount"] == 0 and record["GPUSpec"] == ""
    assert translate.gpu_instance_type(record) is None
    assert translate.gpu_instance_types([record], ANY) == ({}, 0)


def test_gpu_types_vram_is_per_gpu_in_gib() -> None:
    types, skipped = translate.gpu_instance_types(INSTANCE_TYPES, ANY)
    assert skipped == 0 and sorted(types) == sorted([GN6I, GN6I_2, GN6V, GN7])
    t4 = types[GN6I]
    assert (t4.gpu_model, t4.gpu_count, t4.vram_gib, t4.vcpus, t4.memory_gib) == (
        "T4", 1, 16.0, 4, 15.0)
    # GPUMemorySize is per GPU: two T4s still have 16 GiB each; absent here, so the family's
    # documented 16 GB per GPU is used.
    assert (types[GN6I_2].gpu_count, types[GN6I_2].vram_gib) == (2, 16.0)
    assert (types[GN7].gpu_model, types[GN7].vram_gib) == ("A100", 40.0)
    wanted = AliyunSettings(regions=["cn-hangzhou"], instance_types=["ecs.gn6*"]).wants_type
    only = translate.gpu_instance_types(INSTANCE_TYPES, wanted)[0]
    assert sorted(only) == sorted([GN6I, GN6I_2, GN6V])


def test_gpu_type_without_memory_or_cpu_fields_is_skipped() -> None:
    vgpu = {**INSTANCE_TYPES[1], "InstanceTypeId": "ecs.vgn6i-m4.xlarge",
            "InstanceTypeFamily": "ecs.vgn6i", "GPUMemorySize": None}
    no_cpu = {k: v for k, v in INSTANCE_TYPES[1].items() if k != "CpuCoreCount"}
    with pytest.raises(ValueError, match="GPUMemorySize missing"):
        translate.gpu_instance_type(vgpu)
    with pytest.raises(ValueError, match="CpuCoreCount"):
        translate.gpu_instance_type(no_cpu)
    assert translate.gpu_instance_types([vgpu, no_cpu, INSTANCE_TYPES[1]], ANY)[1] == 2


@pytest.mark.parametrize("spec, model", [("NVIDIA T4", "T4"), ("NVIDIA  A100", "A100"),
                                         ("AMD MI100", "MI100"), ("", "unknown")])
def test_gpu_model_names(spec: str, model: str) -> None:
    assert translate.gpu_model_name(spec) == model


@needs_examples
def test_documented_available_resource() -> None:
    zones = example("DescribeAvailableResource")["AvailableZones"]["AvailableZone"]
    assert translate.zones_by_type(zones) == {"ecs.g5.large": ("cn-hangzhou-i",)}
    sold = [{**zones[0], "AvailableResources": {"AvailableResource": [{
        "Type": "InstanceType", "SupportedResources": {"SupportedResource": [
            {"Status": "SoldOut", "Value": "ecs.g5.large", "StatusCategory": "WithoutStock"},
            {"Status": "Available", "Value": "ecs.g6.large",
             "StatusCategory": "ClosedWithStock"}]}}]}}]
    assert translate.zones_by_type(sold) == {"ecs.g6.large": ("cn-hangzhou-i",)}


@needs_examples
def test_documented_spot_price_history_in_cny_converts_to_usd() -> None:
    answer = example("DescribeSpotPriceHistory")
    records = [(r, answer["Currency"]) for r in answer["SpotPrices"]["SpotPriceType"]]
    prices, skipped = translate.spot_prices(records, "cn-hangzhou", CNY)
    assert skipped == 0 and len(prices) == 2
    latest = latest_prices(prices)[("cn-hangzhou-g", "ecs.g5.large")]
    assert (latest.spot, latest.origin, latest.currency) == (0.036, 0.354, "CNY")
    assert latest.at == datetime(2019, 11, 19, 7, tzinfo=UTC)
    observations, no_rate = translate.price_observations(
        prices, "cn-hangzhou", CNY, [Market.SPOT, Market.ON_DEMAND])
    assert no_rate == 0 and len(observations) == 4
    spot = [o for o in observations if o.series.endswith("/spot")]
    assert spot[0].series == "aliyun/cn-hangzhou/cn-hangzhou-g/ecs.g5.large/spot"
    assert spot[0].price_usd_per_hour == pytest.approx(0.036 * CNY_TO_USD)
    od = [o for o in observations if o.series.endswith("/on-demand")]
    assert od[-1].price_usd_per_hour == pytest.approx(0.354 * CNY_TO_USD)
    # An international account's answer says USD: no conversion. No rate: left out.
    assert translate.price_observations(
        translate.spot_prices([(r, "USD") for r, _ in records], "cn-hangzhou", USD)[0],
        "cn-hangzhou", USD, [Market.SPOT])[0][0].price_usd_per_hour == 0.036
    assert translate.price_observations(prices, "cn-hangzhou", USD, [Market.SPOT]) == ([], 2)


def test_bad_spot_records_are_skipped() -> None:
    good = {"ZoneId": "cn-hangzhou-h", "InstanceType": GN6I, "SpotPrice": "1.5",
            "OriginPrice": 11.0, "Timestamp": "2026-03-02T11:00:00Z"}
    bad = [{**good, "SpotPrice": -1}, {**good, "SpotPrice": "n/a"}, {**good, "ZoneId": "cn-beijing-g"},
           {k: v for k, v in good.items() if k != "Timestamp"}, {**good, "Timestamp": "soon"}]
    prices, skipped = translate.spot_prices([(r, None) for r in [good, *bad]], REGION, CNY)
    assert skipped == len(bad) and prices[0].spot == 1.5 and prices[0].currency == "CNY"


@needs_examples
def test_documented_describe_price() -> None:
    price = example("DescribePrice")["PriceInfo"]["Price"]
    assert translate.on_demand_price(price, CNY) == (4368.0, "CNY")  # the list price
    assert translate.on_demand_price({"TradePrice": 2.5}, USD) == (2.5, "USD")
    with pytest.raises(ValueError):
        translate.on_demand_price({"Currency": "CNY"}, CNY)


@needs_examples
def test_documented_spot_advice_applies_region_wide() -> None:
    zones = example("DescribeSpotAdvice")["AvailableSpotZones"]["AvailableSpotZone"]
    risks = translate.advice_risks(zones)
    # The documented answer lists the resource in an entry without ZoneId.
    assert risks == {(None, "ecs.c5.large"): 0.0}
    assert translate.risk_for(risks, "cn-hangzhou-i", "ecs.c5.large") == 0.0
    assert translate.risk_for(risks, "cn-hangzhou-i", "ecs.g5.large") is None  # unrated


@pytest.mark.parametrize("resource, risk", [
    ({"InterruptionRate": "2.5", "InterruptRateDesc": "0-3%"}, 0.025),
    ({"InterruptionRate": 7, "InterruptRateDesc": "5-10%"}, 0.07),
    ({"InterruptionRate": "250"}, 1.0),
    ({"InterruptRateDesc": "3-5%"}, 0.04),
    ({"InterruptRateDesc": "10-100%"}, 0.25),
    ({"InterruptionRate": "?", "InterruptRateDesc": "0-3%"}, 0.015),
    ({}, None),
])
def test_interruption_rate_mapping(resource: dict, risk: float | None) -> None:
    assert translate.risk_from_advice(resource) == risk


def test_offers_priced_in_usd_with_native_prices() -> None:
    types, _ = translate.gpu_instance_types(INSTANCE_TYPES, ANY)
    spot = {("cn-hangzhou-h", GN6I): translate.SpotPrice("cn-hangzhou-h", GN6I, 1.74, 11.58,
                                                         "CNY", AT)}
    zones = {Market.ON_DEMAND: {GN6I: ("cn-hangzhou-h", "cn-hangzhou-i")},
             Market.SPOT: {GN6I: ("cn-hangzhou-h", "cn-hangzhou-i")}}
    pairs, warnings = translate.build_offers(
        REGION, types, zones, {GN6I: (11.58, "CNY")}, spot,
        {("cn-hangzhou-h", GN6I): 0.025}, CNY, observed_at=AT,
        launchable_zones=["cn-hangzhou-h", "cn-hangzhou-i"])
    assert warnings == []
    by_key = {o.key.series(): (o, n) for o, n in pairs}
    assert sorted(by_key) == [f"aliyun/{REGION}/cn-hangzhou-h/{GN6I}/on-demand",
                              f"aliyun/{REGION}/cn-hangzhou-h/{GN6I}/spot",
                              f"aliyun/{REGION}/cn-hangzhou-i/{GN6I}/on-demand"]
    offer, native = by_key[f"aliyun/{REGION}/cn-hangzhou-h/{GN6I}/spot"]
    assert offer.price_usd_per_hour == pytest.approx(1.74 * CNY_TO_USD)
    assert offer.on_demand_price_usd_per_hour == pytest.approx(11.58 * CNY_TO_USD)
    assert (offer.interruption_risk, offer.vram_gib, offer.gpu_model) == (0.025, 16.0, "T4")
    assert (native.price, native.currency, native.usd_per_unit, native.on_demand_price) == (
        1.74, "CNY", CNY_TO_USD, 11.58)
    od = by_key[f"aliyun/{REGION}/cn-hangzhou-i/{GN6I}/on-demand"][0]
    assert od.interruption_risk == 0.0 and od.market is Market.ON_DEMAND
    # A zone without a vSwitch is not offered when launching is configured; no rate → warning.
    only_h = translate.build_offers(REGION, types, zones, {GN6I: (11.58, "CNY")}, spot, {}, CNY,
                                    observed_at=AT,
                                    launchable_zones=["cn-hangzhou-h"])[0]
    assert {o.zone for o, _ in only_h} == {"cn-hangzhou-h"}
    assert {o.interruption_risk for o, _ in only_h if o.market is Market.SPOT} == {None}  # no advice: unrated
    none, warnings = translate.build_offers(REGION, types, zones, {GN6I: (11.58, "CNY")}, spot,
                                            {}, USD, observed_at=AT)
    assert none == [] and "no exchange rate for CNY" in warnings[0]


def _raw(**overrides) -> dict:
    raw = {"InstanceId": "i-bp1abc", "InstanceType": GN6I, "ZoneId": "cn-hangzhou-h",
           "RegionId": REGION, "Status": "Running", "SpotStrategy": "SpotAsPriceGo",
           "CreationTime": "2026-03-02T12:04Z",
           "Tags": {"Tag": [{"TagKey": CLIENT_TOKEN_TAG, "TagValue": "job-1"},
                            {"TagKey": "gpu-arbiter:owner", "TagValue": "me"}]},
           "OperationLocks": {"LockReason": []}}
    return {**raw, **overrides}


def test_instances_from_describe_instances() -> None:
    inst = instances.instance_from_api(_raw(), REGION, client_token_tag=CLIENT_TOKEN_TAG)
    assert inst.offer.series() == f"aliyun/{REGION}/cn-hangzhou-h/{GN6I}/spot"
    assert (inst.state, inst.client_token, inst.tags["gpu-arbiter:owner"]) == (
        InstanceState.RUNNING, "job-1", "me")
    assert inst.launched_at == datetime(2026, 3, 2, 12, 4, tzinfo=UTC)
    on_demand = instances.instance_from_api(_raw(SpotStrategy="NoSpot", Status="Pending"),
                                            REGION, client_token_tag=CLIENT_TOKEN_TAG)
    assert on_demand.offer.market is Market.ON_DEMAND and on_demand.state is InstanceState.PENDING
    stopped = instances.instance_from_api(_raw(Status="Stopped"), REGION,
                                          client_token_tag=CLIENT_TOKEN_TAG)
    assert stopped.state is InstanceState.TERMINATED and stopped.terminated_reason == "stopped"
    with pytest.raises(ValueError, match="Status 'Exploded'"):
        instances.instance_from_api(_raw(Status="Exploded"), REGION,
                                    client_token_tag=CLIENT_TOKEN_TAG)
    assert instances.is_recycling(_raw(OperationLocks={"LockReason": [
        {"LockReason": "Recycling"}]}))
    assert not instances.is_recycling(_raw())
    notice = instances.recycling_notice(AT, AT)
    assert (notice.action, (notice.action_at - AT).total_seconds()) == ("terminate", 300)
