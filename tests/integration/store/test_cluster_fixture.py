"""The Redis Cluster and Sentinel test setups themselves: they form, spread keys over every
master, and fail over to the replica after a master is SIGKILLed."""

from __future__ import annotations

import pytest
import redis

from tests.fixtures.waiting import wait_until

pytestmark = pytest.mark.slow


def test_cluster_is_ok_with_keys_on_every_master(redis_cluster):
    client = redis_cluster.client()
    assert client.cluster_info()["cluster_state"] == "ok"
    masters = redis_cluster.masters()
    assert len(masters) == 3
    for i in range(60):
        client.set(f"key:{i}", i)
    held = {node.port: node.client().dbsize() for node in masters}
    assert all(count > 0 for count in held.values()), held
    assert sum(held.values()) == 60
    assert redis_cluster.url == "redis+cluster://" + ",".join(
        f"127.0.0.1:{n.port}" for n in redis_cluster.nodes)


def test_cluster_promotes_the_replica_of_a_killed_master(redis_cluster):
    client = redis_cluster.client()
    client.set("{job-7}:doc", "kept")
    before = {n.port for n in redis_cluster.masters()}
    dead = redis_cluster.kill_master_of("{job-7}:doc")
    assert not dead.alive()
    promoted = redis_cluster.wait_failover(timeout_s=60)
    assert promoted.port not in before
    assert promoted is redis_cluster.master_of("{job-7}:doc")
    # Replication is asynchronous, but this write was acknowledged long before the kill.
    assert wait_until(lambda: redis_cluster.client().get("{job-7}:doc"), 30,
                      "the key through a fresh cluster client",
                      ignoring=(redis.RedisError,)) == "kept"
    redis_cluster.restart_killed()
    assert len(redis_cluster.masters()) == 3
    assert "slave" in next(v for v in redis_cluster.view() if v.port == dead.port).flags


def test_sentinel_promotes_the_replica_of_a_killed_master(redis_sentinel):
    assert redis_sentinel.url.endswith(f"/{redis_sentinel.service}")
    redis_sentinel.client().set("doc", "kept")
    wait_until(lambda: redis_sentinel.data[1].client().get("doc") == "kept", 10,
               "the replica to hold the write")
    dead = redis_sentinel.kill_master()
    promoted = redis_sentinel.wait_failover(timeout_s=60)
    assert promoted is not dead
    assert promoted.client().info("replication")["role"] == "master"
    assert redis_sentinel.client().get("doc") == "kept"
    redis_sentinel.restart_killed()
    assert dead.client().info("replication")["role"] == "slave"
