"""End-to-end fixtures: the uninterrupted reference run of the example training job, and a
daemon process on the demo market."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from core.config import examples_dir, shared_data_dir
from providers.replay.provider import ReplayProvider
from tests.e2e.harness import DaemonProcess

# Long enough to span a preemption on the replayed markets, whose first reclaim comes ~25 s
# after the market starts: 45,000 steps take ~36 s on two idle cores (30,000 took 24 s there,
# and three jobs finished before their reclaim) and about a minute on busy ones.
E2E_STEPS = 45000
E2E_ENV = {"CHARLM_SEED": "0", "CHARLM_STEPS": str(E2E_STEPS), "CHARLM_CHECKPOINT_EVERY": "2000"}
# A shorter job for tests that need no reclaim on a market's clock, only a checkpoint and a
# move (20,000 steps: about 16 s on two idle cores); also the hetero job's settings
# (tests/e2e/test_cost_to_finish.py), so the two share one reference run.
SHORT_E2E_ENV = {"CHARLM_SEED": "0", "CHARLM_STEPS": "20000", "CHARLM_CHECKPOINT_EVERY": "1000"}


def load_params(path: Path) -> dict[str, np.ndarray]:
    with np.load(path) as data:
        return {k: data[k] for k in data.files}


def uninterrupted_run(work: Path, job_env: dict[str, str]) -> Path:
    """Runs the example training job once in ``work`` with ``job_env``, with no scheduler
    around it; returns its final model's path."""
    env = {**os.environ, **job_env, "SCHED_CHECKPOINT_DIR": str(work / "checkpoints")}
    subprocess.run([sys.executable, str(examples_dir() / "charlm" / "train.py")], cwd=work,
                   env=env, check=True, capture_output=True, timeout=600)
    return work / "checkpoints" / "final_model.npz"


@pytest.fixture(scope="session")
def reference_models(tmp_path_factory) -> Callable[[dict[str, str]], Path]:
    """``reference_models(job_env)``: the final model of an uninterrupted run with
    ``job_env``, made once per session for each distinct ``job_env`` (modules whose jobs run
    the same settings share one reference run)."""
    made: dict[tuple[tuple[str, str], ...], Path] = {}

    def model(job_env: dict[str, str]) -> Path:
        key = tuple(sorted(job_env.items()))
        if key not in made:
            made[key] = uninterrupted_run(tmp_path_factory.mktemp("reference"), job_env)
        return made[key]

    return model


@pytest.fixture(scope="session")
def reference_model(reference_models) -> Path:
    """Final model of an uninterrupted run with the e2e settings, made once per session."""
    return reference_models(E2E_ENV)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    path = shared_data_dir()
    if not (path / "catalogs").is_dir():
        pytest.skip(f"the shared real-data folder is absent ({path}); set GA_DATA_DIR")
    return path


@pytest.fixture
def daemon(tmp_path):
    """A daemon process on the demo market (``examples/market.yaml``) in its own home; stopped,
    and its replayed cloud shut down, after the test."""
    market = examples_dir() / "market.yaml"
    d = DaemonProcess(tmp_path / "home", market)
    yield d
    d.stop()
    ReplayProvider(market, d.home / "replay").shutdown_cloud()
