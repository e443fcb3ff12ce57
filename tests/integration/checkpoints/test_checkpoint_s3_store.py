"""What only the S3 store does: create its bucket, sign every request, keep credentials out
of errors, fail fast (with a store error, not a hang) when the server is unreachable."""

from __future__ import annotations

import time

import boto3
import botocore
import pytest
from botocore.config import Config

from scheduler.checkpoints import CheckpointStoreError, S3ObjectStore, open_store


def test_bucket_is_created_on_first_write(s3_server, s3_store_url: str) -> None:
    store = open_store(s3_store_url)
    assert isinstance(store, S3ObjectStore) and store.prefix == "ckpt/"
    assert store.list_keys("") == []  # reading a bucket that does not exist yet is empty
    store.put_bytes("a", b"1")
    assert store.get_bytes("a") == b"1"
    # Explicit credentials: boto3's default session caches whatever an earlier test resolved.
    raw = boto3.session.Session(aws_access_key_id=s3_server.access_key,
                                aws_secret_access_key=s3_server.secret_key).client(
        "s3", endpoint_url=s3_server.endpoint_url, region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}))
    listed = raw.list_objects_v2(Bucket=store.bucket)["Contents"]
    assert [o["Key"] for o in listed] == ["ckpt/a"]  # the prefix is applied


def test_anonymous_writes_are_refused(s3_server, s3_store_url: str) -> None:
    store = open_store(s3_store_url)
    store.put_bytes("exists", b"1")
    anonymous = boto3.client("s3", endpoint_url=s3_server.endpoint_url, region_name="us-east-1",
                             config=Config(signature_version=botocore.UNSIGNED,
                                           s3={"addressing_style": "path"}))
    with pytest.raises(botocore.exceptions.ClientError) as info:
        anonymous.put_object(Bucket=store.bucket, Key="ckpt/evil", Body=b"x")
    assert info.value.response["Error"]["Code"] == "AccessDenied"


def test_wrong_secret_is_a_store_error_without_the_secret(
    s3_server, s3_store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    wrong_secret = "WRONGsecretWRONGsecretWRONGsecret0000"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", wrong_secret)
    store = open_store(s3_store_url)
    with pytest.raises(CheckpointStoreError) as info:
        store.put_bytes("a", b"1")
    message = str(info.value)
    assert wrong_secret not in message and s3_server.secret_key not in message
    assert store.bucket in message
    assert wrong_secret not in repr(store)


def test_unreachable_server_fails_fast(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "example-secret")
    store = open_store("s3://nobody-home/ckpt?endpoint_url=http://127.0.0.1:9&region=us-east-1")
    started = time.monotonic()
    with pytest.raises(CheckpointStoreError) as info:
        store.get_bytes("a")
    assert "example-secret" not in str(info.value)
    assert time.monotonic() - started < 20
