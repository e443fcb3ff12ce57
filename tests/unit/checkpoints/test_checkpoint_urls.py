"""open_store: which URLs give which store, and the errors for bad ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.checkpoints import LocalObjectStore, S3ObjectStore, open_store


def test_local_forms(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert open_store(f"file://{tmp_path}/a").root == tmp_path / "a"
    assert open_store(f"file://localhost{tmp_path}/b").root == tmp_path / "b"
    assert open_store(str(tmp_path / "c")).root == tmp_path / "c"
    monkeypatch.chdir(tmp_path)
    store = open_store("rel/dir")
    assert isinstance(store, LocalObjectStore) and store.root == tmp_path / "rel" / "dir"


def test_s3_form() -> None:
    store = open_store("s3://my-bucket/team/ckpt/?endpoint_url=http://127.0.0.1:8333&region=eu-west-1")
    assert isinstance(store, S3ObjectStore)
    assert (store.bucket, store.prefix, store.endpoint_url, store.region_name) == (
        "my-bucket", "team/ckpt/", "http://127.0.0.1:8333", "eu-west-1")
    assert open_store("s3://my-bucket").prefix == ""


@pytest.mark.parametrize("url, problem", [
    ("", "empty"),
    ("gs://bucket/x", "scheme 'gs'"),
    ("file://host/x", "host"),
    ("file:relative", "absolute"),
    ("s3://ab/x", "bucket name 'ab'"),
    ("s3://Bad_Bucket/x", "bucket name"),
    ("s3://bucket/x?endpoint=http://h", "endpoint"),
    ("s3://bucket/x?region=a&region=b", "exactly once"),
    ("s3://bucket/../x", "'..'"),
    ("s3://bucket/x?endpoint_url=ftp://h", "http"),
])
def test_bad_urls_name_the_problem(url: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem.replace("(", r"\(")):
        open_store(url)


@pytest.mark.parametrize("url", [
    "s3://AKIAXXXX:topsecretvalue@bucket/x",
    "s3://bucket/x?endpoint_url=http://AKIAXXXX:topsecretvalue@127.0.0.1:8333",
])
def test_credentials_in_url_are_refused_without_echoing_them(url: str) -> None:
    with pytest.raises(ValueError, match="credentials") as info:
        open_store(url)
    assert "topsecretvalue" not in str(info.value)
