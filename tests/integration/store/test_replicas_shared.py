"""What replicas on one Redis share: one owner id, one checkpoint store, the same secrets."""

from __future__ import annotations

import pytest

from scheduler.replicas import (
    ReplicaConfigError,
    ReplicaRegistry,
    shared_owner,
    shared_store_url,
)
from scheduler.store import keys


def test_the_first_replicas_owner_and_store_are_adopted_and_explicit_ones_must_match(
        redis_client, tmp_path):
    for home in ("a", "b"):
        (tmp_path / home).mkdir()
    first = shared_owner(redis_client, tmp_path / "a", None)
    assert first == (tmp_path / "a" / "owner-id").read_text()
    assert shared_owner(redis_client, tmp_path / "b", None) == first
    assert (tmp_path / "b" / "owner-id").read_text() != first  # its own id, unused now
    assert shared_owner(redis_client, tmp_path / "b", first) == first
    with pytest.raises(ReplicaConfigError, match="GA_OWNER='ga-other'"):
        shared_owner(redis_client, tmp_path / "b", "ga-other")

    url = shared_store_url(redis_client, None, "file:///a/checkpoints")
    assert shared_store_url(redis_client, None, "file:///b/checkpoints") == url
    assert shared_store_url(redis_client, url, "file:///b/checkpoints") == url
    with pytest.raises(ReplicaConfigError, match="GA_STORE_URL"):
        shared_store_url(redis_client, "s3://bucket/x", "file:///b/checkpoints")


def test_a_replica_with_other_secrets_is_refused_and_no_secret_reaches_redis(redis_client):
    a = ReplicaRegistry(redis_client, "a", "http://a", "token-1", b"agent-secret-1")
    a.join()
    ReplicaRegistry(redis_client, "b", "http://b", "token-1", b"agent-secret-1").join()
    with pytest.raises(ReplicaConfigError, match="GA_AGENT_SECRET differs") as refused:
        ReplicaRegistry(redis_client, "c", "http://c", "token-1", b"agent-secret-2").join()
    assert "agent-secret" not in str(refused.value).replace("GA_AGENT_SECRET", "")
    with pytest.raises(ReplicaConfigError, match="GA_API_TOKEN differs"):
        ReplicaRegistry(redis_client, "c", "http://c", "token-2", b"agent-secret-1").join()
    dump = " ".join(str(redis_client.get(k)) for k in redis_client.scan_iter(keys.replica("*")))
    assert "token-1" not in dump and "agent-secret-1" not in dump
    assert sorted(r["id"] for r in a.live()) == ["a", "b"]
    a.leave()  # a replica that left (or whose entry expired) no longer counts
    assert [r["id"] for r in a.live()] == ["b"]
