"""The ``kind: aliyun`` config entry (scheduler/provider_setup.py's ``AliyunConfig``): what a
user writes, and every mistake named without echoing a secret."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from providers.aliyun import AliyunProvider
from providers.aliyun.settings import zone_region
from scheduler.provider_setup import AliyunConfig, ProviderConfigError, build_providers

EXAMPLE = """
providers:
  - kind: aliyun
    regions: [cn-hangzhou]
    site: china                        # prices in CNY
    exchange_rates_usd: {CNY: 0.1385}  # USD per 1 CNY
    instance_types: ["ecs.gn6i-*", "ecs.gn7*"]
    launch:
      image_id: ubuntu_22_04_x64_20G_alibase_20240130.vhd
      vswitches: {cn-hangzhou-h: vsw-bp1abc, cn-hangzhou-i: vsw-bp1def}
      security_groups: {cn-hangzhou: sg-bp1xyz}
"""


def _build(entry: dict, tmp_path: Path):
    return build_providers([entry], tmp_path, tmp_path)


def test_the_documented_example_builds(tmp_path: Path) -> None:
    (entry,) = yaml.safe_load(EXAMPLE)["providers"]
    (provider,) = _build(entry, tmp_path)
    try:
        assert isinstance(provider, AliyunProvider) and provider.name == "aliyun"
        assert provider.currencies.rate("CNY") == 0.1385 and provider.currencies.rate(None) == 0.1385
        assert provider.settings.launch.spot_strategy == "SpotAsPriceGo"
        assert provider.settings.spot_duration_h == 1
        assert provider.agent_start_timeout_s == 900  # the same pip-install boot as on EC2
    finally:
        provider.close()
    assert AliyunConfig.model_validate({"kind": "aliyun", "regions": ["ap-southeast-1"]}
                                       ).default_currency == "USD"  # international: USD


@pytest.mark.parametrize("change, message", [
    ({"site": "china", "exchange_rates_usd": {}}, "site china prices are in CNY"),
    ({"exchange_rates_usd": {"cny": 0.14}}, "not a currency code"),
    ({"exchange_rates_usd": {"CNY": 0}}, "must be > 0"),
    ({"regions": ["Hangzhou"]}, "not region ids"),
    ({"regions": ["cn-hangzhou", "cn-hangzhou"]}, "lists a region twice"),
    ({"instance_types": ["ecs gn6i"]}, "not instance-type patterns"),
    ({"endpoint_url": "ftp://x"}, "http"),
    ({"endpoint_url": "https://user:pw@ecs.aliyuncs.com"}, "credentials"),
    ({"history_lookback_h": 800}, "less than or equal to 720"),
    ({"spot_duration_h": 7}, "less than or equal to 6"),
    ({"markets": ["reserved"]}, "spot"),
    ({"regoins": ["cn-hangzhou"]}, "unknown field"),
    ({"unknown_interruption_risk": 0.25}, "unknown_interruption_risk is not a setting any more"),
    ({"launch": {"image_id": "img", "vswitches": {"cn-beijing-g": "vsw-1"},
                 "security_groups": {"cn-hangzhou": "sg-1"}}}, "not in the configured regions"),
    ({"launch": {"image_id": "img", "vswitches": {"cn-hangzhou-h": "vpc-1"},
                 "security_groups": {"cn-hangzhou": "sg-1"}}}, "not a vSwitch id"),
    ({"launch": {"image_id": {"cn-beijing": "img"}, "vswitches": {"cn-hangzhou-h": "vsw-1"},
                 "security_groups": {"cn-hangzhou": "sg-1"}}}, "no image for region"),
    ({"launch": {"image_id": "img", "vswitches": {"cn-hangzhou-h": "vsw-1"},
                 "security_groups": {"cn-beijing": "sg-1"}}}, "no security group for region"),
    ({"launch": {"image_id": "img", "vswitches": {"cn-hangzhou-h": "vsw-1"},
                 "security_groups": {"cn-hangzhou": "sg-1"}, "spot_strategy": "Cheap"}},
     "SpotAsPriceGo"),
])
def test_mistakes_are_named(tmp_path: Path, change: dict, message: str) -> None:
    entry = {"kind": "aliyun", "regions": ["cn-hangzhou"], "site": "china",
             "exchange_rates_usd": {"CNY": 0.1385}, **change}
    with pytest.raises(ProviderConfigError, match=r"providers\[0\] \(aliyun\)") as caught:
        _build(entry, tmp_path)
    assert message in str(caught.value)


def test_credentials_in_the_file_are_refused_unechoed(tmp_path: Path) -> None:
    entry = {"kind": "aliyun", "regions": ["cn-hangzhou"],
             "access_key_id": "LTAI5tShouldNotBeHere", "launch": {
                 "image_id": "img", "vswitches": {"cn-hangzhou-h": "vsw-1"},
                 "security_groups": {"cn-hangzhou": "sg-1"},
                 "access_key_secret": "very-secret-value"}}
    with pytest.raises(ProviderConfigError, match="credentials do not belong") as caught:
        _build(entry, tmp_path)
    text = str(caught.value)
    assert "access_key_id" in text and "launch.access_key_secret" in text
    assert "very-secret-value" not in text and "LTAI5tShouldNotBeHere" not in text


@pytest.mark.parametrize("zone, region", [("cn-hangzhou-i", "cn-hangzhou"),
                                          ("ap-southeast-1a", "ap-southeast-1"),
                                          ("cn-shanghai-finance-1z", "cn-shanghai-finance-1"),
                                          ("cn-hangzhou", None), ("us-east-1", None)])
def test_zone_region(zone: str, region: str | None) -> None:
    assert zone_region(zone) == region
