"""Drive real daemons (subprocesses of ``schedctl daemon``) for end-to-end tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from scheduler.cli.bundle import load_spec_file, pack_spec
from scheduler.cli.client import ApiClient, CliError
from scheduler.daemon import read_daemon_info
from tests.fixtures.waiting import wait_until

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

        def first_poll_served() -> bool:
            assert self.proc.poll() is None, self.log_tail()
            info = read_daemon_info(self.home)
            return bool(info and info.get("pid") == self.proc.pid
                        and self.client().get("/v1/offers"))

        wait_until(first_poll_served, timeout_s, "the daemon to serve its first offer poll",
                   interval_s=0.1, ignoring=(CliError,), detail=self.log_tail)
        return self

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

