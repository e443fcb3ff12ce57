"""The ECS client through the REAL SDK against the fake endpoint: paging, throttling retried
with backoff, error codes mapped, missing credentials, an endpoint that is down, and secrets
kept out of errors and logs."""

from __future__ import annotations

import base64
import logging
import socket
from datetime import timedelta

import pytest

from providers.aliyun.client import AliyunClient
from providers.aliyun.errors import ERRORS
from providers.errors import (
    AuthError,
    CapacityError,
    NotFoundError,
    ProviderError,
    QuotaError,
    TransientError,
)
from providers.regional_api import error_class
from tests.contract.providers.aliyun.data import (
    GN6I,
    HISTORY_HOURS,
    REGION,
    SPOT_CNY,
    T0,
    TEST_KEY_ID,
    TEST_KEY_SECRET,
)
from tests.contract.providers.aliyun.fake_ecs import FakeEcs


def _client(fake: FakeEcs, **kwargs) -> AliyunClient:
    kwargs.setdefault("retry_base_wait_s", 0.01)
    kwargs.setdefault("retry_max_wait_s", 0.05)
    return AliyunClient([REGION], endpoint_url=fake.url, **kwargs)


def test_paging_of_instance_types_spot_history_and_instances(fake_ecs_factory, aliyun_env) -> None:
    fake = fake_ecs_factory(page_size=2)
    client = _client(fake)
    types = list(client.iter_instance_types(REGION))
    assert [t["InstanceTypeId"] for t in types][:1] == ["ecs.gn6i-c4g1.xlarge"]
    assert len(types) == 4 and fake.counts["DescribeInstanceTypes"] == 2  # GPU types only
    assert fake.calls("DescribeInstanceTypes")[0]["MinimumGPUAmount"] == "1"

    start = T0 - timedelta(hours=HISTORY_HOURS)
    records = list(client.iter_spot_prices(REGION, GN6I, start))
    zones = {z for (z, t) in SPOT_CNY if t == GN6I and z.startswith(REGION)}
    assert len(records) == HISTORY_HOURS * len(zones)
    assert {currency for _, currency in records} == {"CNY"}
    offsets = [int(c["Offset"]) for c in fake.calls("DescribeSpotPriceHistory")]
    assert offsets == list(range(0, len(records) + 1, 2))[:len(offsets)]
    assert len(offsets) == len(records) // 2
    sent = fake.calls("DescribeSpotPriceHistory")[0]
    assert (sent["NetworkType"], sent["IoOptimized"], sent["OSType"], sent["StartTime"]) == (
        "vpc", "optimized", "linux", start.strftime("%Y-%m-%dT%H:%M:%SZ"))

    user_data = base64.b64encode(b"#!/bin/sh\n").decode()
    for n in range(5):
        client.run_instance(REGION, {"InstanceType": GN6I, "ZoneId": "cn-hangzhou-h",
                                     "ImageId": "img", "VSwitchId": "vsw-1",
                                     "SecurityGroupId": "sg-1", "ClientToken": f"tok-{n}",
                                     "SpotStrategy": "SpotAsPriceGo", "UserData": user_data,
                                     "Tag.1.Key": "owner", "Tag.1.Value": "me" if n else "you"})
    assert len(list(client.iter_instances(REGION))) == 5
    assert len(list(client.iter_instances(REGION, {"owner": "me"}))) == 4
    client.close()


@pytest.mark.parametrize("code, status", [("Throttling", 400), ("Throttling.User", 400),
                                          ("ServiceUnavailable", 503), ("InternalError", 500)])
def test_throttling_is_retried_with_backoff(fake_ecs: FakeEcs, aliyun_env, code, status) -> None:
    waits: list[float] = []
    client = _client(fake_ecs, max_attempts=4, sleep=waits.append)
    fake_ecs.fail("DescribeRegions", code, status=status, times=3)
    assert [r["RegionId"] for r in client.describe_regions(REGION)][:1] == [REGION]
    assert fake_ecs.counts["DescribeRegions"] == 4 and len(waits) == 3
    assert all(0 <= w <= 0.05 for w in waits)


def test_throttling_that_lasts_ends_in_a_transient_error(fake_ecs: FakeEcs, aliyun_env) -> None:
    waits: list[float] = []
    client = _client(fake_ecs, max_attempts=3, sleep=waits.append, retry_base_wait_s=1,
                     retry_max_wait_s=8)
    fake_ecs.fail("DescribeRegions", "Throttling", message="Request was denied due to request "
                  "throttling.", times=10)
    with pytest.raises(TransientError, match="Throttling") as caught:
        client.describe_regions(REGION)
    assert caught.value.code == "Throttling" and caught.value.provider == "aliyun"
    assert fake_ecs.counts["DescribeRegions"] == 3
    assert len(waits) == 2 and all(0 <= w <= 8 for w in waits)  # exponential, jittered


@pytest.mark.parametrize("code, status, cls", [
    ("OperationDenied.NoStock", 403, CapacityError),
    ("InvalidResourceType.NotSupported", 403, CapacityError),
    ("Zone.NotOnSale", 403, CapacityError),
    ("QuotaExceed.ElasticQuota", 403, QuotaError),
    ("Account.Arrearage", 403, QuotaError),
    ("Forbidden.RAM", 403, AuthError),
    ("InvalidAccessKeyId.NotFound", 404, AuthError),
    ("InvalidInstanceId.NotFound", 404, NotFoundError),
    ("PriceNotFound", 400, ProviderError),
])
def test_error_codes_map_to_the_error_tree(fake_ecs: FakeEcs, aliyun_env, code, status,
                                           cls) -> None:
    client = _client(fake_ecs)
    fake_ecs.fail("DescribeRegions", code, status=status, message="documented message")
    with pytest.raises(ProviderError) as caught:
        client.describe_regions(REGION)
    assert type(caught.value) is cls and caught.value.code == code
    assert f"aliyun DescribeRegions in {REGION}: {code}: documented message" in str(caught.value)
    assert fake_ecs.counts["DescribeRegions"] == 1  # only transient errors are retried


def test_code_table() -> None:
    assert error_class(ERRORS, "Throttling.Api") is TransientError
    assert error_class(ERRORS, "SomethingNew", 502) is TransientError
    assert error_class(ERRORS, "Forbbiden") is AuthError  # the docs' own spelling
    assert error_class(ERRORS, "QuotaExceed.PostPaidInstance") is QuotaError
    assert error_class(ERRORS, "InvalidParameter") is ProviderError


def test_no_credentials_is_an_auth_error_without_a_request(fake_ecs: FakeEcs) -> None:
    client = _client(fake_ecs, environ={})
    assert client.credentials_source() is None
    with pytest.raises(AuthError, match="ALIBABA_CLOUD_ACCESS_KEY_ID"):
        client.describe_regions(REGION)
    assert fake_ecs.requests == []
    sts = _client(fake_ecs, environ={"ALIBABA_CLOUD_ACCESS_KEY_ID": "a",
                                     "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "b",
                                     "ALIBABA_CLOUD_SECURITY_TOKEN": "c"})
    assert sts.credentials_source() == "env ALIBABA_CLOUD_ACCESS_KEY_ID + STS token"
    assert _client(fake_ecs, environ={}, ecs_ram_role="ga-daemon").credentials_source() == (
        "ecs ram role ga-daemon")


def test_endpoint_down_is_transient_after_the_retries(aliyun_env) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed when the block ends: connections are refused
    waits: list[float] = []
    client = AliyunClient([REGION], endpoint_url=f"http://127.0.0.1:{port}", max_attempts=2,
                          sleep=waits.append)
    with pytest.raises(TransientError, match="cannot reach the endpoint") as caught:
        client.describe_regions(REGION)
    assert caught.value.code == "SDK.HttpError" and len(waits) == 1


def test_secrets_stay_out_of_errors_and_logs(fake_ecs: FakeEcs, aliyun_env,
                                             caplog: pytest.LogCaptureFixture) -> None:
    agent_secret = "agent-token-that-must-not-leak"
    user_data = base64.b64encode(f"#!/bin/sh\nexport T={agent_secret}\n".encode()).decode()
    params = {"InstanceType": GN6I, "ZoneId": "cn-hangzhou-i", "ImageId": "img",
              "VSwitchId": "vsw-1", "SecurityGroupId": "sg-1", "ClientToken": "tok",
              "SpotStrategy": "SpotAsPriceGo", "UserData": user_data}
    wrong = AliyunClient([REGION], endpoint_url=fake_ecs.url, environ={
        "ALIBABA_CLOUD_ACCESS_KEY_ID": TEST_KEY_ID, "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "wrong"})
    with caplog.at_level(logging.DEBUG):
        with pytest.raises(CapacityError) as no_stock:  # sold out in zone i
            _client(fake_ecs).run_instance(REGION, params)
        with pytest.raises(AuthError) as bad_signature:
            wrong.run_instance(REGION, params)
    assert fake_ecs.rejected == ["SignatureDoesNotMatch"]
    text = caplog.text + str(no_stock.value) + str(bad_signature.value)
    for secret in (agent_secret, user_data, user_data[:40], TEST_KEY_SECRET, TEST_KEY_ID):
        assert secret not in text
