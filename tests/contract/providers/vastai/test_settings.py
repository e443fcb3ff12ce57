"""The ``kind: vastai`` entry: strict fields, bad values named, credentials refused without
their value, dispatch through scheduler.provider_setup."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from providers.vastai import VastProvider, VastSettings
from scheduler.provider_setup import ProviderConfigError, build_providers


@pytest.mark.parametrize(("entry", "named"), [
    ({"countries": ["us"]}, "country codes"),
    ({"gpu_models": ["RTX 4090"]}, "GPU model names"),
    ({"min_reliability": 1.5}, "min_reliability"),
    ({"max_offers": 0}, "max_offers"),
    ({"bid": {"margin_fraction": 2}}, "margin_fraction"),
    ({"bid": {"max_bid_usd_per_hour": 500}}, "max_bid_usd_per_hour"),
    ({"launch": {"image": "x", "disk_gib": 4}}, "disk_gib"),
    ({"launch": {"image": "x" * 1025}}, "image"),
    ({"launch": {"image": "x", "supervisor": "systemd"}}, "supervisor"),
    ({"server_url": "console.vast.ai"}, "server_url"),
    ({"regions": ["us"]}, "regions"),
])
def test_bad_fields_are_named(entry: dict, named: str) -> None:
    with pytest.raises(ValidationError, match=named):
        VastSettings(**entry)


def test_the_kind_dispatches_to_the_package(vast_env, tmp_path: Path) -> None:
    [provider] = build_providers([{"kind": "vastai", "gpu_models": ["RTX4090"],
                                   "launch": {"image": "pytorch/pytorch"}}], tmp_path, tmp_path)
    assert isinstance(provider, VastProvider) and provider.settings.gpu_models == ["RTX4090"]


@pytest.mark.parametrize("field", ["api_key", "apikey", "API_KEY"])
def test_a_key_in_the_config_is_refused_without_its_value(field: str, tmp_path: Path) -> None:
    with pytest.raises(ProviderConfigError) as refused:
        build_providers([{"kind": "vastai", field: "vast-secret-value"}], tmp_path, tmp_path)
    assert "vast-secret-value" not in str(refused.value)
    assert "VAST_API_KEY" in str(refused.value)
