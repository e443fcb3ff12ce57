"""Launch translation (providers/aws/launch.py) and the launch flow against botocore's Stubber:
run_instances arguments, tags, user data, idempotency and error mapping."""

from __future__ import annotations

import logging
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest
from botocore.stub import ANY, Stubber

from core.models import TAG_JOB, TAG_OWNER, Market, Offer
from providers.aws import AwsProvider, AwsSettings
from providers.aws.launch import (
    render_user_data,
    run_instances_params,
    tag_list,
)
from providers.base import LaunchRequest
from providers.bootstrap import env_file_text
from providers.errors import AuthError, CapacityError, ProviderError, QuotaError

T0 = datetime(2026, 11, 30, 12, tzinfo=UTC)
SECRET = "agent-token-and-store-secret-0123456789"


def offer(market: Market = Market.SPOT, zone: str = "us-east-1b") -> Offer:
    return Offer(provider="aws", region="us-east-1", zone=zone, instance_type="g5.xlarge",
                 market=market, gpu_model="A10G", gpu_count=1, vram_gib=22.35, vcpus=4,
                 memory_gib=16, price_usd_per_hour=0.4, observed_at=T0)


def request(market: Market = Market.SPOT, token: str = "job-1-1") -> LaunchRequest:
    return LaunchRequest(offer=offer(market), client_token=token,
                         tags={TAG_OWNER: "ga-test", TAG_JOB: "job-1"},
                         agent_env={"GA_API_URL": "http://10.0.0.5:8740", "GA_AGENT_TOKEN": SECRET,
                                    "GA_JOB_SPEC": '{"name": "it\'s \\"quoted\\"\\n"}'})


def test_spot_and_on_demand_params() -> None:
    spot = run_instances_params(offer=offer(), client_token="job-1-1", tags={TAG_OWNER: "o"},
                                user_data="#!/bin/bash\n", ami="ami-0123",
                                security_group_ids=["sg-1"], key_name="k",
                                iam_instance_profile="arn:aws:iam::1:instance-profile/ga")
    assert spot["InstanceMarketOptions"] == {"MarketType": "spot", "SpotOptions": {
        "SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"}}
    assert (spot["ClientToken"], spot["MinCount"], spot["MaxCount"]) == ("job-1-1", 1, 1)
    assert spot["Placement"] == {"AvailabilityZone": "us-east-1b"} and "SubnetId" not in spot
    assert spot["MetadataOptions"]["HttpTokens"] == "required"
    assert spot["IamInstanceProfile"] == {"Arn": "arn:aws:iam::1:instance-profile/ga"}
    assert [s["ResourceType"] for s in spot["TagSpecifications"]] == ["instance", "volume"]
    assert {"Key": TAG_OWNER, "Value": "o"} in spot["TagSpecifications"][0]["Tags"]
    on_demand = run_instances_params(offer=offer(Market.ON_DEMAND), client_token="t", tags={},
                                     user_data="", ami="ami-0123", subnet_id="subnet-9",
                                     iam_instance_profile="ga-profile")
    assert "InstanceMarketOptions" not in on_demand and on_demand["SubnetId"] == "subnet-9"
    assert "Placement" not in on_demand and on_demand["IamInstanceProfile"] == {"Name": "ga-profile"}


def test_bad_tags_and_oversized_user_data() -> None:
    for tags, match in (({"aws:x": "1"}, "aws:"), ({"k" * 129: "1"}, "128"),
                        ({"k": "v" * 257}, "256"), ({"": "v"}, "1-128")):
        with pytest.raises(ValueError, match=match):
            tag_list(tags)
    with pytest.raises(ValueError, match="16384"):
        run_instances_params(offer=offer(), client_token="t", tags={}, user_data="x" * 16385,
                             ami="ami-1")


def test_env_file_round_trips_through_the_shell(tmp_path: Path) -> None:
    env = request().agent_env | {"EMPTY": "", "SPACES": "a b\tc", "DOLLAR": "$HOME `id`"}
    path = tmp_path / "agent.env"
    path.write_text(env_file_text(env))
    out = subprocess.run(["sh", "-c", f"set -a; . {path}; set +a; env -0"], env={},
                         capture_output=True, check=True).stdout.decode()
    seen = dict(item.split("=", 1) for item in out.split("\0") if "=" in item)
    assert {k: seen[k] for k in env} == env
    with pytest.raises(ValueError, match="identifier"):
        env_file_text({"BAD-NAME": "x"})


def test_user_data_is_a_valid_script_with_the_env_encoded() -> None:
    script = render_user_data(request().agent_env, pip_spec="gpu-arbiter==0.1.0",
                              venv="/opt/gpu-arbiter/venv")
    assert script.startswith("#!/bin/bash\n")
    assert SECRET not in script  # base64-encoded (not a secret-keeping measure: no plain grep hit)
    subprocess.run(["bash", "-n"], input=script.encode(), check=True)
    assert "PIP_SPEC=gpu-arbiter==0.1.0" in script and "KillMode=mixed" in script
    with pytest.raises(ValueError, match="supervisor"):
        render_user_data({}, pip_spec="x", venv=None, supervisor="runit")
    with pytest.raises(ValueError, match="base_dir"):
        render_user_data({}, pip_spec="x", venv=None, base_dir="/tmp/a b")


# ----- the launch flow, against botocore's Stubber ---------------------------------------------
@pytest.fixture
def provider(aws_env, tmp_path: Path):
    settings = AwsSettings(regions=["us-east-1"], max_attempts=1,
                           launch={"ami": "ami-0123", "subnets": {"us-east-1b": "subnet-b"},
                                   "security_group_ids": ["sg-1"]})
    p = AwsProvider(settings, tmp_path)
    yield p
    p.close()


def _api_instance(token: str = "job-1-1", state: str = "pending") -> dict:
    return {"InstanceId": "i-0123456789abcdef0", "InstanceType": "g5.xlarge", "ClientToken": token,
            "State": {"Code": 0, "Name": state}, "LaunchTime": T0, "InstanceLifecycle": "spot",
            "Placement": {"AvailabilityZone": "us-east-1b"},
            "Tags": [{"Key": TAG_OWNER, "Value": "ga-test"}]}


def _expect_lookup(stub: Stubber, token: str, instances: list[dict]) -> None:
    stub.add_response("describe_instances",
                      {"Reservations": [{"Instances": instances}] if instances else []},
                      {"Filters": [{"Name": "client-token", "Values": [token]}],
                       "MaxResults": 1000})


def test_launch_sends_the_client_token_and_returns_the_instance(provider: AwsProvider) -> None:
    ec2 = provider.client.ec2["us-east-1"]
    with Stubber(ec2) as stub:
        _expect_lookup(stub, "job-1-1", [])
        stub.add_response("run_instances", {"Instances": [_api_instance()]}, {
            "ImageId": "ami-0123", "InstanceType": "g5.xlarge", "MinCount": 1, "MaxCount": 1,
            "ClientToken": "job-1-1", "UserData": ANY, "TagSpecifications": ANY,
            "MetadataOptions": ANY, "InstanceInitiatedShutdownBehavior": "terminate",
            "SubnetId": "subnet-b", "SecurityGroupIds": ["sg-1"],
            "InstanceMarketOptions": {"MarketType": "spot", "SpotOptions": {
                "SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"}}})
        inst = provider.launch(request())
        stub.assert_no_pending_responses()
    assert (inst.id, inst.client_token, inst.offer.market) == (
        "i-0123456789abcdef0", "job-1-1", Market.SPOT)


def test_a_retried_launch_finds_the_first_instance(provider: AwsProvider) -> None:
    with Stubber(provider.client.ec2["us-east-1"]) as stub:
        _expect_lookup(stub, "job-1-1", [_api_instance(state="running")])
        assert provider.launch(request()).id == "i-0123456789abcdef0"  # no run_instances
        stub.assert_no_pending_responses()


def test_idempotent_parameter_mismatch_returns_the_token_s_instance(provider: AwsProvider) -> None:
    with Stubber(provider.client.ec2["us-east-1"]) as stub:
        _expect_lookup(stub, "job-1-1", [])  # not visible yet (eventual consistency)
        stub.add_client_error("run_instances", "IdempotentParameterMismatch", http_status_code=400)
        _expect_lookup(stub, "job-1-1", [_api_instance()])
        assert provider.launch(request()).client_token == "job-1-1"


@pytest.mark.parametrize("code, error", [
    ("InsufficientInstanceCapacity", CapacityError), ("MaxSpotInstanceCountExceeded", CapacityError),
    ("SpotMaxPriceTooLow", CapacityError), ("InsufficientFreeAddressesInSubnet", CapacityError),
    ("Unsupported", CapacityError), ("VcpuLimitExceeded", QuotaError),
    ("InstanceLimitExceeded", QuotaError), ("UnauthorizedOperation", AuthError),
    ("AuthFailure", AuthError), ("OptInRequired", AuthError),
    ("InvalidAMIID.NotFound", ProviderError),
])
def test_launch_errors_are_typed(provider: AwsProvider, code: str, error: type) -> None:
    with Stubber(provider.client.ec2["us-east-1"]) as stub:
        _expect_lookup(stub, "job-1-1", [])
        stub.add_client_error("run_instances", code, f"{code} (message from AWS)", 400)
        with pytest.raises(error, match=code) as info:
            provider.launch(request())
    assert type(info.value) is error and info.value.code == code and info.value.provider == "aws"


def test_launch_refusals_without_calls(aws_env, tmp_path: Path, provider: AwsProvider) -> None:
    bare = AwsProvider(AwsSettings(regions=["us-east-1"]), tmp_path / "bare")
    with pytest.raises(ProviderError, match="launch is not configured"):
        bare.launch(request())
    bare.close()
    elsewhere = request().model_copy(update={"offer": offer().model_copy(
        update={"region": "eu-west-1", "zone": "eu-west-1a"})})
    with pytest.raises(ProviderError, match="eu-west-1 is not configured"):
        provider.launch(elsewhere)


def test_terminate_is_quiet_for_missing_instances(provider: AwsProvider) -> None:
    with Stubber(provider.client.ec2["us-east-1"]) as stub:
        stub.add_client_error("terminate_instances", "InvalidInstanceID.NotFound", http_status_code=400)
        provider.terminate("i-0123456789abcdef0")
        stub.add_client_error("terminate_instances", "UnauthorizedOperation", http_status_code=403)
        with pytest.raises(AuthError):
            provider.terminate("i-0123456789abcdef0")


def test_user_data_never_reaches_the_logs(provider: AwsProvider, fake_aws_factory,
                                          caplog: pytest.LogCaptureFixture) -> None:
    """botocore logs request parameters at DEBUG; RunInstances' UserData must not be among
    them (the fake answers run_instances with an error: the request was still logged)."""
    fake = fake_aws_factory()
    settings = provider.settings.model_copy(update={"endpoint_url": fake.url})
    p = AwsProvider(settings, Path(provider.advisor.cache_path).parent / "logs")
    with caplog.at_level(logging.DEBUG), pytest.raises(ProviderError) as info:
        p.launch(request())
    p.close()
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "RunInstances" in text or "run_instances" in text.lower()
    import base64
    encoded = base64.b64encode(SECRET.encode()).decode()[:20]
    assert SECRET not in text and encoded not in text and "UserData" not in text
    assert SECRET not in str(info.value)


def test_describe_carries_the_spot_interruption_notice(provider: AwsProvider) -> None:
    """A running spot instance whose request EC2 marked for termination is described with a
    notice two minutes after the mark; one describe_spot_instance_requests per region."""
    marked = {"SpotInstanceRequestId": "sir-1", "InstanceId": "i-0123456789abcdef0",
              "State": "active", "Status": {"Code": "marked-for-termination", "UpdateTime": T0}}
    with Stubber(provider.client.ec2["us-east-1"]) as stub:
        stub.add_response("describe_instances", {"Reservations": [{"Instances": [
            _api_instance(state="running")]}]},
            {"Filters": [{"Name": f"tag:{TAG_OWNER}", "Values": ["ga-test"]}], "MaxResults": 1000})
        stub.add_response("describe_spot_instance_requests", {"SpotInstanceRequests": [marked]},
                          {"Filters": [{"Name": "instance-id", "Values": ["i-0123456789abcdef0"]}]})
        (inst,) = provider.describe({TAG_OWNER: "ga-test"})
        stub.assert_no_pending_responses()
    assert inst.notice is not None and inst.notice.action == "terminate"
    assert (inst.notice.action_at - T0).total_seconds() == 120
