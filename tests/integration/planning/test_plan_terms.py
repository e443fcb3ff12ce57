"""What ``schedctl plan`` says about the work it plans for: a unit option the spec's declared
throughput does not count is refused (CLI and API, naming the option or field); speeds and
per-reference-hour costs are relative to one GPU, the spec's ``reference_gpu`` (named); the
start-up hours and an unused ``work.total`` are said; ``--like`` refusals name ``--like``.
Through the real API app served on a port and the real CLI, over a real Redis."""

from __future__ import annotations

import json
from datetime import timedelta

import httpx
import pytest
import yaml
from typer.testing import CliRunner

from core.models import Job, utcnow
from core.models.jobs import JobProgress, MeasuredRate
from core.models.work import ProgressPoint
from core.units import RESTART_OVERHEAD_H
from policies.gpu_table import gpu_spec
from scheduler.cli.main import app as cli
from tests.factories.jobs import spec as job_spec
from tests.factories.offers import offer
from tests.integration.cli.conftest import served  # noqa: F401  (the API on a real port)

A100 = offer(instance_type="a100", market="on-demand", gpu_model="A100-80GB", vram_gib=80,
             price_usd_per_hour=1.50, interruption_risk=0.0)
T4 = offer(instance_type="t4", market="on-demand", gpu_model="T4", vram_gib=16,
           price_usd_per_hour=0.40, interruption_risk=0.0)
BASE = {"name": "bert", "command": "python train.py", "market": "on-demand",
        "resources": {"gpu_count": 1, "min_vram_gib": 16}}
# 2,000 samples/s on one A100: 7.2M samples/h.
SAMPLES = {**BASE, "work": {"unit": "samples", "throughput": {"A100-80GB": 2000}}}


@pytest.fixture
def env(served, monkeypatch, tmp_path):  # noqa: F811
    served.store.offers.replace_offers("aws", [A100, T4])
    monkeypatch.setenv("GA_HOME", str(served.home))
    monkeypatch.setenv("COLUMNS", "200")
    return tmp_path / "job.yaml"


def run(spec_file, spec: dict, *args: str):
    spec_file.write_text(yaml.safe_dump(spec))
    result = CliRunner().invoke(cli, ["plan", str(spec_file), *args], catch_exceptions=False)
    return result, " ".join(result.output.split())


def test_a_unit_option_the_declared_throughput_does_not_count_is_refused(env, served):  # noqa: F811
    result, text = run(env, SAMPLES, "--tokens", "1e6")
    assert result.exit_code == 2, text
    assert "--tokens: got tokens, but the spec's work is in samples" in text
    assert "M tokens" not in text  # no plan at a rate of samples
    ok, _ = run(env, SAMPLES, "--samples", "7.2e6", "--format", "json")
    assert ok.exit_code == 0 and json.loads(ok.output)["compute_hours"] == pytest.approx(1.0)
    post = httpx.post(f"{served.url}/v1/plans", headers={"Authorization": "Bearer user-token"},
                      json={"spec": SAMPLES, "work": {"unit": "tokens", "amount": 1e6}})
    assert post.status_code == 422
    assert post.json()["detail"].startswith("work.unit: got tokens, but the spec's work is in "
                                            "samples")


def test_speeds_and_costs_per_reference_hour_are_relative_to_the_spec_reference_gpu(env):
    spec = {**BASE, "reference_gpu": "T4", "expected_hours": 2}
    result, _ = run(env, spec, "--format", "json")
    plan = json.loads(result.output)
    assert (plan["reference_gpu"], plan["reference_gpu_source"]) == ("T4", "spec")
    rows = {r["instance_type"]: r for r in plan["best_offers"]}
    # Nothing declared: speeds from the table's relatives, the T4 (the reference) at 1.
    a100_speed = gpu_spec("A100-80GB").relative("generic") / gpu_spec("T4").relative("generic")
    assert rows["t4"]["speed"] == rows["t4"]["rate_per_h"] == pytest.approx(1.0)
    assert rows["a100"]["speed"] == rows["a100"]["rate_per_h"] == pytest.approx(a100_speed)
    assert rows["t4"]["rate_unit"] == "reference-hours"
    assert rows["t4"]["hours_to_finish"] == pytest.approx(2 + RESTART_OVERHEAD_H)
    assert rows["a100"]["hours_to_finish"] == pytest.approx(2 / a100_speed + RESTART_OVERHEAD_H)
    # The policy's cost per reference-hour: the chosen offer's price ÷ its speed, same T4.
    policy = plan["scenarios"]["policy"]
    assert f"${policy['price_now'] / policy['speed']:.4f} per reference-hour" in policy["reason"]
    _, text = run(env, spec)
    assert "speed: work per hour relative to one T4 (the spec's reference_gpu)" in text
    assert "2 compute hours on one T4 (the spec's expected_hours)" in text
    assert "1× prior" in text and f"{a100_speed:.3g}× prior" in text
    assert "ref-h/h" not in text
    # Without reference_gpu the reference is the default one, named as such.
    _, text = run(env, {**BASE, "expected_hours": 2, "work": {"unit": "samples"}})
    assert "relative to one A100-80GB (the default reference; the spec sets none)" in text


def test_the_start_up_hours_and_an_unused_work_total_are_said(env):
    result, _ = run(env, {**BASE, "work": {"unit": "samples", "total": 7.2e6}},
                    "--format", "json")
    plan = json.loads(result.output)
    assert plan["compute_hours_source"] == "default" and plan["work"] is None
    assert plan["unplanned_work"] == {"unit": "samples", "total": 7.2e6}
    _, text = run(env, {**BASE, "work": {"unit": "samples", "total": 7.2e6}})
    assert ("the spec's work.total (7.2M samples) cannot be turned into hours without "
            "work.throughput, expected_hours + reference_gpu, or --like JOB: planned by the hour "
            "(the default)") in text
    assert f"hours: {RESTART_OVERHEAD_H:g} h to start (launch, boot, agent install, restore: " \
           "the restart overhead)" in text
    # A total the declared rate turns into hours is planned, not flagged.
    planned, _ = run(env, {**SAMPLES, "work": {**SAMPLES["work"], "total": 7.2e6}},
                     "--format", "json")
    assert json.loads(planned.output)["unplanned_work"] is None


def test_like_refusals_name_the_option(env, served):  # noqa: F811
    now = utcnow()
    fresh = Job(id="bert-0001", spec=job_spec(name="bert"), created_at=now, updated_at=now)
    served.store.jobs.create(fresh)
    _, text = run(env, BASE, "--like", "bert-0001")
    assert "--like: bert-0001 has measured no throughput yet" in text and "like_job" not in text
    ran = Job(id="bert-0002", spec=job_spec(name="bert"), created_at=now - timedelta(hours=3),
              updated_at=now)
    ran.progress = JobProgress(
        latest=ProgressPoint(unit="samples", done=2e6, total=4e6, at=now),
        closed=[MeasuredRate(gpu_model="T4", gpu_count=1, units=2e6, hours=2.0)])
    served.store.jobs.create(ran)
    _, text = run(env, {**BASE, "work": {"unit": "tokens"}}, "--like", "bert-0002")
    assert "--like: bert-0002 counts samples, the spec's work tokens" in text
    result, text = run(env, BASE, "--like", "nope")
    assert result.exit_code == 2 and "--like: no job 'nope'" in text
