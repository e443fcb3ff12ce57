"""Local fakes of what a node agent talks to, and a handle on the REAL agent process.

- :class:`FakeImds`: instance metadata as AWS documents IMDSv2 (token PUT, 401 without a valid
  token, ``spot/instance-action`` 404 until a test sets a notice) plus Alibaba's
  ``instance/spot/termination-time``.
- :class:`FakeDaemon`: the daemon's ``POST /v1/agent/{id}/report``: checks the bearer token,
  records reports, answers ``continue`` or ``stop``; can go down and come back on its port.
- :class:`AgentProcess`: a running ``python -m scheduler.agent``.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from scheduler.checkpoints import open_store, upload_workdir
from tests.fixtures.waiting import wait_until

REPO_ROOT = Path(__file__).resolve().parents[3]
JOB_SCRIPT_DIR = REPO_ROOT / "tests" / "fixtures" / "agent_job"


class _Server:
    """A ThreadingHTTPServer on 127.0.0.1 in a daemon thread; stop/start keep the port."""

    handler: type[BaseHTTPRequestHandler]

    def __init__(self) -> None:
        self.port = 0
        self._httpd: ThreadingHTTPServer | None = None
        self.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        owner = self

        class Handler(self.handler):  # type: ignore[misc, valid-type]
            server_owner = owner

        self._httpd = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()

    def stop(self) -> None:
        """Close the socket: from now on connections are refused."""
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None


class _Quiet(BaseHTTPRequestHandler):
    server_owner: Any

    def log_message(self, *args: Any) -> None:
        pass

    def reply(self, code: int, body: str = "", content_type: str = "text/plain") -> None:
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class _ImdsHandler(_Quiet):
    def do_PUT(self) -> None:
        imds: FakeImds = self.server_owner
        if self.path != "/latest/api/token":
            return self.reply(404)
        ttl = self.headers.get("X-aws-ec2-metadata-token-ttl-seconds", "")
        if not ttl.isdigit() or not 1 <= int(ttl) <= 21600:
            return self.reply(400, "missing or invalid X-aws-ec2-metadata-token-ttl-seconds")
        token = secrets.token_hex(16)
        with imds.lock:
            imds.tokens[token] = time.monotonic() + int(ttl)
            imds.token_puts += 1
        self.reply(200, token)

    def do_GET(self) -> None:
        imds: FakeImds = self.server_owner
        with imds.lock:
            imds.gets.append(self.path)
            if self.path == "/latest/meta-data/instance/spot/termination-time":  # Alibaba
                text = imds.aliyun_termination_time
                return self.reply(404) if text is None else self.reply(200, text)
            expiry = imds.tokens.get(self.headers.get("X-aws-ec2-metadata-token", ""))
            if expiry is None or expiry < time.monotonic():
                return self.reply(401)
            if self.path == "/latest/meta-data/spot/instance-action" and imds.notice:
                return self.reply(200, json.dumps(imds.notice), "application/json")
            if self.path == "/latest/meta-data/events/recommendations/rebalance" and imds.rebalance:
                return self.reply(200, json.dumps(imds.rebalance), "application/json")
        self.reply(404)


class FakeImds(_Server):
    handler = _ImdsHandler

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.tokens: dict[str, float] = {}
        self.token_puts = 0
        self.gets: list[str] = []
        self.notice: dict[str, str] | None = None
        self.rebalance: dict[str, str] | None = None
        self.aliyun_termination_time: str | None = None
        super().__init__()

    def set_notice(self, action: str = "terminate", in_s: int = 120) -> datetime:
        at = (datetime.now(UTC) + timedelta(seconds=in_s)).replace(microsecond=0)
        with self.lock:
            self.notice = {"action": action, "time": at.strftime("%Y-%m-%dT%H:%M:%SZ")}
        return at

    def expire_tokens(self) -> None:
        with self.lock:
            self.tokens.clear()


class _DaemonHandler(_Quiet):
    def do_POST(self) -> None:
        daemon: FakeDaemon = self.server_owner
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        prefix, suffix = "/v1/agent/", "/report"
        if not (self.path.startswith(prefix) and self.path.endswith(suffix)):
            return self.reply(404)
        if self.headers.get("Authorization") != f"Bearer {daemon.token}":
            return self.reply(403, '{"detail": "bad token"}', "application/json")
        report = json.loads(body)
        report["_instance_id"] = self.path[len(prefix):-len(suffix)]
        with daemon.lock:
            daemon.reports.append(report)
            answer = daemon.command
        self.reply(200, json.dumps(answer), "application/json")


class FakeDaemon(_Server):
    handler = _DaemonHandler

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.token = secrets.token_urlsafe(24)
        self.reports: list[dict[str, Any]] = []
        self.command: dict[str, Any] = {"action": "continue"}
        super().__init__()

    def phases(self) -> list[str]:
        with self.lock:
            return [r["phase"] for r in self.reports]

    def log_lines(self) -> list[str]:
        with self.lock:
            return [line for r in self.reports for line in r["log_lines"]]

    def last(self, phase: str) -> dict[str, Any]:
        with self.lock:
            return [r for r in self.reports if r["phase"] == phase][-1]

    def wait_for(self, predicate: Callable[[], bool], timeout_s: float = 15.0) -> None:
        wait_until(predicate, timeout_s, "the agent's reports", interval_s=0.05,
                   detail=lambda: f"phases so far: {self.phases()}")


class AgentProcess:
    """A running ``python -m scheduler.agent``; its own log goes to ``log_path``."""

    def __init__(self, popen: subprocess.Popen, work_dir: Path, log_path: Path) -> None:
        self.popen, self.work_dir, self.log_path = popen, work_dir, log_path

    def wait(self, timeout_s: float = 30.0) -> int:
        try:
            return self.popen.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            raise AssertionError(f"agent still running after {timeout_s} s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def job_output(self) -> str:
        path = self.work_dir / "job.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def wait_for_output(self, text: str, timeout_s: float = 15.0) -> None:
        """Wait until the job has printed ``text`` (read from WORK_DIR/job.log, so without
        waiting for a heartbeat to carry it)."""
        def printed() -> bool:
            exited = self.popen.poll() is not None
            if text in self.job_output():
                return True
            assert not exited, f"job never printed {text!r}; agent log:\n{self.log()}"
            return False

        wait_until(printed, timeout_s, f"the job to print {text!r}", interval_s=0.05,
                   detail=self.log)


def with_job_bundles(store_url: str, *job_ids: str) -> str:
    """``store_url``, after uploading the test job's code bundle there for each of ``job_ids``."""
    store = open_store(store_url)
    for job_id in job_ids:
        upload_workdir(store, job_id, JOB_SCRIPT_DIR)
    return store_url


def job_spec(**env: str) -> dict[str, Any]:
    """A JobSpec (as JSON data) running the test job with ``env``; checkpoints sync every 1 s."""
    return {
        "name": "ckpt-test",
        "command": f"{sys.executable} ckpt_job.py",
        "env": env,
        "checkpoint": {"dir": "checkpoints", "sync_interval_s": 1, "grace_s": 10},
    }
