"""HTTP client of the replay cloud: finds or starts the cloud process and maps its errors.

The cloud for a state dir is found through ``DIR/cloud.json`` (pid, url) and ``GET /health``.
When none answers, :class:`CloudClient` starts ``python -m providers.replay.cloud`` detached
(its own session, output to ``DIR/cloud.log``) under an exclusive ``flock`` on
``DIR/spawn.lock``, so two callers racing start one cloud.

Error mapping: connection failures, timeouts and 5xx → ``TransientError``; other statuses are
returned to the caller (the provider maps 409 → ``CapacityError``).
"""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from providers.errors import TransientError
from providers.replay import procs
from providers.replay.state import (
    CLOUD_FILE,
    CLOUD_LOG_FILE,
    DEFAULT_IDLE_EXIT_S,
    SPAWN_LOCK_FILE,
    STATE_FILE,
)
from core.config import REPO_ROOT

# Python start-up, market load (a real catalog takes ~0.2 s) and bind: seconds, not minutes.
CLOUD_START_TIMEOUT_S = 20.0
HTTP_TIMEOUT_S = 10.0
HEALTH_TIMEOUT_S = 2.0
# POST /shutdown terminates every instance with a 5 s grace before answering.
SHUTDOWN_TIMEOUT_S = 15.0


def _read_cloud_file(state_dir: Path) -> dict[str, Any] | None:
    try:
        return json.loads((state_dir / CLOUD_FILE).read_text())
    except (OSError, ValueError):
        return None


def _healthy(url: str, state_dir: Path) -> bool:
    try:
        resp = httpx.get(f"{url}/health", timeout=HEALTH_TIMEOUT_S)
        return resp.status_code == 200 and resp.json().get("state_dir") == str(state_dir)
    except (httpx.HTTPError, ValueError):
        return False


def running_cloud_url(state_dir: Path) -> str | None:
    """URL of the live cloud serving ``state_dir``, or ``None``."""
    info = _read_cloud_file(state_dir)
    if not info or not procs.is_alive(info.get("pid")):
        return None
    url = info.get("url")
    return url if url and _healthy(url, state_dir) else None


class CloudClient:
    """Talks to the replay cloud of one state dir, starting it when needed.

    - **market_path**: market file the cloud serves (used only when starting it).
    - **state_dir**: the cloud's state directory (created if missing).
    - **agent_command**: argv started on each instance (``None``: ``python -m scheduler.agent``).
    - **idle_exit_s**: passed to a cloud this client starts.

    Thread-safe (httpx clients are).
    """

    def __init__(self, market_path: Path, state_dir: Path,
                 agent_command: Sequence[str] | None = None,
                 idle_exit_s: float = DEFAULT_IDLE_EXIT_S, provider: str = "replay") -> None:
        self.market_path = Path(market_path).resolve()
        self.state_dir = Path(state_dir).resolve()
        self.agent_command = list(agent_command) if agent_command else None
        self.idle_exit_s = idle_exit_s
        self.provider = provider
        self._http = httpx.Client(timeout=HTTP_TIMEOUT_S)
        self._url: str | None = None

    def ensure_running(self) -> str:
        """URL of the cloud, starting it if none runs. Raises ``TransientError`` when it does
        not become healthy within ``CLOUD_START_TIMEOUT_S`` (the message quotes its log)."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        url = running_cloud_url(self.state_dir)
        if url:
            self._url = url
            return url
        with (self.state_dir / SPAWN_LOCK_FILE).open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            # Another caller may have started it while we waited for the lock.
            url = running_cloud_url(self.state_dir) or self._spawn()
        self._url = url
        return url

    def _spawn(self) -> str:
        cmd = [sys.executable, "-m", "providers.replay.cloud", "--market", str(self.market_path),
               "--state-dir", str(self.state_dir), "--idle-exit-s", str(self.idle_exit_s)]
        if self.agent_command:
            cmd += ["--agent-command", shlex.join(self.agent_command)]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
        log_path = self.state_dir / CLOUD_LOG_FILE
        with log_path.open("ab") as log:
            child = subprocess.Popen(cmd, cwd=self.state_dir, env=env, stdin=subprocess.DEVNULL,
                                     stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + CLOUD_START_TIMEOUT_S
        while time.monotonic() < deadline:
            url = running_cloud_url(self.state_dir)
            if url:
                return url
            if child.poll() is not None:
                break
            time.sleep(0.05)
        tail = log_path.read_text(errors="replace")[-2000:]
        raise TransientError(f"replay cloud for {self.state_dir} did not start "
                             f"(exit {child.poll()}); log tail:\n{tail}",
                             provider=self.provider, code="CloudNotStarted")

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One API call; on a transport failure (cloud died, idled out, or never started) it
        (re)starts the cloud and retries once. Returns responses < 500; raises
        ``TransientError`` on 5xx or when the retry fails too."""
        for attempt in (1, 2):
            url = self._url or self.ensure_running()
            try:
                resp = self._http.request(method, f"{url}{path}", **kwargs)
            except httpx.TransportError as exc:
                # A pooled connection to a cloud that died (or idled out) fails like this. Every
                # call is safe to repeat (reads, terminate, launch with its client token).
                self._url = None
                if attempt == 2:
                    raise TransientError(f"replay cloud request {method} {path} failed: "
                                         f"{exc!r}", provider=self.provider) from None
                continue
            if resp.status_code >= 500:
                raise TransientError(f"replay cloud {method} {path}: HTTP {resp.status_code} "
                                     f"{resp.text[:300]}", provider=self.provider,
                                     code=error_code(resp))
            return resp
        raise AssertionError("unreachable")

    def close(self) -> None:
        self._http.close()


def error_code(resp: httpx.Response) -> str | None:
    """The ``code`` of an error response body (``{"code", "message"}``), if any."""
    try:
        body = resp.json()
    except ValueError:
        return None
    return body.get("code") if isinstance(body, dict) else None


def _kill_recorded_instances(state_dir: Path) -> None:
    """SIGKILL every agent group recorded in ``state.json`` (used when the cloud is dead)."""
    try:
        state = json.loads((state_dir / STATE_FILE).read_text())
    except (OSError, ValueError):
        return
    for rec in state.get("instances", {}).values():
        pid, marker = rec.get("pid"), rec.get("pid_marker")
        if rec.get("state") != "terminated" and procs.group_alive(pid, marker):
            procs.signal_group(pid, signal.SIGKILL, marker)


def shutdown_cloud(state_dir: str | Path, *, reset_market: bool = False,
                   timeout_s: float = SHUTDOWN_TIMEOUT_S) -> None:
    """Stop the replay cloud of ``state_dir`` and every instance it runs; quiet if none runs.

    Asks the cloud (``POST /shutdown``); if it does not answer or exit within ``timeout_s``
    seconds, kills it and the agent process groups recorded in its state. With
    ``reset_market`` the state file is deleted too, so the next start begins a fresh market
    clock (the demo wants this; the daemon does not).
    """
    state_dir = Path(state_dir).resolve()
    info = _read_cloud_file(state_dir) or {}
    pid = info.get("pid")
    if procs.is_alive(pid) and info.get("url"):
        try:
            httpx.post(f"{info['url']}/shutdown", params={"reset": int(reset_market)},
                       timeout=timeout_s)
        except httpx.HTTPError:
            pass
        deadline = time.monotonic() + timeout_s
        while procs.is_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if procs.is_alive(pid):
            os.kill(pid, signal.SIGKILL)
    _kill_recorded_instances(state_dir)
    if reset_market:
        (state_dir / STATE_FILE).unlink(missing_ok=True)
    (state_dir / CLOUD_FILE).unlink(missing_ok=True)
