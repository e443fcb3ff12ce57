"""``schedctl simulate`` end to end: market file → simulator → table / JSON."""

import json

import pytest
from typer.testing import CliRunner

from scheduler.cli.main import app
from scheduler.config import examples_dir, shared_data_dir

JOB = "name: sim\ncommand: python train.py\nresources: {gpu_count: 1, min_vram_gib: 16}\n"


@pytest.fixture
def job_file(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(JOB)
    return path


def run(*args):
    return CliRunner().invoke(app, ["simulate", *map(str, args)], catch_exceptions=False)


def test_demo_market_table(job_file):
    result = run(job_file, "--market", examples_dir() / "market.yaml", "--compute-hours", 2,
                 "--deadline-hours", 3, "--json")
    assert result.exit_code == 0, result.output
    rows = {r["policy"]: r for r in json.loads(result.output)}
    assert {"arbiter", "greedy", "uniform-progress", "on-demand", "skypilot-failover"} <= set(rows)
    assert rows["on-demand"]["cost_mean"] == pytest.approx(1.0)
    assert rows["arbiter"]["misses"] == 0
    assert rows["arbiter"]["cost_mean"] < 1.0
    assert rows["arbiter"]["gap_to_optimum"] >= -1e-9
    table = run(job_file, "--market", examples_dir() / "market.yaml", "--compute-hours", 2,
                "--policy", "arbiter,greedy", "--runs", 3)
    assert table.exit_code == 0 and "arbiter" in table.output


def test_budget_alerts_printed(job_file):
    result = run(job_file, "--market", examples_dir() / "market.yaml", "--compute-hours", 10,
                 "--budget-usd", 0.5, "--policy", "arbiter", "--no-optimum")
    assert result.exit_code == 0, result.output
    assert "budget at 80%" in result.output and "checkpointed and stopped" in result.output


def test_errors_name_the_problem(job_file, tmp_path):
    missing = run(job_file, "--market", tmp_path / "nope.yaml", "--compute-hours", 1)
    assert missing.exit_code == 2 and "cannot read market file" in missing.output
    bad_policy = run(job_file, "--market", examples_dir() / "market.yaml", "--compute-hours", 1,
                     "--policy", "magic")
    assert bad_policy.exit_code == 2 and "unknown policy 'magic'" in bad_policy.output
    picky = tmp_path / "picky.yaml"
    picky.write_text(JOB.replace("min_vram_gib: 16", "min_vram_gib: 500"))
    nothing = run(picky, "--market", examples_dir() / "market.yaml", "--compute-hours", 1)
    assert nothing.exit_code == 2 and "min_vram_gib removed" in nothing.output
    dated = tmp_path / "dated.yaml"
    dated.write_text(JOB + "deadline: 2026-12-01T18:00:00Z\n")
    assert run(dated, "--market", examples_dir() / "market.yaml",
               "--compute-hours", 1).exit_code == 2
    invalid = tmp_path / "invalid.yaml"
    invalid.write_text("name: x\ncommand: y\nmarket: cheap\n")
    assert run(invalid, "--market", examples_dir() / "market.yaml",
               "--compute-hours", 1).exit_code == 2


@pytest.mark.skipif(not (shared_data_dir() / "traces").is_dir(),
                    reason=f"shared data folder {shared_data_dir()} absent (set GA_DATA_DIR)")
def test_real_traces_market(job_file):
    result = run(job_file, "--market", examples_dir() / "markets" / "aws-real.yaml",
                 "--compute-hours", 12, "--deadline-hours", 16, "--runs", 4, "--json",
                 "--policy", "arbiter,greedy,uniform-progress")
    assert result.exit_code == 0, result.output
    rows = {r["policy"]: r for r in json.loads(result.output)}
    assert rows["arbiter"]["misses"] == 0
