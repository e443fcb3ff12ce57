"""A job whose command fails, end to end: a real daemon on the example market, a real agent
running the command, the exit code and the last output lines reported, and ``schedctl
status`` (plain, and ``--watch`` into a pipe) showing both."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from tests.e2e.harness import TERMINAL
from tests.fixtures.waiting import wait_until

pytestmark = pytest.mark.e2e
FAILING = ("python3 -c \"import sys; [print(f'step {i}') for i in range(40)]; "
           "print('ValueError: loss is nan'); sys.exit(3)\"")


def _schedctl(daemon, *args: str) -> str:
    env = {**daemon.env, "COLUMNS": "120"}
    env.pop("PYTHONUNBUFFERED", None)
    done = subprocess.run([sys.executable, "-m", "scheduler.cli.main", *args], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_failed_command_shows_its_exit_code_and_last_log_lines(daemon, tmp_path):
    daemon.start()
    spec = tmp_path / "failing.yaml"
    spec.write_text(yaml.safe_dump({"name": "failing", "command": FAILING, "market": "spot",
                                    "resources": {"gpu_count": 1}}))
    job_id = daemon.submit(spec)["id"]
    # Watching from the start, into a pipe: the events come as lines, the summary at the end.
    watch = subprocess.Popen([sys.executable, "-m", "scheduler.cli.main", "status", job_id,
                              "--watch"], env={**daemon.env, "COLUMNS": "120"},
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        done = wait_until(lambda: (j := daemon.job(job_id))["state"] in TERMINAL and j, 120,
                          "the job to end", detail=daemon.log_tail)
        watched, _ = watch.communicate(timeout=60)
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.wait(10)
    assert done["state"] == "failed", done["events"]
    assert done["command_failure"]["exit_code"] == 3
    assert done["command_failure"]["log_tail"][-1] == "ValueError: loss is nan"

    out = _schedctl(daemon, "status", job_id)
    assert "attempt 1: the command exited with code 3" in out
    assert "ValueError: loss is nan" in out and "step 39" in out
    assert "step 21" in out and "step 20" not in out  # the last 20 lines
    assert "failed (exit 3)" in out

    lines = watched.splitlines()
    assert lines[0].endswith("pending submitted"), watched
    # Each event is a line of its own before the summary (the command may fail before any
    # pass sees it running, so "running" is not required).
    assert any("launched instance" in line for line in lines[:-5]), watched
    assert any(" failed command exited 3" in line for line in lines[:-5]), watched
    assert "attempt 1: the command exited with code 3" in watched
