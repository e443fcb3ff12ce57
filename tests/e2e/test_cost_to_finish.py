"""Cost to finish, end to end: a real daemon on a replayed market whose GPUs differ in speed
(examples/markets/heterogeneous.yaml), real agents running the real training job, which reports
its progress through ``SCHED_PROGRESS_FILE``.

The job states its work (samples, transformer-like, and its rate on an A100-80GB, which the
machine replaying the market plays), so offers are ranked by expected cost to finish from the
start: it is placed on the RTX 4090 (the cheapest to finish by the GPU table's prior), not on
the T4 spot offer that is the cheapest per hour. In this copy of the market that 4090 is
throttled: it runs at a fifth of its prior's speed. The daemon measures the job's rate there
from its progress reports, shows the cost per 1,000 samples in ``status`` and ``plan``, finds
that the measured rate makes the 4090 dear, and moves the job to a cheaper-to-finish offer,
saying why with numbers. The job resumes from its checkpoint and ends with the same model as an
uninterrupted run. Every other offer of the copy runs at the full speed of the machine
replaying the market, so that the job's remainder after the move takes seconds, not minutes:
the daemon never reads ``speed``, and it ranks an offer it has not measured the job on by the
GPU table's prior (calibrated by the job's rates measured elsewhere). One run serves every
test here."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from core.config import examples_dir
from providers.replay.provider import ReplayProvider
from scheduler.checkpoints.urls import open_store
from tests.e2e.conftest import SHORT_E2E_ENV
from tests.e2e.harness import TERMINAL, DaemonProcess
from tests.e2e.outcomes import assert_final_model_is_the_reference
from tests.fixtures.waiting import wait_until

pytestmark = pytest.mark.e2e
JOB_SPEC = examples_dir() / "charlm-hetero-job.yaml"
MARKET = examples_dir() / "markets" / "heterogeneous.yaml"
# As the spec's work.total says: 20,000 steps of 64 samples.
JOB_ENV = SHORT_E2E_ENV
# The prior says 0.74 of an A100-80GB; the throttled host runs at 0.15 (still > 0.1506, the
# T4's prior, so nothing but the price per unit of work decides where the job goes next).
THROTTLED_SPEED = 0.15
# Where the job goes next it runs at this speed: the move there is decided before the daemon
# measures the job on it, and a measured rate above the prior only makes staying cheaper.
UNTHROTTLED_SPEED = 1.0


@dataclass
class Run:
    job: dict[str, Any]
    while_running: dict[str, Any]
    status_text: str
    plan_text: str
    daemon: DaemonProcess
    store_url: str


def _market_with_a_throttled_4090(into: Path) -> Path:
    market = yaml.safe_load(MARKET.read_text())
    [rtx] = [o for o in market["offers"] if o["gpu_model"] == "RTX4090"]
    rtx["speed"] = THROTTLED_SPEED
    for offer in market["offers"]:
        if offer is not rtx:
            offer["speed"] = UNTHROTTLED_SPEED
    path = into / "heterogeneous-throttled.yaml"
    path.write_text(yaml.safe_dump(market))
    return path


def _cli(daemon: DaemonProcess, *args: str) -> str:
    env = {**daemon.env, "COLUMNS": "200"}
    out = subprocess.run([sys.executable, "-m", "scheduler", *args, "--home", str(daemon.home)],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


@pytest.fixture(scope="module")
def reference(reference_models) -> Path:
    """The final model of an uninterrupted run of the same job."""
    return reference_models(JOB_ENV)


@pytest.fixture(scope="module")
def run(tmp_path_factory, s3_server) -> Iterator[Run]:
    tmp = tmp_path_factory.mktemp("cost-to-finish")
    market = _market_with_a_throttled_4090(tmp)
    store_url = s3_server.store_url(prefix="cost-to-finish")
    daemon = DaemonProcess(tmp / "home", market, env={
        "GA_STORE_URL": store_url, **s3_server.credentials_env()}).start()
    try:
        job_id = daemon.submit(JOB_SPEC, env=JOB_ENV)["id"]

        def measured() -> dict[str, Any] | None:
            job = daemon.job(job_id)
            assert job["state"] not in TERMINAL, daemon.log_tail()
            summary = (job.get("derived") or {}).get("work") or {}
            return job if summary.get("rate_source") == "measured" else None

        while_running = wait_until(measured, 240, "the daemon to measure the job's rate",
                                   interval_s=1, detail=daemon.log_tail)
        status_text = _cli(daemon, "status", job_id)
        plan_text = _cli(daemon, "plan", str(JOB_SPEC), "--like", job_id)

        def finished() -> dict[str, Any] | None:
            job = daemon.job(job_id)
            return job if job["state"] in TERMINAL else None

        job = wait_until(finished, 600, "the job to finish", interval_s=1,
                         detail=daemon.log_tail)
        yield Run(job, while_running, status_text, plan_text, daemon, store_url)
    finally:
        daemon.stop()
        ReplayProvider(market, daemon.home / "replay").shutdown_cloud()


def _offers(job: dict[str, Any]) -> list[dict[str, Any]]:
    return [p["offer"] for p in [*job["placements"], job["placement"]] if p]


def test_placed_by_cost_to_finish_not_by_price_per_hour(run: Run) -> None:
    first = _offers(run.job)[0]
    assert first["gpu_model"] == "RTX4090", first
    placed = [e["message"] for e in run.job["events"] if "RTX4090: $" in e["message"]]
    assert placed and "per 1k samples vs T4" in placed[0], run.job["events"]


def test_status_and_plan_show_the_measured_cost_per_1k_samples(run: Run) -> None:
    work = run.while_running["derived"]["work"]
    assert work["unit"] == "samples" and work["gpu_model"] == "RTX4090"
    assert work["cost_per_1k_usd"] > 0 and work["rate_units_per_h"] > 0
    assert "per 1k samples" in run.status_text or "/1k samples" in run.status_text, \
        run.status_text
    assert "measured" in run.plan_text, run.plan_text
    assert "1k" in run.plan_text, run.plan_text


def test_the_measured_rate_moves_the_job_off_the_throttled_gpu(run: Run) -> None:
    assert run.job["state"] == "succeeded", run.job["events"]
    models = [o["gpu_model"] for o in _offers(run.job)]
    assert models[0] == "RTX4090" and len(models) >= 2 and models[1] != "RTX4090", models
    moved = [e["message"] for e in run.job["events"] if e.get("kind") == "migration"]
    assert moved and "per 1k samples" in moved[0] and "×" in moved[0], moved


def test_the_final_model_equals_an_uninterrupted_run(run: Run, reference: Path, s3_server,
                                                     monkeypatch, tmp_path: Path) -> None:
    for name, value in s3_server.credentials_env().items():
        monkeypatch.setenv(name, value)
    assert_final_model_is_the_reference(open_store(run.store_url), run.job["id"], reference,
                                        tmp_path / "restored")
