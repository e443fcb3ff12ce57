"""``schedctl simulate`` end to end: market file → simulator → table / JSON."""

import json
import math
import warnings

import pytest
from typer.testing import CliRunner

from core.config import examples_dir, shared_data_dir
from scheduler.cli.main import app
from tests.integration.simulator.conftest import write_market

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
    rows = {r["policy"]: r for r in json.loads(result.stdout)}
    assert {"arbiter", "greedy", "uniform-progress", "on-demand", "skypilot-failover"} <= set(rows)
    assert rows["on-demand"]["cost_mean"] == pytest.approx(1.0)
    assert rows["arbiter"]["misses"] == 0
    assert rows["arbiter"]["cost_mean"] < 1.0
    assert rows["arbiter"]["gap_to_optimum"] >= -1e-9
    table = run(job_file, "--market", examples_dir() / "market.yaml", "--compute-hours", 2,
                "--policy", "arbiter,greedy", "--runs", 3)
    assert table.exit_code == 0 and "arbiter" in table.output


def test_budget_alerts_summarised(job_file):
    result = run(job_file, "--market", examples_dir() / "market.yaml", "--compute-hours", 10,
                 "--budget-usd", 0.5, "--policy", "arbiter,greedy", "--no-optimum", "--runs", 20)
    assert result.exit_code == 0, result.output
    # one summary row per asked policy, not one line per run and threshold
    assert "budget $0.50: runs whose spend reached" in result.output
    assert "budget at 80%" not in result.output
    assert not [line for line in result.output.splitlines() if line.startswith("on-demand")]
    rows = {r["policy"]: r for r in json.loads(run(
        job_file, "--market", examples_dir() / "market.yaml", "--compute-hours", 10,
        "--budget-usd", 0.5, "--policy", "arbiter,greedy", "--no-optimum", "--runs", 20,
        "--json").stdout)}
    assert set(rows) == {"arbiter", "greedy"}
    assert rows["greedy"]["budget_stopped"] == 20 and rows["greedy"]["unfinished"] == 20


def test_spec_hours_and_budget_are_the_defaults(job_file, tmp_path):
    spec = tmp_path / "budgeted.yaml"
    spec.write_text(JOB + "expected_hours: 10\nbudget_usd: 0.5\n")
    out = run(spec, "--market", examples_dir() / "market.yaml", "--policy", "greedy",
              "--no-optimum")
    assert out.exit_code == 0, out.output
    assert "10 h of compute" in out.output and "budget $0.50" in out.output
    no_hours = run(job_file, "--market", examples_dir() / "market.yaml")
    assert no_hours.exit_code == 2 and "expected_hours" in no_hours.output


def test_only_the_asked_policies_are_shown(job_file):
    out = run(job_file, "--market", examples_dir() / "market.yaml", "--compute-hours", 2,
              "--policy", "arbiter,greedy", "--json")
    assert [r["policy"] for r in json.loads(out.stdout)] == ["arbiter", "greedy"]


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
    rows = {r["policy"]: r for r in json.loads(result.stdout)}
    assert rows["arbiter"]["misses"] == 0


def test_spot_only_spec_is_normalised_to_on_demand_meeting_the_hardware(job_file, tmp_path):
    spot = tmp_path / "spot.yaml"
    spot.write_text(JOB + "market: spot\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # no division by zero behind the numbers
        result = run(spot, "--market", examples_dir() / "market.yaml", "--compute-hours", 2,
                     "--deadline-hours", 3, "--policy", "arbiter,greedy", "--json")
    assert result.exit_code == 0, result.output
    rows = {r["policy"]: r for r in json.loads(result.stdout)}
    # cheapest on-demand with >= 16 GiB: g4dn.xlarge $0.526/h; 2 h + 0.2 h overhead = $1.157
    on_demand = 0.526 * 2.2
    for row in rows.values():
        assert math.isfinite(row["cost_mean"])
        assert row["cost_mean"] == pytest.approx(row["cost_usd_mean"] / on_demand)
    assert "cheapest on-demand offer meeting the hardware constraints" in result.stderr
    assert "g4dn.xlarge/on-demand, $0.526/h" in result.stderr


def test_a_policy_never_placed_shows_no_cost(job_file, tmp_path):
    """Under a spot-only spec the on-demand baseline has no offer: it ran no hour, so its row
    shows no cost (it read $0.00, the cheapest-looking row), only that it did not finish."""
    spot = tmp_path / "spot.yaml"
    spot.write_text(JOB + "market: spot\n")
    args = (spot, "--market", examples_dir() / "market.yaml", "--compute-hours", 2,
            "--deadline-hours", 3, "--policy", "arbiter,on-demand")
    rows = {r["policy"]: r for r in json.loads(run(*args, "--json").stdout)}
    never = rows["on-demand"]
    assert never["unfinished"] == 1 and never["spot_h"] == never["on_demand_h"] == 0
    assert all(never[k] is None or math.isnan(never[k])
               for k in ("cost_mean", "cost_usd_mean", "cost_p95"))
    assert math.isfinite(rows["arbiter"]["cost_usd_mean"])
    [line] = [ln for ln in run(*args).output.splitlines() if ln.strip().startswith("on-demand")]
    assert "0.00" not in line


def test_no_on_demand_offer_at_all_says_so(job_file, tmp_path):
    market = write_market(tmp_path, {"a": [1] * 200}, on_demand_usd=None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        table = run(job_file, "--market", market, "--compute-hours", 2, "--deadline-hours", 3,
                    "--policy", "arbiter,greedy")
    assert table.exit_code == 0, table.output
    assert "inf" not in table.output
    assert "no on-demand offer meets the hardware constraints" in " ".join(table.output.split())
    assert "not normalised" in table.output


def test_fractional_deadline_is_rounded_and_said(job_file):
    result = run(job_file, "--market", examples_dir() / "market.yaml", "--compute-hours", 2,
                 "--deadline-hours", 3.05, "--policy", "greedy", "--json")
    assert result.exit_code == 0, result.output
    assert "deadline 3.05 h rounded down to 3 h" in result.stderr
    assert "omniscient optimum: mean $" in result.stderr
    assert "gap_to_optimum" in json.loads(result.stdout)[0]


def test_offer_speeds_rank_by_cost_to_finish(tmp_path, job_file):
    # a T4 at $0.30/h doing 0.15 of the reference's work per hour ($2 per reference-hour) and
    # an RTX 4090 at $0.50/h doing 0.6 ($0.83): the market file gives the speeds
    (tmp_path / "m.yaml").write_text(
        "name: speeds\noffers:\n"
        "  - {provider: aws, region: r, zone: a, instance_type: t4, gpu_model: T4, gpu_count: 1,"
        " vram_gib: 16, vcpus: 4, memory_gib: 16, on_demand_price_usd_per_hour: 0.3, speed: 0.15}\n"
        "  - {provider: aws, region: r, zone: a, instance_type: rtx, gpu_model: RTX4090,"
        " gpu_count: 1, vram_gib: 24, vcpus: 8, memory_gib: 32, on_demand_price_usd_per_hour: 0.5,"
        " speed: 0.6}\n")
    result = run(job_file, "--market", tmp_path / "m.yaml", "--compute-hours", 2,
                 "--restart-overhead-hours", 0, "--json")
    assert result.exit_code == 0, result.output
    rows = {r["policy"]: r for r in json.loads(result.stdout)}
    assert {"cheapest-per-hour", "arbiter-per-hour"} <= set(rows)
    # the slow offer's 13.3 h fit in the simulated horizon: every run finished
    assert rows["cheapest-per-hour"]["unfinished"] == 0
    assert rows["cheapest-per-hour"]["cost_usd_mean"] == pytest.approx(0.3 * 2 / 0.15)
    assert rows["arbiter"]["cost_usd_mean"] == pytest.approx(0.5 * 2 / 0.6)
    assert rows["arbiter"]["finish_h"] == pytest.approx(2 / 0.6)
    assert "different speeds" in result.stderr


T4_JOB = ("name: t4\ncommand: python train.py\n"
          "resources: {gpu_count: 1, gpu_models: [T4]}\n")


def _t4_run(tmp_path, extra):
    """cheapest-per-hour on the heterogeneous example restricted to its T4 (spot $0.158/h,
    speed 0.1506 per A100-80GB, always available), no restart overhead: its JSON row."""
    path = tmp_path / "t4.yaml"
    path.write_text(T4_JOB + extra)
    result = run(path, "--market", examples_dir() / "markets" / "heterogeneous.yaml",
                 "--restart-overhead-hours", 0, "--policy", "cheapest-per-hour",
                 "--no-optimum", "--json")
    assert result.exit_code == 0, result.output
    return {r["policy"]: r for r in json.loads(result.stdout)}["cheapest-per-hour"]


def test_expected_hours_on_the_reference_gpu_are_hours_there(tmp_path):
    # 2 h on a T4 of transformer work = 2 × 0.1506 (the table's T4 relative) = 0.3012
    # A100-80GB hours; at the T4's speed 0.1506 that is 2 h of T4 time, $0.316.
    row = _t4_run(tmp_path, "expected_hours: 2\nreference_gpu: T4\n"
                            "work: {unit: steps, workload: transformer}\n")
    assert row["unfinished"] == 0
    assert row["finish_h"] == pytest.approx(2.0, rel=0.02)
    assert row["cost_usd_mean"] == pytest.approx(0.158 * 2.0, rel=0.02)


def test_work_total_at_a_declared_throughput_simulates(tmp_path):
    # 3.6M samples at a declared 100 samples/s on a T4 (360k/h): 10 h of T4 time
    # (3.6e6 / (360k / 0.1506) = 1.506 A100-80GB hours at speed 0.1506).
    row = _t4_run(tmp_path, "work: {unit: samples, total: 3600000, workload: transformer, "
                            "throughput: {T4: 100}}\n")
    assert row["unfinished"] == 0
    assert row["finish_h"] == pytest.approx(10.0, rel=0.02)
