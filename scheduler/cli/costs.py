"""``schedctl cost-report``: recorded costs of a job or of the jobs since a time, from the
daemon's API (``GET /v1/cost-report``, :mod:`scheduler.services.costs`)."""

from __future__ import annotations

from pathlib import Path

import typer

from scheduler.cli import render
from scheduler.cli.app import HomeOption, app, client, fail
from scheduler.cli.client import CliError
from scheduler.cli.formats import check_format, emit


@app.command("cost-report")
def cost_report(job: str | None = typer.Argument(None, help="a job id (default: all jobs)"),
                since: str | None = typer.Option(None, help="jobs created since (30d, ISO date)"),
                storage_usd_per_gb_month: float = typer.Option(0.023, min=0),
                transfer_usd_per_gb: float = typer.Option(0.09, min=0),
                fmt: str = typer.Option("table", "--format", help="table, json or csv"),
                home: Path | None = HomeOption) -> None:
    """Recorded costs: compute per placement, checkpoint storage and transfer, savings
    against all on-demand, cost per GPU-hour. Asks the daemon."""
    check_format(fmt)
    try:
        result = client(home).get("/v1/cost-report", job=job, since=since,
                                  storage_usd_per_gb_month=storage_usd_per_gb_month,
                                  transfer_usd_per_gb=transfer_usd_per_gb)
    except CliError as exc:
        fail(exc)
    rows = [{k: v for k, v in r.items() if k not in ("placements", "checkpoints")}
            for r in result["jobs"]]
    emit(rows, fmt, result, lambda: render.cost_report(result))
