"""Pure launch translation: RunInstances parameters for spot (market price or a limit) and
on-demand, ECS's tag rules, and the user data that starts the agent with the Alibaba flavor."""

from __future__ import annotations

import base64
from datetime import UTC, datetime

import pytest

from core.models import Market, Offer
from providers.aliyun.launch import (
    CLIENT_TOKEN_TAG,
    METADATA_URL,
    render_user_data,
    run_instances_params,
    tag_params,
)

AT = datetime(2026, 3, 2, 12, tzinfo=UTC)


def _offer(market: Market) -> Offer:
    return Offer(provider="aliyun", region="cn-hangzhou", zone="cn-hangzhou-h",
                 instance_type="ecs.gn6i-c4g1.xlarge", market=market, gpu_model="T4",
                 gpu_count=1, vram_gib=16, vcpus=4, memory_gib=15, price_usd_per_hour=0.24,
                 on_demand_price_usd_per_hour=1.6, observed_at=AT)


def _params(market: Market, **kwargs) -> dict:
    return run_instances_params(
        offer=_offer(market), client_token="job-1-1", tags={"gpu-arbiter:owner": "me"},
        user_data="#!/bin/bash\necho hi\n", image_id="ubuntu_22_04_x64_20G_alibase_20240130.vhd",
        vswitch_id="vsw-h", security_group_id="sg-1", **kwargs)


def test_spot_at_market_price() -> None:
    params = _params(Market.SPOT, spot_duration_h=0, internet_max_bandwidth_out_mbps=10)
    assert params["SpotStrategy"] == "SpotAsPriceGo" and "SpotPriceLimit" not in params
    assert (params["SpotDuration"], params["SpotInterruptionBehavior"]) == (0, "Terminate")
    assert (params["InstanceChargeType"], params["ClientToken"], params["Amount"]) == (
        "PostPaid", "job-1-1", 1)
    assert (params["ZoneId"], params["VSwitchId"], params["SecurityGroupId"]) == (
        "cn-hangzhou-h", "vsw-h", "sg-1")
    assert base64.b64decode(params["UserData"]).decode() == "#!/bin/bash\necho hi\n"
    tags = {params[f"Tag.{i}.Key"]: params[f"Tag.{i}.Value"] for i in (1, 2)}
    assert tags == {"gpu-arbiter:owner": "me", CLIENT_TOKEN_TAG: "job-1-1"}
    assert params["InternetMaxBandwidthOut"] == 10


def test_spot_with_a_price_limit_and_on_demand() -> None:
    limited = _params(Market.SPOT, spot_strategy="SpotWithPriceLimit", spot_price_limit=11.58)
    assert (limited["SpotStrategy"], limited["SpotPriceLimit"]) == ("SpotWithPriceLimit", 11.58)
    with pytest.raises(ValueError, match="SpotPriceLimit"):
        _params(Market.SPOT, spot_strategy="SpotWithPriceLimit")
    on_demand = _params(Market.ON_DEMAND)
    assert on_demand["SpotStrategy"] == "NoSpot" and "SpotDuration" not in on_demand


@pytest.mark.parametrize("tags, message", [
    ({"aliyun:x": "v"}, "tag key"), ({"acs:x": "v"}, "tag key"), ({"": "v"}, "tag key"),
    ({"k" * 129: "v"}, "tag key"), ({"k": "v" * 129}, "longer than"),
    ({"url": "x", "https://x": "v"}, "tag key"), ({f"k{i}": "v" for i in range(21)}, "21 tags"),
])
def test_tag_rules(tags: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        tag_params(tags)


def test_client_token_and_user_data_limits() -> None:
    with pytest.raises(ValueError, match="client token"):
        run_instances_params(offer=_offer(Market.SPOT), client_token="x" * 65, tags={},
                             user_data="", image_id="i", vswitch_id="v", security_group_id="s")
    with pytest.raises(ValueError, match="32768"):
        run_instances_params(offer=_offer(Market.SPOT), client_token="t", tags={},
                             user_data="x" * 30000, image_id="i", vswitch_id="v",
                             security_group_id="s")


def test_user_data_sets_the_aliyun_metadata_flavor() -> None:
    script = render_user_data({"GA_API_URL": "http://10.0.0.5:8740", "GA_AGENT_TOKEN": "s3cr3t",
                               "GA_INSTANCE_ID": "ignored"}, pip_spec="gpu-arbiter==0.1",
                              venv=None)
    assert script.startswith("#!/bin/bash") and "s3cr3t" not in script  # base64 inside
    encoded = script.split("<<'GA_AGENT_ENV'\n")[1].split("\nGA_AGENT_ENV")[0]
    env = base64.b64decode(encoded.replace("\n", "")).decode()
    assert "GA_METADATA_FLAVOR=aliyun" in env and f"GA_METADATA_URL={METADATA_URL}" in env
    assert "GA_AGENT_TOKEN=s3cr3t" in env and "ignored" not in env
    assert f"{METADATA_URL}/latest/meta-data/instance-id" not in script  # via $METADATA
    assert '"$METADATA/latest/meta-data/instance-id"' in script
    with pytest.raises(ValueError, match="identifier"):
        render_user_data({"BAD NAME": "x"}, pip_spec="p", venv=None)
    with pytest.raises(ValueError, match="supervisor"):
        render_user_data({}, pip_spec="p", venv=None, supervisor="cron")
