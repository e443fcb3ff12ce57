"""``schedctl plan job.yaml --samples N --epochs E`` on a small hand-made market of GPUs of
different speeds: the plan turns the work into hours at each offer's rate (the spec's declared
throughput, the GPU table's prior for the others), picks the offer of lowest cost to finish
(not the cheapest per hour), and lists each offer's hours and cost to finish, cost per 1,000
samples and the rate's source. Through the real API app served on a port and the real CLI,
over a real Redis; bad options are refused."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from core.units import RESTART_OVERHEAD_H
from policies.gpu_table import gpu_spec
from scheduler.cli.main import app as cli
from tests.factories.offers import offer
from tests.integration.cli.conftest import served  # noqa: F401  (the API on a real port)

A100 = offer(instance_type="a100", market="on-demand", gpu_model="A100-80GB", vram_gib=80,
             price_usd_per_hour=1.50, interruption_risk=0.0)
V100 = offer(instance_type="v100", market="on-demand", gpu_model="V100", vram_gib=16,
             price_usd_per_hour=0.90, interruption_risk=0.0)
T4 = offer(instance_type="t4", market="on-demand", gpu_model="T4", vram_gib=16,
           price_usd_per_hour=0.40, interruption_risk=0.0)
# Declared per GPU: 1,000 samples/s on an A100 (3.6M/h), 375/s on a V100 (1.35M/h).
SPEC = {"name": "bert", "command": "python train.py", "market": "on-demand",
        "resources": {"gpu_count": 1, "min_vram_gib": 16},
        "work": {"unit": "samples", "throughput": {"A100-80GB": 1000, "V100": 375}}}


@pytest.fixture
def env(served, monkeypatch, tmp_path):  # noqa: F811
    served.store.offers.replace_offers("aws", [A100, V100, T4])
    monkeypatch.setenv("GA_HOME", str(served.home))
    monkeypatch.setenv("COLUMNS", "200")
    spec_file = tmp_path / "job.yaml"
    spec_file.write_text(yaml.safe_dump(SPEC))
    return spec_file


def run(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_plan_by_samples_and_epochs_picks_the_lowest_cost_to_finish(env):
    result = run("plan", str(env), "--samples", "1e6", "--epochs", "3", "--format", "json")
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output)
    # 3M samples; hours on one A100 (the reference GPU) at 3.6M/h: 0.8333 h.
    assert plan["work"] == {"unit": "samples", "total": 3e6, "amount": 1e6, "epochs": 3.0,
                            "source": "option", "reference_gpu": "A100-80GB",
                            "reference_rate_per_h": pytest.approx(3.6e6)}
    assert plan["compute_hours"] == pytest.approx(3e6 / 3.6e6)
    rows = {r["instance_type"]: r for r in plan["best_offers"]}
    launch = RESTART_OVERHEAD_H
    a100, v100, t4 = rows["a100"], rows["v100"], rows["t4"]
    # On-demand (never reclaimed): hours = work ÷ rate + one launch, cost = hours × price.
    assert a100["hours_to_finish"] == pytest.approx(3e6 / 3.6e6 + launch)
    assert a100["cost_to_finish_usd"] == pytest.approx((3e6 / 3.6e6 + launch) * 1.50)
    assert v100["hours_to_finish"] == pytest.approx(3e6 / 1.35e6 + launch)
    assert v100["cost_to_finish_usd"] == pytest.approx((3e6 / 1.35e6 + launch) * 0.90)
    assert a100["cost_per_1k_usd"] == pytest.approx(1.50 * 1000 / 3.6e6)   # $0.00042
    assert v100["cost_per_1k_usd"] == pytest.approx(0.90 * 1000 / 1.35e6)  # $0.00067
    assert (a100["throughput_source"], v100["throughput_source"]) == ("declared", "declared")
    # The T4 has no declaration: the table's relative, scaled by the declared models' mean
    # log ratio declared/relative (the job's units).
    rel = {g: gpu_spec(g).relative("generic") for g in ("A100-80GB", "V100", "T4")}
    scale = ((3.6e6 / rel["A100-80GB"]) * (1.35e6 / rel["V100"])) ** 0.5
    t4_rate = rel["T4"] * scale
    assert t4["throughput_source"] == "prior"
    assert t4["rate_per_h"] == pytest.approx(t4_rate)
    assert t4["hours_to_finish"] == pytest.approx(3e6 / t4_rate + launch)
    assert t4["cost_to_finish_usd"] == pytest.approx((3e6 / t4_rate + launch) * 0.40)
    # Cheapest to finish first: the A100 ($1.40), dearest per hour, before the V100 ($2.09).
    finish = [r["cost_to_finish_usd"] for r in plan["best_offers"]]
    assert finish == sorted(finish) and plan["best_offers"][0]["instance_type"] == "a100"
    assert plan["scenarios"]["policy"]["instance_type"] == "a100"  # what a placement picks

    table = run("plan", str(env), "--samples", "1e6", "--epochs", "3")
    assert table.exit_code == 0, table.output
    text = " ".join(table.output.split())
    assert "3M samples (1M × 3 epochs) = 0.8333 hours on one A100-80GB at 3.6M samples/h" in text
    assert "$0.00042" in text and "3.6M/h declared" in text and "prior" in text


def test_the_spec_work_total_is_planned_without_options(env):
    env.write_text(yaml.safe_dump({**SPEC, "work": {**SPEC["work"], "total": 7.2e6}}))
    plan = json.loads(run("plan", str(env), "--format", "json").output)
    assert plan["compute_hours_source"] == "work" and plan["work"]["source"] == "spec"
    assert plan["compute_hours"] == pytest.approx(2.0)  # 7.2M ÷ 3.6M/h
    # --compute-hours replaces the work total: every offer then needs its hours ÷ speed.
    by_hours = json.loads(run("plan", str(env), "--compute-hours", "1", "--format",
                              "json").output)
    assert by_hours["compute_hours"] == 1 and by_hours["work"] is None
    v100 = next(r for r in by_hours["best_offers"] if r["instance_type"] == "v100")
    assert v100["hours_to_finish"] == pytest.approx(1 / 0.375 + RESTART_OVERHEAD_H)


@pytest.mark.parametrize(("args", "message"), [
    (["--samples", "1e6", "--tokens", "5"], "--samples and --tokens were both given"),
    (["--steps", "10", "--compute-hours", "2"], "--steps and --compute-hours both set"),
    (["--epochs", "3"], "--epochs multiplies the work"),
    (["--samples", "1e15", "--epochs", "1e4"], "work: 1e+15 × 10000 epochs = 1e+19 samples; at most 1e+18"),
])
def test_bad_work_options_are_refused(env, args, message):
    result = run("plan", str(env), *args)
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())


def test_work_without_a_declared_throughput_is_refused(env):
    env.write_text(yaml.safe_dump({**SPEC, "work": {"unit": "samples"}}))
    result = run("plan", str(env), "--samples", "1e6")
    assert result.exit_code == 2
    assert "work: the spec declares no throughput in samples" in " ".join(result.output.split())


def test_the_api_validates_the_work_naming_the_field(served):  # noqa: F811
    import httpx

    headers = {"Authorization": "Bearer user-token"}
    served.store.offers.replace_offers("aws", [A100, V100])
    post = lambda body: httpx.post(f"{served.url}/v1/plans", json=body, headers=headers)
    ok = post({"spec": SPEC, "work": {"unit": "samples", "amount": 3.6e6}})
    assert ok.status_code == 200 and ok.json()["work"]["unit"] == "samples"
    assert ok.json()["compute_hours"] == pytest.approx(1.0)
    for work, field in [({"unit": "images", "amount": 1}, "unit"),
                        ({"unit": "samples", "amount": 0}, "amount"),
                        ({"unit": "samples", "amount": 1, "epochs": -1}, "epochs"),
                        ({"unit": "samples", "amount": 1, "batch": 3}, "batch")]:
        bad = post({"spec": SPEC, "work": work})
        assert bad.status_code == 422
        assert field in [str(p) for p in bad.json()["detail"][0]["loc"]], bad.json()
    both = post({"spec": SPEC, "compute_hours": 2, "work": {"unit": "samples", "amount": 1}})
    assert both.status_code == 422 and both.json()["detail"].startswith("work: ")


def test_plan_like_a_job_uses_the_throughput_it_measured(served, env):  # noqa: F811
    """A job measured 1M samples/h on a V100 (2 h of evidence): planning a spec that declares
    nothing "like" it gives the V100 that rate (measured) and every other GPU model the
    table's ratio to the V100 (prior)."""
    from datetime import timedelta

    from core.models import Job, utcnow
    from core.models.jobs import JobProgress, MeasuredRate
    from core.models.work import ProgressPoint
    from tests.factories.jobs import spec

    now = utcnow()
    ran = Job(id="bert-0001", spec=spec(name="bert"), created_at=now - timedelta(hours=3),
              updated_at=now)
    ran.progress = JobProgress(
        latest=ProgressPoint(unit="samples", done=2e6, total=4e6, at=now),
        closed=[MeasuredRate(gpu_model="V100", gpu_count=1, units=2e6, hours=2.0)])
    served.store.jobs.create(ran)
    env.write_text(yaml.safe_dump({k: v for k, v in SPEC.items() if k != "work"}))
    plan = json.loads(run("plan", str(env), "--like", "bert-0001", "--format", "json").output)
    rows = {r["instance_type"]: r for r in plan["best_offers"]}
    assert rows["v100"]["throughput_source"] == "measured"
    assert rows["v100"]["rate_per_h"] == pytest.approx(1e6)
    rel = {g: gpu_spec(g).relative("generic") for g in ("A100-80GB", "V100")}
    a100_rate = 1e6 * rel["A100-80GB"] / rel["V100"]
    assert rows["a100"]["throughput_source"] == "prior"
    assert rows["a100"]["rate_per_h"] == pytest.approx(a100_rate)
    # The work: the 4M samples the job reported, on one A100 at its rate.
    assert plan["work"]["total"] == 4e6 and plan["work"]["source"] == "like_job"
    assert plan["compute_hours"] == pytest.approx(4e6 / a100_rate)
    assert rows["v100"]["cost_per_1k_usd"] == pytest.approx(0.90 * 1000 / 1e6)
    assert rows["v100"]["hours_to_finish"] == pytest.approx(4.0 + RESTART_OVERHEAD_H)
    unknown = run("plan", str(env), "--like", "nope")
    assert unknown.exit_code == 2 and "nope" in unknown.output



def test_work_that_overflows_the_hours_is_refused_not_planned_by_the_hour(served):  # noqa: F811
    """1e18 samples at 1e-300 samples/s on an A100-80GB is more hours than a float holds:
    the plan says it never finishes instead of pricing one default compute hour."""
    import httpx

    served.store.offers.replace_offers("aws", [A100, V100])
    spec = {**SPEC, "work": {"total": 1e18, "throughput": {"A100-80GB": 1e-300}}}
    answer = httpx.post(f"{served.url}/v1/plans", json={"spec": spec},
                        headers={"Authorization": "Bearer user-token"})
    assert answer.status_code == 422, answer.text
    assert answer.json()["detail"].startswith("work: ") and "never finishes" in answer.text
