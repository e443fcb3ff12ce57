"""The boto3 layer (providers/aws/client.py) against the local fake endpoint: error-code
mapping, adaptive retries on throttling, missing credentials, and ``check``."""

from __future__ import annotations

from pathlib import Path

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError

from providers.aws.client import map_error
from providers.errors import (
    AuthError,
    CapacityError,
    NotFoundError,
    ProviderError,
    QuotaError,
    TransientError,
)
from tests.contract.providers.aws.data import INSTANCE_TYPES, needs_advisor, price_list


def _client_error(code: str, status: int = 400) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": f"{code} says AWS"},
                        "ResponseMetadata": {"HTTPStatusCode": status}}, "RunInstances")


@pytest.mark.parametrize("code, status, error", [
    ("InsufficientInstanceCapacity", 500, CapacityError), ("SpotMaxPriceTooLow", 400, CapacityError),
    ("VcpuLimitExceeded", 400, QuotaError), ("AuthFailure", 401, AuthError),
    ("UnauthorizedOperation", 403, AuthError), ("InvalidInstanceID.NotFound", 400, NotFoundError),
    ("RequestLimitExceeded", 503, TransientError), ("Throttling", 400, TransientError),
    ("SomethingNew", 503, TransientError), ("InvalidParameterValue", 400, ProviderError),
])
def test_error_codes(code: str, status: int, error: type) -> None:
    mapped = map_error(_client_error(code, status), "run_instances", "us-east-1")
    assert type(mapped) is error and mapped.code == code and mapped.provider == "aws"
    assert str(mapped) == f"aws run_instances in us-east-1: {code}: {code} says AWS"


def test_sdk_errors() -> None:
    assert isinstance(map_error(NoCredentialsError(), "x", "r"), AuthError)
    down = map_error(EndpointConnectionError(endpoint_url="http://127.0.0.1:9"), "x", "r")
    assert isinstance(down, TransientError) and "cannot reach" in str(down)


def test_throttling_is_retried_adaptively(make_provider, fake_aws_factory) -> None:
    fake = fake_aws_factory(instance_types=INSTANCE_TYPES)
    provider = make_provider(fake, ["us-east-1"], max_attempts=2, markets=["spot"])
    fake.fail("DescribeInstanceTypes", "RequestLimitExceeded", 503, times=1)
    assert provider.list_offers() == []  # no offerings, no prices: but it answered
    assert fake.count("DescribeInstanceTypes") == 2
    assert provider.requests["ec2.DescribeInstanceTypes"] == 2  # the adapter counts retries
    fake.fail("DescribeInstanceTypes", "RequestLimitExceeded", 503, times=2)
    provider._types.invalidate("us-east-1")
    with pytest.raises(TransientError, match="RequestLimitExceeded"):
        provider.list_offers()  # two attempts, both throttled


def test_exhausted_retries_and_a_dead_endpoint_are_transient(make_provider, fake_aws_factory) -> None:
    fake = fake_aws_factory(instance_types=INSTANCE_TYPES)
    provider = make_provider(fake, ["us-east-1"], max_attempts=1)
    fake.fail("DescribeInstanceTypes", "InternalError", 500)
    with pytest.raises(TransientError, match="InternalError"):
        provider.list_offers()
    fake.stop()  # a new provider: the old one's pooled keep-alive connection still answers
    dead = make_provider(fake, ["us-east-1"], max_attempts=1)
    with pytest.raises(TransientError, match="cannot reach"):
        dead.describe({"gpu-arbiter:owner": "x"})


def test_no_credentials_is_an_auth_error(make_provider, fake_aws_factory, monkeypatch) -> None:
    fake = fake_aws_factory(instance_types=INSTANCE_TYPES)
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    provider = make_provider(fake, ["us-east-1"], max_attempts=1)
    with pytest.raises(AuthError, match="no usable AWS credentials"):
        provider.list_offers()
    rows = provider.check()
    assert rows[0].check == "credentials" and not rows[0].ok
    assert not any(r.ok for r in rows if r.check.startswith(("describe", "pricing")))


@needs_advisor
def test_check_reports_every_region_and_the_advisor_age(make_provider, fake_aws_factory) -> None:
    fake = fake_aws_factory(instance_types=INSTANCE_TYPES, price_list=price_list(["us-east-1"]))
    provider = make_provider(fake, ["us-east-1", "eu-west-1"], max_attempts=1)
    fake.fail("DescribeInstances", "UnauthorizedOperation", 403, region="eu-west-1")
    rows = {(r.region, r.check): r for r in provider.check()}
    assert rows[("-", "credentials")].detail == "found via env"
    for region in ("us-east-1", "eu-west-1"):
        assert rows[(region, "describe_instance_types")].ok
        assert rows[(region, "describe_spot_price_history")].ok
    assert rows[("us-east-1", "describe_instances")].ok
    denied = rows[("eu-west-1", "describe_instances")]
    assert not denied.ok and "AuthError" in denied.detail and "UnauthorizedOperation" in denied.detail
    assert rows[("us-east-1", "pricing:GetProducts")].ok
    advisor = rows[("-", "spot advisor")]
    assert advisor.ok and " s old" in advisor.detail  # fetched just now into the cache
    assert Path(provider.advisor.cache_path).is_file()
    for row in rows.values():
        assert "fake-secret" not in row.detail


def test_fast_timestamps_match_botocore() -> None:
    from botocore.utils import parse_timestamp

    from providers.aws.client import fast_timestamp

    for value in ("2020-02-27T04:42:58.000Z", "2020-02-27T04:42:58Z",
                  "Thu, 27 Feb 2020 04:42:58 GMT", 1582778578):
        assert fast_timestamp(value) == parse_timestamp(value)
        assert fast_timestamp(value).tzinfo is not None
    # Without an offset botocore returns a naive time; ours is UTC, as EC2 means it.
    assert fast_timestamp("2020-02-27T04:42:58") == parse_timestamp("2020-02-27T04:42:58Z")
