"""``schedctl daemon`` with GA_LOG_FORMAT=json, as a real process: every stderr line is a JSON
object; its /metrics and /v1/events answer with the user token."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import httpx
from typer.testing import CliRunner

from scheduler.cli.main import app as cli
from tests.integration.observability.test_events import line_reader


def test_daemon_logs_json_lines_and_serves_metrics(tmp_path):
    home = tmp_path / "home"
    env = {**os.environ, "GA_HOME": str(home), "GA_LOG_FORMAT": "json"}
    env.pop("REDIS_URL", None)  # the embedded Redis of this home
    proc = subprocess.Popen([sys.executable, "-m", "scheduler.cli.main", "daemon"], env=env,
                            stderr=subprocess.PIPE, text=True)
    lines = line_reader(proc.stderr)
    seen = []
    try:
        while not any("daemon ready" in r.get("message", "") for r in seen):
            line = lines.get(timeout=120)
            seen.append(json.loads(line))  # every line is one JSON object
        api_url = json.loads((home / "daemon.json").read_text())["api_url"]
        token = (home / "api-token").read_text().strip()
        headers = {"Authorization": f"Bearer {token}"}
        metrics = httpx.get(f"{api_url}/metrics", headers=headers, timeout=30)
        assert metrics.status_code == 200 and "ga_jobs{state=\"pending\"}" in metrics.text
        assert httpx.get(f"{api_url}/metrics", timeout=30).status_code == 401
        assert httpx.get(f"{api_url}/v1/events", headers=headers, timeout=30).json()["events"] == []
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    for record in seen:
        assert {"time", "level", "logger", "message"} <= set(record)


def test_daemon_refuses_an_unknown_log_format(tmp_path):
    result = CliRunner().invoke(cli, ["daemon", "--home", str(tmp_path), "--log-format", "xml"])
    assert result.exit_code == 2
    assert "log format 'xml'" in result.output
