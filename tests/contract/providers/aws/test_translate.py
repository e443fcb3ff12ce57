"""Pure translation (providers/aws/translate.py): instance types, spot records, Price List
documents, Spot Advisor buckets, offers and EC2 instances."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from core.models import InstanceState, Market
from providers.aws import instances, translate
from providers.regional_api import latest_prices, list_price_observations
from tests.contract.providers.aws.data import (
    ADVISOR_FILE,
    INSTANCE_TYPES,
    ON_DEMAND_USD,
    needs_advisor,
    price_list,
    price_list_document,
)

T0 = datetime(2020, 3, 23, 12, tzinfo=UTC)


def test_gpu_types_keep_reported_vram_and_skip_cpu_types() -> None:
    types = translate.gpu_instance_types(iter(INSTANCE_TYPES))
    assert "c5.xlarge" not in types and len(types) == 7
    a10g = types["g5.xlarge"]
    assert (a10g.gpu_model, a10g.gpu_manufacturer, a10g.gpu_count) == ("A10G", "NVIDIA", 1)
    assert a10g.vram_gib == pytest.approx(22888 / 1024) and a10g.vram_gib < 24  # as reported
    assert (a10g.vcpus, a10g.memory_gib) == (4, 16.0)
    k80 = types["p2.16xlarge"]
    assert (k80.gpu_count, k80.vram_gib, k80.memory_gib) == (16, 12.0, 732.0)


def test_gpu_type_usage_classes_and_bad_entries() -> None:
    info = dict(INSTANCE_TYPES[0], SupportedUsageClasses=["on-demand"])
    assert translate.gpu_instance_type(info).usage_classes == frozenset({"on-demand"})
    broken = {k: v for k, v in INSTANCE_TYPES[3].items() if k != "VCpuInfo"}
    with pytest.raises(ValueError, match="VCpuInfo"):
        translate.gpu_instance_type(broken)
    assert list(translate.gpu_instance_types([broken, INSTANCE_TYPES[4]])) == ["p3.8xlarge"]


def _record(zone: str = "us-east-1a", itype: str = "p3.2xlarge", price: str = "0.918",
            at: str | datetime = "2020-03-23T10:00:00.000Z", **extra: str) -> dict:
    return {"AvailabilityZone": zone, "InstanceType": itype, "ProductDescription": "Linux/UNIX",
            "SpotPrice": price, "Timestamp": at, **extra}


def test_spot_records_parse_and_odd_ones_are_skipped() -> None:
    price = translate.spot_price(_record(), "us-east-1")
    assert price.price_usd_per_hour == 0.918 and price.at == T0 - timedelta(hours=2)
    for bad, field in ((_record(price="n/a"), "field"), (_record(zone="eu-west-1a"), "region"),
                       (_record(ProductDescription="Windows"), "ProductDescription"),
                       (_record(price="-1"), "price"), ({"SpotPrice": "1"}, "field")):
        with pytest.raises(ValueError, match=field):
            translate.spot_price(bad, "us-east-1")
    prices, skipped = translate.spot_prices([_record(), _record(price="x")], "us-east-1")
    assert len(prices) == 1 and skipped == 1


def test_latest_price_per_zone_and_observations() -> None:
    records = [_record(at="2020-03-23T09:00:00Z", price="1.0"),
               _record(at="2020-03-23T11:00:00Z", price="1.2"),
               _record(at=T0 - timedelta(hours=5), price="0.9", zone="us-east-1b"),
               _record(at="2020-03-23T11:00:00Z", price="1.2")]  # duplicate record
    prices, _ = translate.spot_prices(records, "us-east-1")
    latest = latest_prices(prices)
    assert {k: p.price_usd_per_hour for k, p in latest.items()} == {
        ("us-east-1a", "p3.2xlarge"): 1.2, ("us-east-1b", "p3.2xlarge"): 0.9}
    obs = translate.spot_observations(prices, "us-east-1")
    assert [o.price_usd_per_hour for o in obs] == [0.9, 1.0, 1.2]  # oldest first, no duplicate
    assert obs[0].series == "aws/us-east-1/us-east-1b/p3.2xlarge/spot"


def test_price_list_documents_in_the_documented_shape() -> None:
    doc = price_list_document("p3.2xlarge", "us-east-1", 3.06)
    assert translate.on_demand_price(doc) == ("p3.2xlarge", 3.06)
    assert translate.on_demand_price(json.loads(doc)) == ("p3.2xlarge", 3.06)  # dict works too
    # The Reserved term (cheaper) is never taken for the on-demand price.
    assert json.loads(doc)["terms"]["Reserved"]
    prices, skipped = translate.on_demand_prices(price_list(["us-east-1"]))
    assert prices == ON_DEMAND_USD and skipped == 0  # the 99 $ decoys are all refused
    only, _ = translate.on_demand_prices(price_list(["us-east-1"]), ["g5.xlarge"])
    assert only == {"g5.xlarge": 1.006}


@pytest.mark.parametrize("overrides", [
    {"operatingSystem": "Windows"}, {"tenancy": "Dedicated"}, {"preInstalledSw": "SQL Web"},
    {"capacitystatus": "AllocatedCapacityReservation"}, {"usagetype": "HostUsage:p3"},
])
def test_price_documents_for_other_products_are_ignored(overrides: dict) -> None:
    assert translate.on_demand_price(price_list_document("p3.2xlarge", "us-east-1", 1.0,
                                                         **overrides)) is None


def test_malformed_price_documents() -> None:
    with pytest.raises(ValueError, match="product.attributes"):
        translate.on_demand_price('{"terms": {}}')
    with pytest.raises(ValueError):
        translate.on_demand_price("not json")
    doc = json.loads(price_list_document("p3.2xlarge", "us-east-1", 0.0))
    assert translate.on_demand_price(doc) is None  # no positive hourly price
    prices, skipped = translate.on_demand_prices(["{}", price_list_document("p2.xlarge", "r", 0.9)])
    assert prices == {"p2.xlarge": 0.9} and skipped == 1


def test_risk_buckets() -> None:
    buckets = {"spot_advisor": {"r": {"Linux": {f"t{r}": {"r": r} for r in (0, 1, 2, 3, 4, 5)}}}}
    assert translate.advisor_risks(buckets) == {"r": {  # r=5 is no bucket: left out
        "t0": 0.025, "t1": 0.075, "t2": 0.125, "t3": 0.175, "t4": 0.25}}
    data = {"spot_data": {"us-east-1": {"Linux": {"p3.2xlarge": {"s": 70, "r": 4},
                                                  "odd.type": {"s": 1, "r": 9}}}}}
    assert translate.advisor_risks(data) == {"us-east-1": {"p3.2xlarge": 0.25}}  # README's key
    with pytest.raises(ValueError, match="spot_advisor"):
        translate.advisor_risks({"ranges": []})


@needs_advisor
def test_real_advisor_file() -> None:
    data = json.loads(ADVISOR_FILE.read_text())
    risks = translate.advisor_risks(data)
    assert len(risks) == 29 and len(risks["us-east-1"]) > 700
    assert risks["us-east-1"]["p3.2xlarge"] == 0.25       # r=4: >20 %
    assert risks["us-east-1"]["g4dn.xlarge"] == 0.075     # r=1: 5-10 %
    assert risks["us-east-1"]["g4dn.8xlarge"] == 0.025    # r=0: <5 %
    # The file's own ranges agree with the bucket labels the mapping is built on.
    assert [r["label"] for r in data["ranges"]] == ["<5%", "5-10%", "10-15%", "15-20%", ">20%"]
    windows = translate.advisor_risks(data, "Windows")
    assert windows["us-east-1"] != risks["us-east-1"]


def test_build_offers_per_zone_and_market() -> None:
    types = translate.gpu_instance_types(INSTANCE_TYPES)
    zones = {"p3.2xlarge": ("us-east-1a", "us-east-1b"), "g5.xlarge": ("us-east-1a",)}
    spot = {("us-east-1a", "p3.2xlarge"): translate.SpotPrice("us-east-1a", "p3.2xlarge", 0.9, T0),
            ("us-east-1c", "p3.2xlarge"): translate.SpotPrice("us-east-1c", "p3.2xlarge", 0.8, T0)}
    offers = translate.build_offers(
        "us-east-1", {k: types[k] for k in zones}, zones, {"p3.2xlarge": 3.06}, spot,
        {"p3.2xlarge": 0.25}, markets=[Market.SPOT, Market.ON_DEMAND],
        observed_at=T0)
    got = {(o.zone, o.instance_type, o.market.value): (o.price_usd_per_hour, o.interruption_risk)
           for o in offers}
    assert got == {
        ("us-east-1a", "p3.2xlarge", "on-demand"): (3.06, 0.0),
        ("us-east-1a", "p3.2xlarge", "spot"): (0.9, 0.25),
        ("us-east-1b", "p3.2xlarge", "on-demand"): (3.06, 0.0),
        ("us-east-1c", "p3.2xlarge", "on-demand"): (3.06, 0.0),  # a spot price proves the zone
        ("us-east-1c", "p3.2xlarge", "spot"): (0.8, 0.25),
    }  # g5.xlarge: no list price and no spot price → no offer
    spot_only = translate.build_offers("us-east-1", {"p3.2xlarge": types["p3.2xlarge"]}, zones, {},
                                       spot, {}, markets=[Market.SPOT], observed_at=T0)
    assert {(o.market, o.interruption_risk, o.on_demand_price_usd_per_hour)
            for o in spot_only} == {(Market.SPOT, None, None)}  # unrated: the service's prior
    obs = list_price_observations("aws", "us-east-1", zones, {"p3.2xlarge": 3.06}, T0)
    assert [o.series for o in obs] == ["aws/us-east-1/us-east-1a/p3.2xlarge/on-demand",
                                       "aws/us-east-1/us-east-1b/p3.2xlarge/on-demand"]


def _instance(state: str = "running", **extra) -> dict:
    return {"InstanceId": "i-0abc", "InstanceType": "p3.2xlarge", "ClientToken": "job-1-1",
            "State": {"Code": 16, "Name": state}, "LaunchTime": T0,
            "Placement": {"AvailabilityZone": "us-east-1b"},
            "Tags": [{"Key": "gpu-arbiter:job", "Value": "job-1"}], **extra}


def test_instances_from_the_api() -> None:
    inst = instances.instance_from_api(_instance(InstanceLifecycle="spot"), "us-east-1")
    assert inst.offer.series() == "aws/us-east-1/us-east-1b/p3.2xlarge/spot"
    assert (inst.state, inst.client_token, inst.job_id, inst.terminated_reason) == (
        InstanceState.RUNNING, "job-1-1", "job-1", None)
    assert instances.instance_from_api(_instance(), "us-east-1").offer.market is Market.ON_DEMAND
    preempted = instances.instance_from_api(_instance(
        "terminated", InstanceLifecycle="spot",
        StateReason={"Code": "Server.SpotInstanceTermination",
                     "Message": "Server.SpotInstanceTermination: Spot instance termination"}),
        "us-east-1")
    assert preempted.state is InstanceState.TERMINATED and preempted.terminated_reason == "preempted"
    by_user = instances.instance_from_api(_instance(
        "shutting-down", StateReason={"Code": "Client.UserInitiatedShutdown"}), "us-east-1")
    assert by_user.terminated_reason == "terminated on request"
    stopped = instances.instance_from_api(_instance("stopped"), "us-east-1")
    assert (stopped.state, stopped.terminated_reason) == (InstanceState.TERMINATED, "stopped")
    with pytest.raises(ValueError, match="rebooting"):
        instances.instance_from_api(_instance("rebooting"), "us-east-1")


def test_notice_from_a_marked_spot_request() -> None:
    request = {"InstanceId": "i-0abc", "State": "active",
               "Status": {"Code": "marked-for-termination", "UpdateTime": T0}}
    notice = instances.notice_from_spot_request(request, T0)
    assert (notice.action, notice.action_at) == ("terminate", T0 + timedelta(minutes=2))
    request["Status"]["Code"] = "fulfilled"
    assert instances.notice_from_spot_request(request, T0) is None
