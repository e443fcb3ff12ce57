"""A CLI command that reads Redis itself (``history retention``, as ``history import`` and
``plan`` without a daemon do) starts the embedded Redis of GA_HOME to read it: it must stop it
again on exit, unless a daemon (holding GA_HOME/daemon.lock) uses it by then. Real
``schedctl`` processes, real redis-server."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys

from scheduler.store.connection import EmbeddedRedis


def _retention(home) -> subprocess.CompletedProcess:
    env = {**os.environ, "GA_HOME": str(home)}
    env.pop("REDIS_URL", None)
    env.pop("GA_STORE_URL", None)
    return subprocess.run([sys.executable, "-m", "scheduler.cli.main", "history",
                           "retention"], check=False, env=env, capture_output=True, text=True,
                          timeout=120)


def test_a_cli_command_stops_the_embedded_redis_it_started(tmp_path):
    home = tmp_path / "home"
    embedded = EmbeddedRedis(home / "redis")
    result = _retention(home)
    assert result.returncode == 0, result.stderr
    assert embedded.pidfile.parent.is_dir()  # it did start one
    assert not embedded.running()


def test_it_leaves_running_a_server_it_did_not_start(tmp_path):
    home = tmp_path / "home"
    embedded = EmbeddedRedis(home / "redis")
    embedded.start()
    try:
        assert _retention(home).returncode == 0
        assert embedded.running()
    finally:
        embedded.stop()


def test_it_leaves_running_a_server_a_daemon_uses(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    embedded = EmbeddedRedis(home / "redis")
    with open(home / "daemon.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a running daemon holds it
        try:
            assert _retention(home).returncode == 0, "history retention failed"
            assert embedded.running()
        finally:
            embedded.stop()
