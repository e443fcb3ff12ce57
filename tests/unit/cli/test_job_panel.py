"""The job panel of ``schedctl status``: money line and a failed command's block."""

from __future__ import annotations

from rich.console import Console

from scheduler.cli import render


def _text(renderable) -> str:
    console = Console(width=100, record=True, color_system=None)
    console.print(renderable)
    return console.export_text()


def _job(**over):
    job = {"id": "train-1", "state": "succeeded", "spec": {"name": "train"}, "placements": [],
           "placement": None, "events": [],
           "derived": {"cost_usd": 0.0729, "billed_hours": 0.1, "on_demand_cost_usd": 0.0729,
                       "savings_pct": -0.0}}
    job.update(over)
    return job


def test_no_negative_zero_savings():
    assert "saved 0.0%" in _text(render.money_line(_job()))
    job = _job(derived={**_job()["derived"], "savings_pct": -12.34})
    assert "saved -12.3%" in _text(render.money_line(job))


def test_failure_block_only_while_the_failure_matters():
    failure = {"attempt": 2, "exit_code": 1, "at": "2026-12-01T10:00:00+00:00", "log_tail": []}
    failed = _text(render.job_panel(_job(state="failed", command_failure=failure)))
    assert "attempt 2: the command exited with code 1 at 10:00:00" in failed
    assert "(it printed nothing)" in failed
    assert "exited with code" not in _text(render.job_panel(_job(command_failure=failure)))
