"""A daemon that starts next to live replicas on one Redis warns when its agents could not
fail over to them (``GA_ADVERTISE_URL`` unset or only its own URL). Real Redis; the daemon is
constructed (not run) over it."""

from __future__ import annotations

import logging

import pytest

from scheduler.daemon import Daemon, DaemonSettings
from scheduler.replicas import ReplicaRegistry, failover_warning

SECRET_ENV = {"GA_API_TOKEN": "shared-token", "GA_AGENT_SECRET": "shared-agent-secret"}


def test_the_warning_needs_another_replica_and_a_list_without_it(redis_client):
    a = ReplicaRegistry(redis_client, "a", "http://h:8740", "t", b"s")
    a.join()
    alone = a.live()
    assert failover_warning(alone, "a", "http://h:8740", None) is None
    ReplicaRegistry(redis_client, "b", "http://h:8741", "t", b"s").join()
    both = a.live()
    unset = failover_warning(both, "a", "http://h:8740", None)
    assert "http://h:8741" in unset and "GA_ADVERTISE_URL is unset" in unset
    assert "fixed --port" in unset
    own = failover_warning(both, "a", "http://h:8740", "http://h:8740")
    assert "only this replica's URL" in own
    assert failover_warning(both, "a", "http://h:8740", "http://h:8740,http://h:8741") is None


def _daemon(tmp_path, name: str, redis_server, advertise: str | None) -> Daemon:
    return Daemon(DaemonSettings(home=tmp_path / name, providers=[], redis_url=redis_server.url,
                                 store_url=(tmp_path / "ckpt").as_uri(), advertise_url=advertise))


@pytest.mark.parametrize("advertise", [None, "own"])
def test_a_daemon_starting_next_to_a_live_replica_warns(tmp_path, redis_server, redis_client,
                                                          monkeypatch, caplog, advertise):
    for name, value in SECRET_ENV.items():
        monkeypatch.setenv(name, value)
    first = _daemon(tmp_path, "a", redis_server, None)
    try:
        with caplog.at_level(logging.WARNING, logger="scheduler.daemon"):
            second = _daemon(tmp_path, "b", redis_server, None)
            if advertise == "own":
                second.replicas.leave()
                second._lock.close()
                caplog.clear()
                second = Daemon(DaemonSettings(
                    home=tmp_path / "b", providers=[], redis_url=redis_server.url,
                    store_url=(tmp_path / "ckpt").as_uri(), advertise_url=second.api_url,
                    port=second.port))
        second.replicas.leave()
        second._lock.close()
    finally:
        first.replicas.leave()
        first._lock.close()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(first.api_url in w and "cannot fail over" in w for w in warnings), warnings
