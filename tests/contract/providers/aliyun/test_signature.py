"""The fake ECS endpoint's signature check, written from the docs, against the docs' own worked
example, against the REAL SDK's requests, and against forged, replayed and stale requests."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from providers.aliyun.client import AliyunClient
from providers.errors import AuthError
from tests.contract.providers.aliyun import signature
from tests.contract.providers.aliyun.data import REGION, TEST_KEY_ID, TEST_KEY_SECRET
from tests.contract.providers.aliyun.fake_ecs import FakeEcs

# The signature documentation's example: DescribeRegions signed with testid / testsecret.
DOC_PARAMS = {
    "TimeStamp": "2016-02-23T12:46:24Z", "Format": "XML", "AccessKeyId": "testid",
    "Action": "DescribeRegions", "SignatureMethod": "HMAC-SHA1",
    "SignatureNonce": "3ee8c1b8-83d3-44af-a94f-4e0ad82fd6cf", "Version": "2014-05-26",
    "SignatureVersion": "1.0",
}
DOC_STRING_TO_SIGN = (
    "GET&%2F&AccessKeyId%3Dtestid%26Action%3DDescribeRegions%26Format%3DXML"
    "%26SignatureMethod%3DHMAC-SHA1%26SignatureNonce%3D3ee8c1b8-83d3-44af-a94f-4e0ad82fd6cf"
    "%26SignatureVersion%3D1.0%26TimeStamp%3D2016-02-23T12%253A46%253A24Z"
    "%26Version%3D2014-05-26")
DOC_SIGNATURE = "CT9X0VtwR86fNWSnsc6v8YGOjuE="


def test_documented_example_signs_as_documented() -> None:
    assert signature.string_to_sign("GET", DOC_PARAMS) == DOC_STRING_TO_SIGN
    assert signature.signature("testsecret", "GET", DOC_PARAMS) == DOC_SIGNATURE
    assert signature.verify("testsecret", "GET", {**DOC_PARAMS, "Signature": DOC_SIGNATURE})
    assert not signature.verify("testsecret", "POST", {**DOC_PARAMS, "Signature": DOC_SIGNATURE})


def test_percent_encoding_rules() -> None:
    # RFC 3986: unreserved kept; space %20 (not +); '*' and '~' per the rules; UTF-8 bytes.
    assert signature.percent_encode("a-Z_0.~") == "a-Z_0.~"
    assert signature.percent_encode("a b*c+/") == "a%20b%2Ac%2B%2F"
    assert signature.percent_encode("杭州") == "%E6%9D%AD%E5%B7%9E"


def test_the_sdk_requests_pass_the_check(fake_ecs: FakeEcs, aliyun_env: None) -> None:
    client = AliyunClient([REGION], endpoint_url=fake_ecs.url)
    # Values with characters the encoding must get right: spaces, '*', '~', unicode, '+'.
    client.call(REGION, "DescribeInstances",
                {"Tag.1.Key": "gpu-arbiter:owner", "Tag.1.Value": "a b*c~d+é/杭州"})
    assert fake_ecs.rejected == []
    assert fake_ecs.counts["DescribeInstances"] == 1
    sent = fake_ecs.calls("DescribeInstances")[0]
    assert sent["Tag.1.Value"] == "a b*c~d+é/杭州" and sent["RegionId"] == REGION
    assert sent["SignatureMethod"] == "HMAC-SHA1" and sent["Version"] == "2014-05-26"
    client.close()


def test_wrong_secret_and_unknown_key_are_auth_errors(fake_ecs: FakeEcs) -> None:
    wrong = AliyunClient([REGION], endpoint_url=fake_ecs.url, environ={
        "ALIBABA_CLOUD_ACCESS_KEY_ID": TEST_KEY_ID,
        "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "not-the-secret"}, max_attempts=3)
    with pytest.raises(AuthError) as caught:
        wrong.describe_regions(REGION)
    # ECS echoes its string to sign in the message; the SDK turns a mismatch whose string to
    # sign equals its own into InvalidAccessKeySecret. Either way no parameters are repeated.
    assert caught.value.code in ("SignatureDoesNotMatch", "InvalidAccessKeySecret")
    text = str(caught.value)
    assert TEST_KEY_ID not in text and "AccessKeyId%3D" not in text and "string to sign" not in text
    assert fake_ecs.rejected == ["SignatureDoesNotMatch"]  # auth errors are not retried
    unknown = AliyunClient([REGION], endpoint_url=fake_ecs.url, environ={
        "ALIBABA_CLOUD_ACCESS_KEY_ID": "LTAInobody", "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "x"})
    with pytest.raises(AuthError, match="InvalidAccessKeyId.NotFound"):
        unknown.describe_regions(REGION)
    assert fake_ecs.counts["DescribeRegions"] == 0  # refused before any action ran


def _signed(**overrides: str) -> dict[str, str]:
    params = {"Action": "DescribeRegions", "Version": "2014-05-26", "Format": "JSON",
              "AccessKeyId": TEST_KEY_ID, "SignatureMethod": "HMAC-SHA1",
              "SignatureVersion": "1.0", "SignatureNonce": str(uuid.uuid4()),
              "Timestamp": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
              "RegionId": REGION, **overrides}
    params["Signature"] = signature.signature(TEST_KEY_SECRET, "GET", params)
    return params


def test_forged_replayed_and_stale_requests_are_refused(fake_ecs: FakeEcs) -> None:
    with httpx.Client(base_url=fake_ecs.url) as http:
        good = _signed()
        assert http.get("/", params=good).status_code == 200
        replay = http.get("/", params=good)  # same nonce again
        assert (replay.status_code, replay.json()["Code"]) == (400, "SignatureNonceUsed")
        forged = {**_signed(), "RegionId": "cn-beijing"}  # a parameter changed after signing
        answer = http.get("/", params=forged)
        assert (answer.status_code, answer.json()["Code"]) == (400, "SignatureDoesNotMatch")
        as_post = http.post("/", params=_signed())  # signed for GET, sent as POST
        assert as_post.json()["Code"] == "SignatureDoesNotMatch"
        old = (datetime.now(UTC) - timedelta(minutes=20)).strftime("%Y-%m-%dT%H:%M:%SZ")
        stale = http.get("/", params=_signed(Timestamp=old))
        assert stale.json()["Code"] == "InvalidTimeStamp.Expired"
        unsigned = {k: v for k, v in _signed().items() if k != "Signature"}
        assert http.get("/", params=unsigned).json()["Code"] == "IncompleteSignature"
    assert fake_ecs.counts["DescribeRegions"] == 1
