"""Price history, plans and cost reports: ``history``, ``history import``, ``history
retention``, ``plan``, ``cost-report``.

Queries go through the daemon's API when one answers in ``GA_HOME``; otherwise they read
Redis directly (``REDIS_URL``, else the embedded Redis of ``GA_HOME``), so planning works
without a running daemon. ``history import`` and ``history retention`` always talk to Redis
directly.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from scheduler.cli import render
from scheduler.cli.app import HomeOption, app, client, console, err, fail
from scheduler.cli.client import CliError

history_app = typer.Typer(help="Price history: statistics per series or group, plots, import "
                               "of recorded prices, retention.", invoke_without_command=True)
app.add_typer(history_app, name="history")

FORMATS = ("table", "json", "csv")


def _store(home: Path | None):
    """A Store over ``REDIS_URL`` or the embedded Redis of ``home``."""
    from core.config import home_dir
    from scheduler.store import Store
    from scheduler.store.connection import connect

    try:
        return Store.over(connect(home=home or home_dir(), stop_on_exit=True))
    except Exception as exc:  # connection refused, embedded server failed to start
        raise CliError(f"cannot reach Redis: {exc}") from None


def _objects(home: Path | None):
    from scheduler.checkpoints.urls import open_store
    from core.config import home_dir

    url = os.environ.get("GA_STORE_URL") or ((home or home_dir()) / "checkpoints").resolve().as_uri()
    return open_store(url)


def call(home: Path | None, method: str, path: str, local: Callable[[Any], Any],
         params: dict[str, Any] | None = None, body: Any = None) -> Any:
    """The API's answer when a daemon answers for ``home``; else ``local(store)``."""
    try:
        api = client(home)
        api.get("/v1/health")
    except CliError:
        from scheduler.services.history import QueryError

        try:
            return local(_store(home))
        except QueryError as exc:
            raise CliError(str(exc)) from None
    if method == "GET":
        return api.get(path, **(params or {}))
    return api.post(path, json=body)


def _check_format(fmt: str) -> None:
    if fmt not in FORMATS:
        err.print(f"[bold red]error:[/] --format: got {fmt!r}; allowed: {', '.join(FORMATS)}")
        raise typer.Exit(2)


def emit(rows: list[dict[str, Any]], fmt: str, whole: Any, table: Callable[[], Any]) -> None:
    """Print ``whole`` as JSON, ``rows`` as CSV, or ``table()`` with rich."""
    if fmt == "json":
        typer.echo(json.dumps(whole, indent=2, default=str))
    elif fmt == "csv":
        buf = io.StringIO()
        if rows:
            writer = csv.DictWriter(buf, fieldnames=list(rows[0]), extrasaction="ignore")
            writer.writeheader()
            writer.writerows({k: (json.dumps(v) if isinstance(v, (dict, list)) else v)
                              for k, v in r.items()} for r in rows)
        typer.echo(buf.getvalue(), nl=False)
    else:
        console.print(table())


@history_app.callback()
def history(
    ctx: typer.Context,
    gpu: str | None = typer.Option(None, help="GPU model, e.g. V100"),
    provider: str | None = typer.Option(None),
    region: str | None = typer.Option(None),
    zone: str | None = typer.Option(None),
    instance_type: str | None = typer.Option(None, "--instance-type"),
    market: str | None = typer.Option(None, help="spot or on-demand"),
    since: str = typer.Option("30d", help="start: a duration ago (30d, 12h, 1y) or an ISO date"),
    until: str | None = typer.Option(None, help="end (default now), same forms as --since"),
    by: str = typer.Option("series", help="series, zone, region, provider or hour-of-day"),
    source: str = typer.Option("auto", help="auto (real history when it covers the window, "
                                            "else replayed markets'), real, replay, "
                                            "replay:MARKET or all"),
    per_gpu: bool = typer.Option(False, "--per-gpu", help="prices per GPU-hour"),
    plot: bool = typer.Option(False, "--plot", help="draw the series in the terminal"),
    plot_max: int = typer.Option(6, min=1, max=20, help="most series drawn by --plot"),
    fmt: str = typer.Option("table", "--format", help="table, json or csv"),
    home: Path | None = HomeOption,
) -> None:
    """Price statistics per series (or group): min, p50, mean, p90, max, last, changes,
    volatility, over a window. Prices are USD/hour, time-weighted."""
    if ctx.invoked_subcommand is not None:
        return
    from scheduler.services import history as service

    _check_format(fmt)
    params = dict(gpu=gpu, provider=provider, region=region, zone=zone,
                  instance_type=instance_type, market=market)
    query = dict(since=since, until=until, by=by, per_gpu=per_gpu, source=source)
    try:
        result = call(home, "GET", "/v1/history", lambda s: service.query(s, **query, **params),
                      params={**params, **query})
        rows = result["rows"]
        if not rows:
            err.print(render.history_empty(result))
            raise typer.Exit(1)
        say_sources(result.get("source") or [], fmt)
        emit(rows, fmt, result, lambda: render.history_table(result))
        if plot and by == "series":
            picked = [(r["series_key"], r["source"]) for r in rows[:plot_max]]
            curves = [call(home, "GET", "/v1/history/points",
                           lambda st, s=s, src=src: service.points(st, s, since, until, source=src),
                           params={"series": s, "since": since, "until": until, "source": src})
                      for s, src in picked]
            typer.echo(render.history_plot(curves, per_gpu_note=per_gpu))
            if len(rows) > plot_max:
                err.print(f"(plotted the {plot_max} cheapest of {len(rows)} series; --plot-max N)")
        elif plot:
            err.print("--plot draws series: use it with --by series")
    except CliError as exc:
        fail(exc)


def say_sources(answered: list[str], fmt: str) -> None:
    """Say, before a table, when its prices come from a replayed market (on stderr for
    json/csv, whose rows carry ``source`` themselves)."""
    from scheduler.store.history_sources import is_replay, label

    replayed = [s for s in answered if is_replay(s)]
    if not replayed:
        return
    text = "prices from " + ", ".join(label(s) for s in replayed)
    if len(replayed) < len(answered):
        text += " and real prices, in separate rows (column source)"
    (console if fmt == "table" else err).print(f"[bold yellow]{text}[/]")


@history_app.command("import")
def import_(path: Path = typer.Argument(..., help="a dump file or folder (.json, .tsv, .csv)"),
            provider: str | None = typer.Option(None, help="cloud of a catalog snapshot"),
            at: str | None = typer.Option(None, help="date of a catalog snapshot"),
            home: Path | None = HomeOption) -> None:
    """Load recorded prices into history, straight into Redis (REDIS_URL or GA_HOME's
    embedded Redis): describe-spot-price-history JSON, the AWS spot archive TSV, or dated
    SkyPilot catalog snapshots. Importing the same files again stores nothing new."""
    from scheduler.services.history import QueryError, parse_when
    from scheduler.services.history_import import HistoryImportError, import_path

    try:
        when = parse_when(at, "--at")
        report = import_path(_store(home), path, provider=provider, at=when)
    except (HistoryImportError, QueryError) as exc:
        err.print(f"[bold red]error:[/] {exc}")
        raise typer.Exit(2)
    except CliError as exc:
        fail(exc)
    console.print(render.import_summary(report.as_dict()))


@history_app.command("retention")
def retention(raw_days: float | None = typer.Option(None, help="days of raw price changes"),
              rollup_days: float | None = typer.Option(None, help="days of hourly rollups"),
              raw_max_points: int | None = typer.Option(None, help="raw changes per series, at most"),
              home: Path | None = HomeOption) -> None:
    """Show or change how long history is kept (shared by every daemon on this Redis)."""
    changes = {k: v for k, v in dict(raw_days=raw_days, rollup_days=rollup_days,
                                     raw_max_points=raw_max_points).items() if v is not None}
    try:
        history = _store(home).offers.history
        settings = history.configure(**changes) if changes else history.settings()
    except ValueError as exc:
        err.print(f"[bold red]error:[/] {exc}")
        raise typer.Exit(2)
    except CliError as exc:
        fail(exc)
    console.print(render.retention_line(settings))


@app.command()
def plan(spec_file: Path = typer.Argument(..., help="job spec YAML"),
         compute_hours: float | None = typer.Option(
             None, "--compute-hours", min=0.001, help="instance-hours the job needs without "
                                                     "interruptions (default: the spec's "
                                                     "expected_hours, else 1: per compute hour)"),
         lookback: str = typer.Option("30d", help="price history used for the quantiles"),
         config: Path | None = typer.Option(
             None, help="without a running daemon: the daemon config whose providers to plan on "
                        "(default: GA_HOME/config.yaml if present, else the replayed example "
                        "market)"),
         fmt: str = typer.Option("table", "--format", help="table or json"),
         home: Path | None = HomeOption) -> None:
    """Where the daemon would place a job now and why (the same policy and cost model), and
    what it will cost and how long it will take: all on-demand, on spot, under the policy; the
    five best offers. Works without a daemon, on what the configured providers list now.
    Flags expected costs over the spec's budget_usd."""
    from scheduler.cli.bundle import load_spec_file
    from core.config import home_dir
    from scheduler.provider_setup import ProviderConfigError
    from scheduler.services import plans as service
    from scheduler.services.jobs import SpecError

    _check_format(fmt)
    try:
        raw = load_spec_file(spec_file)
        result = call(home, "POST", "/v1/plans",
                      lambda s: service.plan_without_daemon(s, home or home_dir(), raw,
                                                            compute_hours, lookback, config),
                      body={"spec": raw, "compute_hours": compute_hours, "lookback": lookback})
    except ProviderConfigError as exc:
        fail(CliError(str(exc)))
    except SpecError as exc:
        fail(CliError(str(exc), exc.problems))
    except CliError as exc:
        fail(exc)
    emit(result["best_offers"], fmt, result, lambda: render.plan_panel(result))


@app.command("cost-report")
def cost_report(job: str | None = typer.Argument(None, help="a job id (default: all jobs)"),
                since: str | None = typer.Option(None, help="jobs created since (30d, ISO date)"),
                storage_usd_per_gb_month: float = typer.Option(0.023, min=0),
                transfer_usd_per_gb: float = typer.Option(0.09, min=0),
                fmt: str = typer.Option("table", "--format", help="table, json or csv"),
                home: Path | None = HomeOption) -> None:
    """Recorded costs: compute per placement, checkpoint storage and transfer, savings
    against all on-demand, cost per GPU-hour."""
    from scheduler.services import costs as service
    from scheduler.services.history import parse_when
    from scheduler.services.jobs import JobNotFound

    _check_format(fmt)
    prices = dict(storage_usd_per_gb_month=storage_usd_per_gb_month,
                  transfer_usd_per_gb=transfer_usd_per_gb)
    try:
        result = call(home, "GET", "/v1/cost-report",
                      lambda s: service.report(s, _objects(home), job_id=job,
                                               since=parse_when(since, "since"), **prices),
                      params={"job": job, "since": since, **prices})
    except JobNotFound:
        fail(CliError(f"no job {job!r}"))
    except CliError as exc:
        fail(exc)
    rows = [{k: v for k, v in r.items() if k not in ("placements", "checkpoints")}
            for r in result["jobs"]]
    emit(rows, fmt, result, lambda: render.cost_report(result))


def offers_at(home: Path | None, at: str, source: str = "auto",
              **filters: Any) -> list[dict[str, Any]]:
    """``schedctl offers --at``: rows of ``GET /v1/offers?at=`` (or read locally), each with
    its ``source``; says so when prices come from a replayed market."""
    from scheduler.services import history as service

    rows = call(home, "GET", "/v1/offers",
                lambda s: service.offers_at(s, at, source=source, **filters),
                params={"at": at, "source": source, **filters})
    say_sources(sorted({r.get("source", "real") for r in rows}), "table")
    return rows
