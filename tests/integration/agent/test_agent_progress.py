"""The REAL agent forwards the job's progress file and its GPU use: a real job process
writing progress through scheduler.progress, a fake daemon, a local checkpoint store."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from tests.integration.agent.fakes import FakeDaemon

HERE = Path(__file__).parent


def spec(**env: str) -> dict[str, Any]:
    return {"name": "progress-test", "command": f"{sys.executable} {HERE / 'progress_job.py'}",
            "env": env, "checkpoint": {"dir": "checkpoints", "sync_interval_s": 1}}


def test_reports_carry_the_first_and_latest_progress_point(
    tmp_path: Path, launch_agent, fake_daemon: FakeDaemon
) -> None:
    agent = launch_agent(str(tmp_path / "store"), "job-progress", 1,
                         spec(PROGRESS_POINTS="10", PROGRESS_STEP_S="0.5"), flavor="none")
    assert agent.wait(30) == 0, agent.log()
    with fake_daemon.lock:
        reports = list(fake_daemon.reports)
    assert reports[-1]["phase"] == "succeeded"
    final = reports[-1]
    assert final["progress"]["unit"] == "samples" and final["progress"]["done"] == 10 * 64
    assert final["progress"]["total"] == 10 * 64
    assert final["first_progress"]["done"] == 64 and final["first_progress"]["total"] == 10 * 64
    assert final["first_progress"]["at"] < final["progress"]["at"]
    # Heartbeats while it ran carried points in between, never going backwards, never the
    # garbage or the half-written line.
    done = [r["progress"]["done"] for r in reports if r["progress"] is not None]
    assert len(set(done)) >= 3 and done == sorted(done)
    assert set(done) <= {i * 64 for i in range(1, 11)}
    assert all(r["first_progress"]["done"] == 64 for r in reports if r["progress"])
    assert reports[0]["progress"] is None  # nothing before the job started
    # No GPU on this machine: nothing reported, as before.
    assert all(r["gpu"] is None for r in reports)
    lines = fake_daemon.log_lines()
    progress_file = agent.work_dir / "progress.jsonl"
    assert f"progress file {progress_file}" in lines
    checkpoint_dir = agent.work_dir / "job" / "checkpoints"
    assert f"checkpoint dir {checkpoint_dir}" in lines  # the progress file is not in there


def test_a_job_that_reports_nothing_reports_as_before(
    tmp_path: Path, launch_agent, fake_daemon: FakeDaemon
) -> None:
    agent = launch_agent(str(tmp_path / "store"), "job-silent", 1, spec(PROGRESS_POINTS="0"),
                         flavor="none")
    assert agent.wait(30) == 0, agent.log()
    with fake_daemon.lock:
        reports = list(fake_daemon.reports)
    assert reports[-1]["phase"] == "succeeded"
    assert all(r["progress"] is None and r["first_progress"] is None for r in reports)


def test_gpu_use_from_a_stand_in_nvml_reaches_the_daemon(
    tmp_path: Path, launch_agent, fake_daemon: FakeDaemon
) -> None:
    agent = launch_agent(str(tmp_path / "store"), "job-gpu", 1,
                         spec(PROGRESS_POINTS="8", PROGRESS_STEP_S="0.5"), flavor="none",
                         argv=[sys.executable, str(HERE / "gpu_agent.py")])
    assert agent.wait(30) == 0, agent.log()
    with fake_daemon.lock:
        samples = [r["gpu"] for r in fake_daemon.reports]
    assert all(s is not None for s in samples)  # every report has at least one reading
    # By hand: mean of 90 % and 0 % is 45 %; the most used is 20 + 1 GiB of 2 × 24 GiB.
    for sample in samples:
        assert sample["gpus"] == 2 and sample["util_pct"] == 45.0
        assert sample["max_util_pct"] == 90.0
        assert sample["memory_used_gib"] == 21.0 and sample["memory_total_gib"] == 48.0
        assert sample["readings"] >= 1
    # Each report covers the time since the previous one (heartbeats every 2 s, readings every
    # 2 s): windows stay short instead of growing with the run.
    assert max(s["window_s"] for s in samples) < 6.0
