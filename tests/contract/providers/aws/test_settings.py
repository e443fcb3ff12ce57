"""The ``kind: aws`` config entry (scheduler/provider_setup.py's ``AwsConfig``): the shared
region-cloud rules of providers/regional_settings.py as an AWS user meets them."""

from __future__ import annotations

from pathlib import Path

import pytest

from providers.aws import AwsProvider
from scheduler.provider_setup import ProviderConfigError, build_providers


def test_an_entry_builds_a_compute_that_states_its_agent_timeout(aws_env, tmp_path: Path) -> None:
    (provider,) = build_providers([{"kind": "aws", "regions": ["us-east-1"],
                                    "launch": {"ami": "ami-0abc"}}], tmp_path, tmp_path)
    try:
        assert isinstance(provider, AwsProvider) and provider.agent_start_timeout_s == 900
        assert provider.settings.launch.image_for("us-east-1") == "ami-0abc"
    finally:
        provider.close()


@pytest.mark.parametrize("change, message", [
    ({"regions": ["us-east"]}, "not region names (e.g. us-east-1)"),
    ({"regions": ["us-east-1", "us-east-1"]}, "lists a region twice"),
    ({"instance_types": ["g5 xlarge"]}, "not instance-type patterns"),
    ({"unknown_interruption_risk": 0.25}, "unknown_interruption_risk is not a setting any more"),
    ({"history_lookback_h": 3000}, "less than or equal to 2160"),
    ({"launch": {"ami": "img-1"}}, "not AMI ids"),
    ({"launch": {"ami": {"us-west-2": "ami-1"}}}, "launch.ami: no image for region(s)"),
    ({"launch": {"ami": "ami-1", "subnets": {"us-west-2a": "subnet-1"}}},
     "launch.subnets: zone(s) ['us-west-2a'] are not in the configured regions"),
    ({"launch": {"ami": "ami-1", "agent_pip_spec": "gpu-arbiter\nrm -rf /"}}, "one non-empty line"),
])
def test_mistakes_are_named(tmp_path: Path, change: dict, message: str) -> None:
    entry = {"kind": "aws", "regions": ["us-east-1"], **change}
    with pytest.raises(ProviderConfigError, match=r"providers\[0\] \(aws\)") as caught:
        build_providers([entry], tmp_path, tmp_path)
    assert message in str(caught.value)
