"""The charlm example job: real learning, and exact checkpoint/resume across SIGTERM and SIGKILL.

Every run is the real script in a subprocess (200 steps, checkpoint every 50).
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "examples" / "charlm" / "train.py"
STEPS = 200
EVERY = 50
PARAM_NAMES = ("embed", "w1", "b1", "w2", "b2")
PROGRESS_RE = re.compile(r"^progress step=(\d+) total=(\d+) loss=(\d+\.\d{4})$")
DONE_RE = re.compile(r"^done step=(\d+) loss=(\d+\.\d{4}) sha256=([0-9a-f]{64})$")
TIMEOUT = 60


def _env(ckpt_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CHARLM_", "SCHED_"))}
    env["SCHED_CHECKPOINT_DIR"] = str(ckpt_dir)
    env.update(extra)
    return env


def _args(*more: str) -> list[str]:
    return [sys.executable, str(SCRIPT), "--steps", str(STEPS),
            "--checkpoint-every", str(EVERY), *more]


def _run(workdir: Path, *more: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(_args(*more), cwd=workdir, env=_env(workdir / "ckpt", **env),
                          capture_output=True, text=True, timeout=TIMEOUT)


def _done(stdout: str) -> tuple[int, float, str]:
    matches = [DONE_RE.match(line) for line in stdout.splitlines()]
    found = [m for m in matches if m]
    assert len(found) == 1, stdout
    step, loss, sha = found[0].groups()
    return int(step), float(loss), sha


def _load(path: Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as npz:
        return {key: npz[key] for key in npz.files}


def _sha(arrays: dict[str, np.ndarray], prefix: str = "") -> str:
    digest = hashlib.sha256()
    for name in PARAM_NAMES:
        digest.update(np.ascontiguousarray(arrays[prefix + name], dtype="<f8").tobytes())
    return digest.hexdigest()


def _assert_same_state(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert sorted(a) == sorted(b)
    for key in a:
        assert a[key].dtype == b[key].dtype, key
        assert np.array_equal(a[key], b[key]), key


def _interrupt(workdir: Path, sig: signal.Signals, after_step: int) -> tuple[int, list[str]]:
    """Start a run, send ``sig`` after the first progress line past ``after_step``."""
    proc = subprocess.Popen(
        _args("--progress-interval", "0", "--step-sleep", "0.005"), cwd=workdir,
        env=_env(workdir / "ckpt"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    lines: list[str] = []
    try:
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            match = PROGRESS_RE.match(lines[-1])
            if match and int(match.group(1)) > after_step:
                proc.send_signal(sig)
                break
        out, err = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    lines.extend(out.splitlines())
    return proc.returncode, lines


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict:
    """One uninterrupted run."""
    workdir = tmp_path_factory.mktemp("uninterrupted")
    result = _run(workdir)
    assert result.returncode == 0, result.stderr
    step, loss, sha = _done(result.stdout)
    return {
        "stdout": result.stdout, "step": step, "loss": loss, "sha": sha,
        "final": _load(workdir / "ckpt" / "final_model.npz"),
        "state": _load(workdir / "ckpt" / "state.npz"),
    }


def test_uninterrupted_run_output_shape(reference):
    assert reference["step"] == STEPS
    assert reference["sha"] == _sha(reference["final"])
    assert int(reference["final"]["step"]) == STEPS
    progress = [PROGRESS_RE.match(line) for line in reference["stdout"].splitlines()
                if line.startswith("progress ")]
    assert progress and all(progress), reference["stdout"]
    assert progress[-1].group(1) == str(STEPS) and progress[-1].group(2) == str(STEPS)
    assert int(reference["state"]["step"]) == STEPS
    assert len(reference["state"]["loss_history"]) == STEPS


def test_loss_decreases(reference):
    losses = reference["state"]["loss_history"]
    vocab_size = reference["final"]["b2"].shape[0]
    first, last = losses[:10].mean(), losses[-20:].mean()
    assert abs(first - math.log(vocab_size)) < 0.3  # starts near the uniform guess
    assert last < first - 1.0, (first, last)
    assert reference["loss"] < first - 1.0


def test_sigterm_then_resume_is_bit_identical(tmp_path, reference):
    code, lines = _interrupt(tmp_path, signal.SIGTERM, after_step=80)
    assert code == 128 + signal.SIGTERM, lines
    saved = [re.match(r"^checkpoint saved at step (\d+) after SIGTERM$", line) for line in lines]
    saved = [int(m.group(1)) for m in saved if m]
    assert len(saved) == 1, lines
    stopped_at = saved[0]
    assert 80 < stopped_at < STEPS
    assert not any(DONE_RE.match(line) for line in lines)
    state = _load(tmp_path / "ckpt" / "state.npz")
    assert int(state["step"]) == stopped_at
    assert not (tmp_path / "ckpt" / "final_model.npz").exists()
    assert not list((tmp_path / "ckpt").glob("*.tmp"))

    resumed = _run(tmp_path, SCHED_RESUME="1")
    assert resumed.returncode == 0, resumed.stderr
    assert f"resumed from step {stopped_at} " in resumed.stdout
    step, loss, sha = _done(resumed.stdout)
    assert (step, loss, sha) == (reference["step"], reference["loss"], reference["sha"])
    _assert_same_state(_load(tmp_path / "ckpt" / "final_model.npz"), reference["final"])
    _assert_same_state(_load(tmp_path / "ckpt" / "state.npz"), reference["state"])

    # Running again after the end just re-finishes from the final checkpoint.
    again = _run(tmp_path)
    assert again.returncode == 0, again.stderr
    assert f"resumed from step {STEPS} " in again.stdout
    assert _done(again.stdout)[2] == reference["sha"]


def test_sigkill_then_resume_from_periodic_checkpoint_is_bit_identical(tmp_path, reference):
    code, lines = _interrupt(tmp_path, signal.SIGKILL, after_step=120)
    assert code == -signal.SIGKILL
    assert not any("after SIG" in line for line in lines)
    state = _load(tmp_path / "ckpt" / "state.npz")
    killed_at = int(state["step"])
    assert killed_at % EVERY == 0 and 100 <= killed_at < STEPS
    assert not (tmp_path / "ckpt" / "final_model.npz").exists()
    # A temp file as left by a kill in the middle of a save is cleaned up, never read.
    stale = tmp_path / "ckpt" / "state.npz.999999.tmp"
    stale.write_bytes(b"half a zip")

    resumed = _run(tmp_path)  # no SCHED_RESUME: an existing state.npz is resumed anyway
    assert resumed.returncode == 0, resumed.stderr
    assert f"resumed from step {killed_at} " in resumed.stdout
    assert _done(resumed.stdout)[2] == reference["sha"]
    final = _load(tmp_path / "ckpt" / "final_model.npz")
    for name in PARAM_NAMES:
        assert np.array_equal(final[name], reference["final"][name]), name
    _assert_same_state(_load(tmp_path / "ckpt" / "state.npz"), reference["state"])
    assert not stale.exists()


def test_other_seed_gives_other_model_and_refuses_foreign_checkpoint(tmp_path, reference):
    other = _run(tmp_path, "--seed", "1", "--out", str(tmp_path / "model.npz"))
    assert other.returncode == 0, other.stderr
    assert _done(other.stdout)[2] != reference["sha"]
    assert (tmp_path / "model.npz").exists()
    # The checkpoint dir now holds seed 1's state: seed 0 must not silently continue it.
    mixed = _run(tmp_path, "--seed", "0")
    assert mixed.returncode == 3
    assert "different run" in mixed.stderr and "seed" in mixed.stderr


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["--steps", "0"], {}, "--steps must be >= 1"),
        (["--steps", "-5"], {}, "--steps must be >= 1"),
        (["--steps", "many"], {}, "--steps must be an integer"),
        (["--checkpoint-every", "0"], {}, "--checkpoint-every must be >= 1"),
        (["--seed", "-1"], {}, "--seed must be >= 0"),
        (["--progress-interval", "nan"], {}, "--progress-interval"),
        ([], {"CHARLM_STEPS": "0"}, "CHARLM_STEPS"),
        (["--bogus"], {}, "unrecognized arguments"),
        (["--corpus", "/nonexistent/corpus.txt"], {}, "cannot read corpus"),
    ],
)
def test_bad_arguments_exit_nonzero(tmp_path, args, env, message):
    result = subprocess.run(
        [sys.executable, str(SCRIPT), *args], cwd=tmp_path,
        env=_env(tmp_path / "ckpt", **env), capture_output=True, text=True, timeout=TIMEOUT,
    )
    assert result.returncode != 0
    assert message in result.stderr
    assert "progress" not in result.stdout
    assert not (tmp_path / "ckpt" / "state.npz").exists()


def test_job_spec_is_valid_and_points_at_the_script():
    yaml = pytest.importorskip("yaml")
    from core.models import JobSpec

    path = REPO / "examples" / "charlm-job.yaml"
    spec = JobSpec.model_validate(yaml.safe_load(path.read_text()))
    assert spec.name == "charlm-demo"
    assert spec.command == "python train.py"
    assert (path.parent / spec.workdir / "train.py").is_file()
    assert (path.parent / spec.workdir / "corpus.txt").is_file()
    assert spec.resources.gpu_count == 1 and spec.resources.min_vram_gib == 16
    assert spec.checkpoint.dir == "checkpoints" and spec.checkpoint.signal == "SIGTERM"
    assert spec.checkpoint.grace_s >= 5
