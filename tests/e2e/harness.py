"""Drive real daemons (subprocesses of ``schedctl daemon``) for end-to-end tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from scheduler.cli.bundle import load_spec_file, pack_spec
from scheduler.cli.client import ApiClient, CliError
from scheduler.daemon import read_daemon_info

TERMINAL = ("succeeded", "failed", "cancelled")


class DaemonProcess:
    """One ``schedctl daemon`` on a state folder; can be killed and started again."""

    def __init__(self, home: Path, market: Path, env: dict[str, str] | None = None,
                 args: list[str] | None = None) -> None:
        self.home = home
        self.market = market
        # Daemon options in place of ``--market MARKET`` (e.g. ``--config``, ``--port``).
        self.args = args if args is not None else ["--market", str(market)]
        self.env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
        self.env.update({"GA_HOME": str(home), **(env or {})})
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def start(self, timeout_s: float = 60) -> DaemonProcess:
        self.home.mkdir(parents=True, exist_ok=True)
        self.starts += 1
        log = open(self.home / f"daemon-{self.starts}.log", "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "scheduler", "daemon", "--home", str(self.home),
             *self.args, "--log-level", "DEBUG"],
            stdout=log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log_tail()
            info = read_daemon_info(self.home)
            if info and info.get("pid") == self.proc.pid:
                try:
                    if self.client().get("/v1/offers"):  # the first poll has landed
                        return self
                except CliError:
                    pass
            time.sleep(0.1)
        raise AssertionError("daemon did not start:\n" + self.log_tail())

    def client(self) -> ApiClient:
        return ApiClient(self.home, timeout_s=10)

    def kill(self) -> None:
        """SIGKILL: no cleanup runs, as in a crash."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def log_tail(self, n: int = 60) -> str:
        path = self.home / f"daemon-{self.starts}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:]) if path.exists() else ""

    def submit(self, spec_path: Path, **overrides: Any) -> dict[str, Any]:
        raw = load_spec_file(spec_path)
        raw.update(overrides)
        return self.client().post("/v1/jobs", json={"spec": raw,
                                                    "bundle_b64": pack_spec(raw)})

    def job(self, job_id: str) -> dict[str, Any]:
        return self.client().get(f"/v1/jobs/{job_id}")


def wait_for(predicate: Callable[[], Any], timeout_s: float, what: str,
             interval_s: float = 0.2, on_timeout: Callable[[], str] | None = None) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval_s)
    extra = on_timeout() if on_timeout else ""
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}\n{extra}")
