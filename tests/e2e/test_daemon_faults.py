"""Faults around the daemon: a second daemon on the same home, the embedded Redis killed, an
agent killed outright while its job runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from providers.replay.provider import ReplayProvider
from core.config import examples_dir
from core.models import TAG_JOB
from tests.fixtures.waiting import wait_until

pytestmark = pytest.mark.e2e
MARKET = examples_dir() / "market.yaml"
SLEEPER_SPEC = {
    "name": "sleeper",
    "command": "python3 -c \"import os, time; open('job.pid', 'w').write(str(os.getpid())); "
               "time.sleep(300)\"",
    "resources": {"gpu_count": 1, "min_vram_gib": 16},
    "market": "on-demand",
}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def test_a_second_daemon_on_the_same_home_is_refused(daemon):
    daemon.start()
    second = subprocess.run(
        [sys.executable, "-m", "scheduler", "daemon", "--home", str(daemon.home),
         "--market", str(MARKET)], env=daemon.env, capture_output=True, text=True, timeout=60)
    assert second.returncode == 2
    assert "another daemon" in second.stderr and str(daemon.proc.pid) in second.stderr
    daemon.client().get("/v1/health")  # the first one is untouched


def test_embedded_redis_killed_is_restarted_without_losing_jobs(daemon):
    daemon.start()
    job = daemon.client().post("/v1/jobs", json={"spec": {**SLEEPER_SPEC, "resources": {"gpu_count": 64}}})
    pid = int((daemon.home / "redis" / "redis.pid").read_text())
    os.kill(pid, signal.SIGKILL)
    time.sleep(0.5)

    def back():
        try:
            return daemon.job(job["id"])
        except Exception:
            return None
    again = wait_until(back, 30, "the daemon to answer again", detail=daemon.log_tail)
    assert again["id"] == job["id"]
    assert int((daemon.home / "redis" / "redis.pid").read_text()) != pid


def test_terminating_an_instance_stops_its_job_even_after_the_agent_was_killed(daemon):
    daemon.start()
    job = daemon.client().post("/v1/jobs", json={"spec": SLEEPER_SPEC})
    wait_until(lambda: daemon.job(job["id"])["state"] == "running", 60, "running",
               detail=daemon.log_tail)
    cloud = ReplayProvider(MARKET, daemon.home / "replay")
    (row,) = cloud.describe_raw({TAG_JOB: job["id"]})
    pid_file = os.path.join(row["work_dir"], "job", "job.pid")
    job_pid = int(wait_until(lambda: os.path.exists(pid_file) and open(pid_file).read(), 20,
                             "the job's pid"))
    os.kill(row["pid"], signal.SIGKILL)  # the agent dies outright; its job would live on
    time.sleep(1)
    assert _alive(job_pid)
    cloud.terminate(row["id"])  # as the daemon does once the agent is found lost
    wait_until(lambda: not _alive(job_pid), 15, "the job process to stop with its instance")
