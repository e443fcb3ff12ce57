"""CLI tables rendered at 80 columns (a pipe, CI logs, a small terminal): ids and numbers stay
whole; lower-priority columns are dropped and named instead."""

from __future__ import annotations

import io
import sys

from rich.console import Console

from scheduler.cli import render
from scheduler.cli.simulate import _table as simulate_table

JOB_ID = "charlm-demo-ckpt-7f3a2b9c"


def text(renderable, width: int = 80) -> str:
    console = Console(width=width, record=True, color_system=None)
    console.print(renderable)
    out = console.export_text()
    assert all(len(line) <= width for line in out.splitlines())
    return out


def job(state="running"):
    offer = {"provider": "aws", "zone": "us-east-1b", "instance_type": "g4dn.12xlarge",
             "market": "spot", "price_usd_per_hour": 1.2}
    return {"id": JOB_ID, "state": state, "attempt": 3, "created_at": "2026-11-30T10:00:00+00:00",
            "placements": [], "placement": {"offer": offer}, "spec": {"owner": "alice"},
            "derived": {"cost_usd": 1234.5678, "on_demand_cost_usd": 4321.1234}}


def test_jobs_table_keeps_the_id_whole():
    out = text(render.jobs_table([job(), job("succeeded")]))
    assert out.count(JOB_ID) == 2 and "$1,234.5678" in out
    assert text(render.jobs_table([job()], width=200), 200).count("alice") == 1  # the owner


def test_narrow_tables_drop_columns_and_say_which():
    out = text(render.jobs_table([job()], width=50), 50)
    assert JOB_ID in out and "$1,234.5678" in out and "not shown at 50 columns" in out


def cost_row(job_id):
    return {"job": job_id, "state": "succeeded", "compute_usd": 1234.56, "storage_usd": 0.0123,
            "transfer_usd": 0.0456, "total_usd": 1234.62, "gpu_hours": 96.0,
            "usd_per_gpu_hour": 12.86, "on_demand_usd": 4567.89, "savings_pct": 72.9}


def test_cost_report_keeps_job_ids_and_totals():
    totals = {k: v for k, v in cost_row("").items() if k not in ("job", "state")}
    report = {"jobs": [cost_row(JOB_ID), cost_row("train-2")], "totals": totals,
              "prices": {"storage_usd_per_gb_month": 0.023, "transfer_usd_per_gb": 0.09}}
    out = text(render.cost_report(report, width=80))
    assert JOB_ID in out and "train-2" in out and "$1,234.62" in out


def estimate(zone, cost):
    return {"series": f"aws/us-east-1/{zone}/g4dn.12xlarge/spot", "provider": "aws",
            "zone": zone, "instance_type": "g4dn.12xlarge", "market": "spot",
            "gpu_model": "T4", "gpu_count": 4, "price_mean": 1.5812, "price_p10": 1.2345,
            "price_p90": 1.9876, "interruption_risk": 0.15, "rework_hours": 0.12,
            "duration_hours": {"low": 100.0, "expected": 100.1, "high": 100.4},
            "cost_usd": {"low": 123.45, "expected": 158.12, "high": 199.55},
            "over_budget": True}


def test_plan_shows_offers_whole_and_flags_the_budget():
    plan = {"job": "p", "compute_hours": 100.0, "compute_hours_source": "spec",
            "gpu_hours": 400.0, "budget_usd": 0.10, "over_budget": ["spot", "policy"],
            "lookback_since": "2026-10-31T00:00:00", "offers_source": "latest offers",
            "eligible": 5,
            "scenarios": {"on-demand": None, "spot": estimate("us-east-1b", 158.12),
                          "policy": {**estimate("us-east-1c", 160.0), "reason": "cheapest"}},
            "best_offers": [estimate(f"us-east-1{z}", 158.12) for z in "abcdf"],
            "assumptions": {"sync_interval_s": 60, "restart_overhead_h": 0.1}}
    out = text(render.plan_panel(plan, width=80))
    assert "spec's expected_hours" in out and "over budget" in out and "$0.10" in out
    assert "g4dn.12xlarge spot" in out and "…" not in out
    assert out.count("$158.12 ($123.45–$199.55)") == 7  # spot, policy, five offers


def test_simulate_table_numbers_are_never_cut():
    row = {"policy": "skypilot-eager+od", "cost_usd_mean": 14723.45, "cost_mean": 0.4321,
           "finish_h": 123.4, "misses": 12, "budget_stopped": 3, "spot_h": 100.2,
           "on_demand_h": 23.1, "migrations": 4.5, "preemptions": 6.7, "gap_to_optimum": 0.123,
           "runs": 50, "unfinished": 3}
    out = text(simulate_table([row, {**row, "finish_h": float("nan")}], "title", True, width=80))
    assert "14,723.45" in out and "+12.3%" in out and "skypilot-eager+od" in out
    assert "…" not in out and " - " in out


class _Stdout(io.StringIO):
    """A stdout that is a terminal or not, whatever runs the tests."""

    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


def test_piped_output_is_wide_unless_columns_says(monkeypatch):
    monkeypatch.setattr(sys, "stdout", _Stdout(tty=False))
    monkeypatch.delenv("COLUMNS", raising=False)
    assert render.stdout_width() == render.PIPE_WIDTH
    monkeypatch.setenv("COLUMNS", "80")
    assert render.stdout_width() == 80
    monkeypatch.setenv("COLUMNS", "0")  # not a width: the pipe default
    assert render.stdout_width() == render.PIPE_WIDTH


def test_a_terminal_leaves_the_width_to_rich(monkeypatch):
    monkeypatch.setattr(sys, "stdout", _Stdout(tty=True))
    monkeypatch.setenv("COLUMNS", "80")
    assert render.stdout_width() is None


def test_reimport_is_not_reported_as_dropped():
    report = {"files": 1, "records": 10, "skipped": {}, "observations": 10, "unique": 10,
              "series": 1, "first": None, "last": None, "stored": 0, "unchanged": 2, "late": 8,
              "compacted": 0, "hardware": 0}
    out = render.import_summary(report).plain
    assert "8 not re-stored: older than the raw window" in out and "dropped" not in out
    assert "not re-stored" not in render.import_summary({**report, "late": 0}).plain


def test_cost_report_shows_small_sums_as_status_does():
    """A short failed run billed $0.0020 is not shown as $0.00 (status shows four decimals)."""
    row = dict(cost_row(JOB_ID), compute_usd=0.002, total_usd=0.0021, on_demand_usd=0.0126)
    report = {"jobs": [row], "totals": {k: v for k, v in row.items() if k not in ("job", "state")},
              "prices": {"storage_usd_per_gb_month": 0.023, "transfer_usd_per_gb": 0.09}}
    out = text(render.cost_report(report, width=120), 120)
    assert "$0.0020" in out and "$0.0126" in out and "$0.00 " not in out


def test_offers_show_vram_as_the_other_views_do():
    row = {"gpu_count": 1, "gpu_model": "A10G", "vram_gib": 22888 / 1024, "provider": "aws",
           "zone": "us-east-1a", "instance_type": "g5.xlarge", "on_demand_usd_per_hour": 1.006,
           "spot_usd_per_hour": 0.45, "interruption_risk": 0.05, "price_age_s": 60.0}
    out = text(render.offers_table([row]))
    assert "22.35G" in out and "22.3516" not in out
    assert "16G" in text(render.offers_table([dict(row, vram_gib=16.0)]))
