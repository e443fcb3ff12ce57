"""The charlm example job's progress file and replayed-machine speed: the real script in a
subprocess. A slower machine only stretches wall time; the model is bit-identical."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "examples" / "charlm" / "train.py"
STEPS = 600
BATCH = 64
DONE_RE = re.compile(r"^done step=\d+ loss=\S+ sha256=([0-9a-f]{64})$", re.MULTILINE)


def run(workdir: Path, **env: str) -> tuple[str, float]:
    """(stdout, wall seconds of the training loop, from the progress file's first to last t)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("CHARLM_", "SCHED_"))}
    clean.update(SCHED_CHECKPOINT_DIR=str(workdir / "ckpt"),
                 SCHED_PROGRESS_FILE=str(workdir / "progress.jsonl"), **env)
    result = subprocess.run([sys.executable, str(SCRIPT), "--steps", str(STEPS),
                             "--progress-interval", "0.2"], cwd=workdir, env=clean,
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    points = [json.loads(line) for line in (workdir / "progress.jsonl").read_text().splitlines()]
    return result.stdout, points[-1]["t"] - points[0]["t"]


def test_progress_points_count_samples_of_the_whole_run(tmp_path: Path) -> None:
    run(tmp_path)
    points = [json.loads(line) for line in (tmp_path / "progress.jsonl").read_text().splitlines()]
    assert points[0]["samples"] == 0 and points[-1]["samples"] == STEPS * BATCH
    assert all(p["total"] == STEPS * BATCH and set(p) == {"samples", "total", "t"}
               for p in points)
    assert [p["samples"] for p in points] == sorted(p["samples"] for p in points)
    assert points[0]["t"] <= points[-1]["t"] <= time.time()


def test_a_slower_machine_changes_nothing_but_wall_time(tmp_path: Path) -> None:
    (tmp_path / "fast").mkdir()
    (tmp_path / "slow").mkdir()
    fast_out, _ = run(tmp_path / "fast", SCHED_REPLAY_SPEED="1")
    slow_out, slow_s = run(tmp_path / "slow", SCHED_REPLAY_SPEED="0.25")
    assert DONE_RE.search(fast_out).group(1) == DONE_RE.search(slow_out).group(1)
    assert "replayed machine speed 0.25" in slow_out
    assert "replayed machine speed" not in fast_out
    assert slow_s > 0


class FakeTime:
    """A clock for the Pacer: sleeping advances it exactly."""

    def __init__(self) -> None:
        self.now, self.pauses = 0.0, []

    def perf_counter(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.pauses.append(round(seconds, 9))
        self.now += seconds


def train_module(monkeypatch):
    """train.py as a module (it sets the BLAS thread variables: restored after the test)."""
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                "VECLIB_MAXIMUM_THREADS"):
        monkeypatch.setenv(var, "1")
    spec = importlib.util.spec_from_file_location("charlm_train", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_pacer_owes_compute_time_times_one_over_speed_minus_one(monkeypatch) -> None:
    train = train_module(monkeypatch)
    clock = FakeTime()
    monkeypatch.setattr(train, "time", clock)
    stop = train.StopFlag()
    pacer = train.Pacer(0.25)            # 1/0.25 - 1 = 3 s of pause per second of compute
    pacer.after_step(0.01, stop)         # owes 0.03 s: paid at once
    assert clock.pauses == [0.03]
    pacer.after_step(0.001, stop)        # owes 0.003 s: below 5 ms, carried over
    assert clock.pauses == [0.03]
    pacer.after_step(0.001, stop)        # 0.006 s owed: paid
    assert clock.pauses == [0.03, 0.006]
    pacer.after_step(0.1, stop)          # 0.3 s, in pauses of at most 0.1 s
    assert clock.pauses[2:] == [0.1, 0.1, 0.1]
    stop.signum = 15                     # a stop signal: no more pausing
    pacer.after_step(0.1, stop)
    assert len(clock.pauses) == 5
    for speed in (1.0, 2.0):             # as fast or faster: never a pause
        train.Pacer(speed).after_step(1.0, train.StopFlag())
    assert len(clock.pauses) == 5


def test_an_invalid_speed_is_ignored(tmp_path: Path) -> None:
    out, _ = run(tmp_path, SCHED_REPLAY_SPEED="fast")
    assert "SCHED_REPLAY_SPEED='fast' is not a number > 0; running at speed 1" in out
