"""The replay cloud process: a local HTTP server on 127.0.0.1 that is a fake spot cloud.

Run: ``python -m providers.replay.cloud --market PATH --state-dir DIR [--agent-command CMD]
[--idle-exit-s 900]``. All state lives in ``DIR/state.json`` (see :mod:`.state`); the port chosen
at the first start is reused by every restart so agents already launched keep reaching it.
``DIR/cloud.json`` names the running process (pid, port, url).

Endpoints (JSON unless noted; errors are ``{"code", "message"}``):

- ``GET /health`` → market name, pid, state dir, epoch, market time.
- ``GET /offers`` → ``{"offers": [Offer...]}``: rentable now; spot offers whose trace reads 0
  are left out; ``observed_at`` is now; ``capacity`` is what is left of the offer's bound
  (trace count, ``instances``) after its instances not yet terminated, ``null`` unbounded.
- ``GET /prices?since=ISO`` → ``{"observations": [PriceObservation...]}``: the price steps in
  the wall window ``(since, now]`` (see ``ReplayMarket.price_observations``).
- ``POST /instances`` body ``{offer: OfferKey, client_token, tags, agent_env}`` → 201 (new) or
  200 (known token) with the instance; 409 ``InsufficientInstanceCapacity`` (trace at 0, or
  no capacity left); 400 bad request. A launch the offer's ``boot_failures`` covers answers 201
  with a ``pending`` instance that never boots.
- ``GET /instances?tag=k=v&tag=...`` → ``{"instances": [...]}`` (instance fields + ``pid``,
  ``pid_alive``, ``work_dir``, ``terminated_at``); ``GET /instances/<id>`` → one or 404.
- ``DELETE /instances/<id>`` → 204, always (terminate is idempotent).
- ``POST /shutdown[?reset=1]`` → terminates every instance, answers, exits; ``reset`` also
  deletes ``state.json`` so the next start begins a fresh market clock.
- ``/meta/<id>/...``: the instance metadata of the cloud its offer imitates (its notice
  style): AWS IMDSv2 (see :mod:`.imds`) and ECS's ``instance/spot/termination-time`` under
  ``latest/``, Azure's Scheduled Events under ``metadata/``, GCP's ``instance/preempted``
  under ``computeMetadata/`` (see :mod:`.notice_metadata`); nothing for style ``none``.

The cloud exits by itself after ``--idle-exit-s`` seconds with no request and no live agent.
"""

from __future__ import annotations

import argparse
import errno
import fcntl
import json
import logging
import os
import shlex
import signal
import sys
import threading
import time
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from providers.replay import imds, notice_metadata
from providers.replay.instances import CloudError, ReplayCloud
from providers.replay.market import MarketError, load_market
from providers.replay.state import (
    CLOUD_FILE,
    InstanceRecord,
    CLOUD_LOCK_FILE,
    DEFAULT_IDLE_EXIT_S,
    STATE_FILE,
    write_json_atomic,
)
from core.models.base import ensure_utc

log = logging.getLogger("providers.replay.cloud")

HOST = "127.0.0.1"
RECLAIM_INTERVAL_S = 0.5
# How often the idle-exit check runs; it scans /proc, so not on every reclaimer pass.
IDLE_CHECK_INTERVAL_S = 5.0
# A restarted cloud waits this long for its old port (a dying predecessor may still hold it).
PORT_REUSE_WAIT_S = 5.0


class CloudServer(ThreadingHTTPServer):
    """The HTTP server: one thread per connection, plus the cloud, the time of the last
    request (monotonic s, for idle exit) and the event that stops the process."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], cloud: ReplayCloud) -> None:
        super().__init__(address, Handler)
        self.cloud = cloud
        self.last_activity = time.monotonic()
        self.stop = threading.Event()
        self.reset_on_exit = False


class Handler(BaseHTTPRequestHandler):
    """Routes the API and the instance metadata endpoints (see the module docstring)."""

    protocol_version = "HTTP/1.1"
    server: CloudServer
    # Idle keep-alive connections must not pin threads forever.
    timeout = 60

    def log_message(self, format: str, *args: Any) -> None:
        pass  # agents poll metadata every second; only errors are logged (see _send)

    # ----- plumbing -------------------------------------------------------------------------
    def _send(self, status: int, body: Any = None, text: str | None = None) -> None:
        if status >= 500:
            log.error("%s %s -> %s %s", self.command, self.path, status, body)
        payload = (text if text is not None else
                   json.dumps(body) if body is not None else "").encode()
        self.send_response(status)
        ctype = "text/plain" if text is not None else "application/json"
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if payload:
            self.wfile.write(payload)

    def _error(self, status: int, code: str, message: str) -> None:
        self._send(status, {"code": code, "message": message})

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            return json.loads(raw or b"{}")
        except ValueError:
            raise CloudError(400, "MalformedBody", "request body is not JSON") from None

    def _dispatch(self) -> None:
        self.server.last_activity = time.monotonic()
        url = urlsplit(self.path)
        parts = [p for p in url.path.split("/") if p]
        query = parse_qs(url.query)
        try:
            if parts and parts[0] == "meta":
                self._metadata(parts[1:], query)
            else:
                self._api(parts, query)
        except CloudError as exc:
            self._error(exc.status, exc.code, exc.message)
        except Exception as exc:  # a bug must answer 500, not drop the connection
            log.exception("unhandled error on %s %s", self.command, self.path)
            self._error(500, "InternalError", str(exc))

    do_GET = do_POST = do_PUT = do_DELETE = _dispatch

    # ----- API ------------------------------------------------------------------------------
    def _api(self, parts: list[str], query: dict[str, list[str]]) -> None:
        cloud, method = self.server.cloud, self.command
        if method == "GET" and parts == ["health"]:
            return self._send(200, cloud.health())
        if method == "GET" and parts == ["offers"]:
            return self._send(200, {"offers": cloud.offers(), "market_time_s": cloud.market_s()})
        if method == "GET" and parts == ["prices"]:
            return self._send(200, {"observations": cloud.prices(_since(query))})
        if parts[:1] == ["instances"]:
            return self._instances(parts[1:], query)
        if method == "POST" and parts == ["shutdown"]:
            cloud.shutdown_all()
            self.server.reset_on_exit = query.get("reset", ["0"])[0] in ("1", "true")
            self._send(200, {"status": "shutting down"})
            self.server.stop.set()
            return None
        raise CloudError(404, "NotFound", f"no route {method} /{'/'.join(parts)}")

    def _instances(self, rest: list[str], query: dict[str, list[str]]) -> None:
        cloud, method = self.server.cloud, self.command
        if method == "POST" and not rest:
            status, view = cloud.launch(self._body())
            return self._send(status, view)
        if method == "GET" and not rest:
            return self._send(200, {"instances": cloud.describe(_tags(query))})
        if method == "GET" and len(rest) == 1:
            rec = cloud.get(rest[0])
            if rec is None:
                raise CloudError(404, "InvalidInstanceID.NotFound", f"no instance {rest[0]}")
            return self._send(200, cloud.view(rec))
        if method == "DELETE" and len(rest) == 1:
            cloud.terminate(rest[0])
            return self._send(204)
        raise CloudError(405, "MethodNotAllowed", f"{method} /instances/{'/'.join(rest)}")

    # ----- instance metadata ----------------------------------------------------------------
    def _metadata(self, parts: list[str], query: dict[str, list[str]]) -> None:
        """Each instance serves its own cloud's metadata only (``notice_style``)."""
        cloud = self.server.cloud
        rec = cloud.get(parts[0]) if parts else None
        if rec is None:
            raise CloudError(404, "NotFound", f"no instance {parts[0] if parts else ''}")
        style, root, path = cloud.notice_style(rec), parts[1:2], parts[2:]
        if root == ["latest"] and style in ("aws", "aliyun") and path:
            return self._aws_metadata(rec, path)
        if root == ["metadata"] and style == "azure":
            return self._azure_metadata(rec, path, query)
        if root == ["computeMetadata"] and style == "gcp":
            return self._gcp_metadata(rec, path)
        raise CloudError(404, "NotFound", "unknown metadata path")

    def _azure_metadata(self, rec: InstanceRecord, path: list[str],
                        query: dict[str, list[str]]) -> None:
        if self.headers.get(notice_metadata.AZURE_HEADER[0]) != notice_metadata.AZURE_HEADER[1]:
            return self._send(400, {"error": "Bad request. Required metadata header not "
                                             "specified"})
        if not query.get("api-version"):
            return self._send(400, {"error": "Bad request. api-version was not specified in "
                                             "the request"})
        if self.command == "GET" and path == ["instance", "compute", "name"]:
            return self._send(200, text=rec.id)
        if path != ["scheduledevents"] or self.command not in ("GET", "POST"):
            raise CloudError(404, "NotFound", "unknown metadata path")
        if self.command == "POST":
            length = int(self.headers.get("Content-Length") or 0)
            try:
                ids = notice_metadata.start_request_ids(self.rfile.read(length))
            except ValueError as exc:
                return self._send(400, {"error": f"Bad request. {exc}"})
            if not all(self.server.cloud.approve_notice(rec.id, i) for i in ids):
                return self._send(400, {"error": "Bad request. unknown EventId"})
            return self._send(200, text="")
        rec = self.server.cloud.get(rec.id) or rec
        return self._send(200, notice_metadata.scheduled_events(
            rec.id, rec.notice, rec.notice_approved_at is not None))

    def _gcp_metadata(self, rec: InstanceRecord, path: list[str]) -> None:
        if self.headers.get(notice_metadata.GCP_HEADER[0]) != notice_metadata.GCP_HEADER[1]:
            return self._send(403, text="Missing Metadata-Flavor:Google header.")
        if self.command == "GET" and path == ["v1", "instance", "preempted"]:
            return self._send(200, text=notice_metadata.gcp_preempted(rec.notice))
        raise CloudError(404, "NotFound", "unknown metadata path")

    def _aws_metadata(self, rec: InstanceRecord, path: list[str]) -> None:
        cloud, instance_id = self.server.cloud, rec.id
        secret = cloud.store.data.secret
        if self.command == "PUT" and path == ["api", "token"]:
            ttl_text = self.headers.get(imds.TOKEN_TTL_HEADER)
            try:
                token = imds.issue_token(secret, instance_id, int(ttl_text or ""))
            except ValueError:
                raise CloudError(400, "BadRequest",
                                 f"{imds.TOKEN_TTL_HEADER}: 1..{imds.MAX_TOKEN_TTL_S}") from None
            return self._send(200, text=token)
        if self.command != "GET" or path[:1] != ["meta-data"]:
            raise CloudError(404, "NotFound", "unknown metadata path")
        if path[1:] == ["instance", "spot", "termination-time"]:
            # Alibaba ECS (normal mode, no token): a UTC time about 5 minutes ahead, 404 before.
            if rec.notice is None:
                return self._send(404, text="Not Found")
            return self._send(200, text=imds.format_notice_time(rec.notice.action_at))
        if not imds.token_valid(secret, instance_id, self.headers.get(imds.TOKEN_HEADER)):
            return self._send(401, text="Unauthorized")
        leaf = path[1:]
        if leaf == ["instance-id"]:
            return self._send(200, text=instance_id)
        if leaf in (["spot", "instance-action"], ["spot", "termination-time"]):
            if rec.notice is None:
                return self._send(404, text="Not Found")
            when = imds.format_notice_time(rec.notice.action_at)
            if leaf[1] == "termination-time":
                return self._send(200, text=when)
            return self._send(200, text=json.dumps({"action": rec.notice.action, "time": when}))
        return self._send(404, text="Not Found")


def _since(query: dict[str, list[str]]) -> datetime | None:
    raw = query.get("since", [""])[0]
    if not raw:
        return None
    try:
        return ensure_utc(datetime.fromisoformat(raw.replace("Z", "+00:00")))
    except ValueError:
        raise CloudError(400, "InvalidParameterValue",
                         f"since: got {raw!r}; expected an ISO 8601 timestamp") from None


def _tags(query: dict[str, list[str]]) -> dict[str, str]:
    tags = {}
    for item in query.get("tag", []):
        key, sep, value = item.partition("=")
        if not sep:
            raise CloudError(400, "InvalidParameterValue", f"tag: got {item!r}; expected k=v")
        tags[key] = value
    return tags


def _bind(cloud: ReplayCloud) -> CloudServer:
    """Bind the stored port (waiting a little for a dying predecessor), else a new one."""
    port = cloud.store.data.port
    if port:
        deadline = time.monotonic() + PORT_REUSE_WAIT_S
        while True:
            try:
                return CloudServer((HOST, port), cloud)
            except OSError as exc:
                if exc.errno != errno.EADDRINUSE or time.monotonic() > deadline:
                    log.warning("port %s unavailable (%s): taking a new port; agents launched "
                                "before cannot reach this cloud", port, exc)
                    break
                time.sleep(0.2)
    return CloudServer((HOST, 0), cloud)


def _background(server: CloudServer, idle_exit_s: float) -> None:
    cloud = server.cloud
    check_every_s = min(IDLE_CHECK_INTERVAL_S, idle_exit_s / 2)
    next_idle_check = time.monotonic() + check_every_s
    while not server.stop.wait(RECLAIM_INTERVAL_S):
        try:
            cloud.tick()
            if time.monotonic() >= next_idle_check:
                next_idle_check = time.monotonic() + check_every_s
                idle_s = time.monotonic() - server.last_activity
                if idle_s > idle_exit_s and cloud.live_process_count() == 0:
                    log.info("idle for %.0f s with no live instance: exiting", idle_s)
                    server.stop.set()
        except Exception:  # the reclaimer must outlive one bad pass
            log.exception("reclaimer pass failed")


def serve(market_path: Path, state_dir: Path, agent_command: list[str] | None,
          idle_exit_s: float) -> int:
    """Run the cloud until ``POST /shutdown``, SIGTERM/SIGINT or idle exit. Returns an exit
    code: 0 done, 2 bad market file, 3 another cloud already serves ``state_dir``."""
    state_dir.mkdir(parents=True, exist_ok=True)
    lock_fd = os.open(state_dir / CLOUD_LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        log.error("another replay cloud serves %s", state_dir)
        return 3
    try:
        market = load_market(market_path)
    except MarketError as exc:
        log.error("%s", exc)
        return 2
    cloud = ReplayCloud(market, state_dir, agent_command)
    server = _bind(cloud)
    port = server.server_address[1]
    cloud.base_url = f"http://{HOST}:{port}"
    with cloud.lock:
        cloud.store.data.port = port
        cloud.store.save()
    write_json_atomic(state_dir / CLOUD_FILE, {
        "pid": os.getpid(), "port": port, "url": cloud.base_url, "state_dir": str(state_dir),
        "market": str(market.path), "started_at": time.time(),
    })
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: server.stop.set())
    threading.Thread(target=server.serve_forever, name="http", daemon=True).start()
    background = threading.Thread(target=_background, args=(server, idle_exit_s),
                                  name="reclaimer", daemon=True)
    background.start()
    log.info("replay cloud %r serving %s (pid %s)", market.name, cloud.base_url, os.getpid())
    server.stop.wait()
    server.shutdown()
    background.join(timeout=5)
    (state_dir / CLOUD_FILE).unlink(missing_ok=True)
    if server.reset_on_exit:
        (state_dir / STATE_FILE).unlink(missing_ok=True)
    server.server_close()
    return 0


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; see the module docstring."""
    parser = argparse.ArgumentParser(prog="python -m providers.replay.cloud",
                                     description="Run a replayed spot market as a local cloud.")
    parser.add_argument("--market", required=True, type=Path, help="market YAML file")
    parser.add_argument("--state-dir", required=True, type=Path, help="state directory")
    parser.add_argument("--agent-command", default=None,
                        help="command started on each instance (shell-quoted); "
                             "default: python -m scheduler.agent")
    parser.add_argument("--idle-exit-s", type=float, default=DEFAULT_IDLE_EXIT_S,
                        help="exit after this many seconds without requests or live instances")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    command = shlex.split(args.agent_command) if args.agent_command else None
    return serve(args.market.resolve(), args.state_dir.resolve(), command, args.idle_exit_s)


if __name__ == "__main__":
    sys.exit(main())
