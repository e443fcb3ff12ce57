"""The real ``describe-spot-price-history`` dumps (p2/p3, 9 regions, 2019-12 → 2020-03) fed
through the adapter by a local EC2 endpoint (real HTTP, botocore parsing, NextToken pages of
100), with hand-written Price List documents and the real Spot Advisor file."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest

from core.models import Market
from providers.aws.translate import RISK_BY_BUCKET
from providers.errors import AuthError
from providers.regional_api import aware_utc
from tests.contract.providers.aws.data import (
    ADVISOR_FILE,
    INSTANCE_TYPES,
    ON_DEMAND_USD,
    dump_regions,
    load_spot_dumps,
    needs_advisor,
    needs_dumps,
    offerings_from_records,
    price_list,
)

pytestmark = [needs_dumps, needs_advisor]

NOW = datetime(2020, 3, 23, 18, 0, tzinfo=UTC)  # after the last record of the dumps
PAGE = 100
LOOKBACK_H = 2160.0  # 90 days, what AWS keeps


@pytest.fixture(scope="module")
def dumps() -> dict[str, list[dict]]:
    return {region: load_spot_dumps(region) for region in dump_regions()}


def _extra_zone(region: str) -> str:
    return f"{region}z"  # offers the types but has no spot price: on-demand offers only


@pytest.fixture
def fake(fake_aws_factory, dumps):
    return fake_aws_factory(
        instance_types=INSTANCE_TYPES,
        offerings={r: offerings_from_records(recs, _extra_zone(r)) for r, recs in dumps.items()},
        spot_records=dumps, price_list=price_list(list(dumps)), page_size=PAGE, now=NOW)


def _expected_history(records: list[dict], start: datetime) -> set[tuple]:
    """What AWS answers for [start, now]: every record from ``start`` on, plus per zone and
    type the newest record before ``start`` (the price in effect at ``start``)."""
    out, before = set(), {}
    for r in records:
        at = aware_utc(r["Timestamp"])
        key = (r["AvailabilityZone"], r["InstanceType"], at, float(r["SpotPrice"]))
        if at >= start:
            out.add(key)
        elif key[:2] not in before or at > before[key[:2]][2]:
            before[key[:2]] = key
    return out | set(before.values())


def _latest(records: list[dict]) -> dict[tuple[str, str], float]:
    newest: dict[tuple[str, str], tuple[datetime, float]] = {}
    for r in records:
        at, key = aware_utc(r["Timestamp"]), (r["AvailabilityZone"], r["InstanceType"])
        if key not in newest or at > newest[key][0]:
            newest[key] = (at, float(r["SpotPrice"]))
    return {k: v[1] for k, v in newest.items()}


def test_poll_prices_returns_every_record_across_pages(make_provider, fake, dumps) -> None:
    regions = list(dumps)
    provider = make_provider(fake, regions, clock=lambda: NOW, history_lookback_h=LOOKBACK_H,
                             markets=["spot"])
    observations = provider.poll_prices(None)

    start = NOW - timedelta(hours=LOOKBACK_H)
    total = 0
    for region, records in dumps.items():
        got = {(o.series.split("/")[2], o.series.split("/")[3], o.observed_at,
                o.price_usd_per_hour)
               for o in observations if o.series.startswith(f"aws/{region}/")}
        expected = _expected_history(records, start)
        assert got == expected, region
        total += len(expected)
        # Every page was asked for: one request per 100 records (one InstanceTypes batch).
        assert fake.count("DescribeSpotPriceHistory", region) == max(1, math.ceil(len(expected) / PAGE))
    assert len(observations) == total > 16_000
    assert all(o.series.endswith("/spot") and o.observed_at.tzinfo is not None
               for o in observations)
    # The adapter asked for its GPU types only, Linux/UNIX, from the lookback start.
    params = fake.last_params[("us-east-1", "DescribeSpotPriceHistory")]
    assert params["ProductDescription.1"] == "Linux/UNIX"
    assert sorted(v for k, v in params.items() if k.startswith("InstanceType.")) == sorted(
        t["InstanceType"] for t in INSTANCE_TYPES if "GpuInfo" in t)
    assert aware_utc(params["StartTime"]) == start


def test_poll_since_asks_only_for_newer_changes(make_provider, fake, dumps) -> None:
    provider = make_provider(fake, ["us-west-2"], clock=lambda: NOW)
    first = provider.poll_prices(None)
    assert any(o.series.endswith("/on-demand") for o in first)  # list prices, once
    since = datetime(2020, 3, 20, tzinfo=UTC)
    later = provider.poll_prices(since)
    spot = {(o.series, o.observed_at, o.price_usd_per_hour) for o in later
            if o.series.endswith("/spot")}
    expected = _expected_history(dumps["us-west-2"], since)
    assert {(s.split("/")[2], s.split("/")[3], at, p) for s, at, p in spot} == expected
    # List prices are reported once per fetch: not again to a poll after that fetch.
    assert not any(o.series.endswith("/on-demand") for o in provider.poll_prices(NOW))


def test_offers_at_the_end_of_the_dumps(make_provider, fake, dumps) -> None:
    import json

    advisor = json.loads(ADVISOR_FILE.read_text())["spot_advisor"]
    provider = make_provider(fake, list(dumps), clock=lambda: NOW)
    offers = provider.list_offers()

    for region, records in dumps.items():
        latest = _latest(records)
        spot = {(o.zone, o.instance_type): o for o in offers
                if o.region == region and o.market is Market.SPOT}
        assert {k: o.price_usd_per_hour for k, o in spot.items()} == latest, region
        for (zone, itype), offer in spot.items():
            assert offer.on_demand_price_usd_per_hour == ON_DEMAND_USD[itype]
            bucket = advisor.get(region, {}).get("Linux", {}).get(itype, {}).get("r")
            want = RISK_BY_BUCKET[bucket] if bucket is not None else None  # unrated
            assert offer.interruption_risk == want, (region, itype)
            assert offer.observed_at == NOW
        on_demand = {(o.zone, o.instance_type) for o in offers
                     if o.region == region and o.market is Market.ON_DEMAND}
        # Every (zone, type) offering: the ones with spot prices and the extra zone.
        types = {t for _, t in latest}
        assert on_demand == set(latest) | {(_extra_zone(region), t) for t in types}
        assert not any(o.instance_type == "c5.xlarge" for o in offers)

    p3 = next(o for o in offers if o.instance_type == "p3.8xlarge")
    assert (p3.gpu_model, p3.gpu_count, p3.vram_gib, p3.vcpus, p3.memory_gib) == (
        "V100", 4, 16.0, 32, 244.0)
    us_east = {o.instance_type: o for o in offers
               if o.region == "us-east-1" and o.market is Market.SPOT}
    assert us_east["p3.2xlarge"].interruption_risk == 0.25  # r=4 in the 2024 advisor file
    # One request per region per kind of data; current spot prices fit on one page.
    for region in dumps:
        assert fake.count("DescribeSpotPriceHistory", region) == 1
        assert fake.count("DescribeInstanceTypes", region) == 1
        assert fake.count("DescribeInstanceTypeOfferings", region) >= 1


def test_second_poll_uses_the_caches(make_provider, fake) -> None:
    provider = make_provider(fake, ["eu-west-1"], clock=lambda: NOW)
    provider.list_offers()
    before = dict(fake.requests)
    provider.list_offers()
    after = dict(fake.requests)
    grown = {k[1]: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
    assert grown == {"DescribeSpotPriceHistory": 1}  # types, zones and list prices cached


def test_a_failing_region_keeps_its_last_offers_and_history_is_asked_again(
        make_provider, fake, dumps) -> None:
    clock = {"now": NOW}
    provider = make_provider(fake, ["us-east-1", "eu-west-1"], clock=lambda: clock["now"],
                             max_attempts=1)  # no backoff: fail at once
    good = provider.list_offers()
    fake.fail("DescribeSpotPriceHistory", "InternalError", 500, times=50,
              region="eu-west-1")
    again = provider.list_offers()
    assert {o.key for o in again} == {o.key for o in good}  # eu-west-1 from the last poll

    since = NOW - timedelta(days=2)
    prices = provider.poll_prices(since)
    assert prices and not any("/eu-west-1/" in o.series for o in prices)
    fake._failures.clear()
    clock["now"] = NOW + timedelta(minutes=1)
    provider.poll_prices(NOW)
    asked = fake.last_params[("eu-west-1", "DescribeSpotPriceHistory")]["StartTime"]
    assert aware_utc(asked) == since  # the missed window, not just the last minute
    asked = fake.last_params[("us-east-1", "DescribeSpotPriceHistory")]["StartTime"]
    assert aware_utc(asked) == NOW


def test_every_region_refusing_credentials_raises_auth_error(make_provider, fake) -> None:
    provider = make_provider(fake, ["us-east-1", "us-west-2"], clock=lambda: NOW)
    fake.fail("DescribeInstanceTypes", "AuthFailure", 401, times=2)
    with pytest.raises(AuthError, match="AuthFailure"):
        provider.list_offers()


def test_a_capacity_error_is_typed_and_leaves_the_offer_listed(make_provider, fake) -> None:
    """Hiding an offer after a capacity error is the controller's one capacity cache (in
    Redis); the adapter raises the typed error and keeps reporting what EC2 offers."""
    from botocore.stub import Stubber

    from providers.base import LaunchRequest
    from providers.errors import CapacityError

    provider = make_provider(fake, ["us-west-2"], clock=lambda: NOW,
                             launch={"ami": "ami-0123"})
    offers = provider.list_offers()
    chosen = next(o for o in offers if o.market is Market.SPOT)
    with Stubber(provider.client.ec2["us-west-2"]) as stub:
        stub.add_response("describe_instances", {"Reservations": []})
        stub.add_client_error("run_instances", "InsufficientInstanceCapacity",
                              "We currently do not have sufficient capacity", 500)
        with pytest.raises(CapacityError) as caught:
            provider.launch(LaunchRequest(offer=chosen, client_token="job-9-1"))
    assert caught.value.code == "InsufficientInstanceCapacity"
    again = provider.list_offers()
    assert {o.key for o in again} == {o.key for o in offers}
