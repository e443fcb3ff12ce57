"""Offers from moto's EC2 server: moto ships AWS's real instance-type and offering data, so the
GPU hardware and zones are checked; its spot prices are invented, so no price is. List prices
come from the local Price List fake (moto has no Price List API)."""

from __future__ import annotations

from core.models import Market
from tests.contract.providers.aws.data import price_list
from tests.contract.providers.aws.fake_aws import FakeAws


def test_gpu_offers_from_moto_instance_data(make_provider, ec2) -> None:
    pricing = FakeAws(price_list=price_list(["us-east-1", "us-west-2"]))
    try:
        provider = make_provider(instance_types=["g5.xlarge", "g4dn.xlarge", "m5.large"],
                                 pricing_endpoint_url=pricing.url)
        offers = provider.list_offers()
    finally:
        pricing.stop()
    assert {o.instance_type for o in offers} == {"g5.xlarge"}  # m5: no GPU; g4dn: no price
    a10g = next(o for o in offers if o.instance_type == "g5.xlarge")
    assert (a10g.gpu_model, a10g.gpu_count, a10g.vcpus, a10g.memory_gib) == ("A10G", 1, 4, 16.0)
    assert a10g.vram_gib == 22888 / 1024  # as AWS reports it, not the marketed 24 GB
    for region in ("us-east-1", "us-west-2"):
        answer = ec2(region).describe_instance_type_offerings(
            LocationType="availability-zone",
            Filters=[{"Name": "instance-type", "Values": ["g5.xlarge"]}])
        zones = {o["Location"] for o in answer["InstanceTypeOfferings"]}
        on_demand = {o.zone for o in offers if o.region == region and o.market is Market.ON_DEMAND}
        assert on_demand == zones and zones
    assert {o.market for o in offers} <= {Market.SPOT, Market.ON_DEMAND}
    spot = [o for o in offers if o.market is Market.SPOT]
    assert all(o.on_demand_price_usd_per_hour == 1.006 and 0 < o.interruption_risk <= 0.25
               for o in spot)
