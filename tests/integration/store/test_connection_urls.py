"""``connect()`` by URL: one server, a Redis Cluster (every listed address a startup node),
and the URL errors that name ``REDIS_URL``. The Sentinel form is in
test_sentinel_failover.py (its setup is killed there)."""

from __future__ import annotations

import pytest
import redis
from redis.cluster import RedisCluster

from scheduler.store import multi
from scheduler.store.connection import RedisUrlError, client_for_url, connect
from tests.fixtures.redis_server import free_port


@pytest.mark.parametrize("url, says", [
    ("redis+cluster://127.0.0.1:7000,127.0.0.1", "'127.0.0.1' is not host:port"),
    ("redis+cluster://127.0.0.1:7000/2", "a cluster has no database number"),
    ("redis+cluster://127.0.0.1:99999", "is not host:port"),
    ("redis+sentinel://127.0.0.1:26379", "/<service>[/<db>]"),
    ("redis+sentinel://127.0.0.1:26379/svc/x", "/<service>[/<db>]"),
    ("redis+sentinel://u:hunter2@127.0.0.1:26379/svc/x", "u:***@"),
    ("memcached://127.0.0.1:11211", "redis+cluster:// or redis+sentinel://"),
])
def test_a_malformed_url_is_refused_naming_redis_url(url, says):
    with pytest.raises(RedisUrlError) as caught:
        client_for_url(url)
    assert str(caught.value).startswith("REDIS_URL=") and says in str(caught.value)
    assert "hunter2" not in str(caught.value)


def test_sentinel_url_options_reach_the_data_nodes_and_the_sentinels():
    client = client_for_url("redis+sentinel://u:pw@127.0.0.1:1,127.0.0.1:2/svc/3"
                            "?sentinel_password=sp")
    pool = client.connection_pool
    assert pool.service_name == "svc"
    assert (pool.connection_kwargs["db"], pool.connection_kwargs["username"],
            pool.connection_kwargs["password"]) == (3, "u", "pw")
    manager = pool.sentinel_manager
    assert [s.connection_pool.connection_kwargs["port"] for s in manager.sentinels] == [1, 2]
    assert manager.sentinel_kwargs["password"] == "sp"


def test_connect_follows_redis_url(redis_server, monkeypatch):
    monkeypatch.setenv("REDIS_URL", redis_server.url)
    client = connect()
    assert client.ping()
    assert multi.is_cluster(client) == redis_server.url.startswith("redis+cluster://")
    client.set("ga:test:url", "1")
    assert client.get("ga:test:url") == "1"
    client.close()


@pytest.mark.slow
def test_a_cluster_url_reaches_every_master_from_any_listed_node(redis_cluster):
    dead = f"127.0.0.1:{free_port()}"
    url = redis_cluster.url.replace("redis+cluster://", f"redis+cluster://{dead},")
    client = connect(url)
    assert isinstance(client, RedisCluster)
    assert {n.port for n in client.get_primaries()} == {n.port for n in redis_cluster.masters()}
    for i in range(30):
        client.set(f"ga:test:spread:{i}", i)
    assert len({redis_cluster.master_of(f"ga:test:spread:{i}").port for i in range(30)}) == 3
    client.close()


@pytest.mark.slow
def test_a_cluster_url_with_no_live_node_fails_to_connect():
    with pytest.raises(redis.ConnectionError, match="^REDIS_URL="):
        connect(f"redis+cluster://127.0.0.1:{free_port()}")


@pytest.mark.slow
def test_a_rediss_cluster_url_speaks_tls_to_the_nodes(redis_cluster):
    # The test cluster speaks plain TCP: a TLS client fails its handshake, which shows the
    # nodes were dialled with TLS.
    url = redis_cluster.url.replace("redis+cluster://", "rediss+cluster://")
    with pytest.raises(redis.ConnectionError, match="SSL|ssl|TLS|tls"):
        connect(url + "?ssl_cert_reqs=none&socket_timeout=2")
