"""Price history: ``history`` (statistics and plots), ``history import``, ``history
retention``.

``history`` asks the daemon's API (``GET /v1/history``, ``GET /v1/history/points``).
``history import`` and ``history retention`` write and read Redis themselves (``REDIS_URL``,
else the embedded Redis of ``GA_HOME``; :mod:`scheduler.cli.local_state`), so recorded prices
can be loaded before any daemon runs.
"""

from __future__ import annotations

from pathlib import Path

import typer

from scheduler.cli import render
from scheduler.cli.app import HomeOption, app, client, console, err, fail, print_error
from scheduler.cli.client import ApiClient, CliError
from scheduler.cli.formats import check_format, emit
from scheduler.cli.local_state import direct_store

history_app = typer.Typer(help="Price history: statistics per series or group, plots, import "
                               "of recorded prices, retention.", invoke_without_command=True)
app.add_typer(history_app, name="history")


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
    volatility, over a window. Prices are USD/hour, time-weighted. Asks the daemon."""
    if ctx.invoked_subcommand is not None:
        return
    check_format(fmt)
    try:
        api = client(home)
        result = api.get("/v1/history", gpu=gpu, provider=provider, region=region, zone=zone,
                         instance_type=instance_type, market=market, since=since, until=until,
                         by=by, per_gpu=per_gpu, source=source)
        rows = result["rows"]
        if not rows:
            err.print(render.history_empty(result))
            raise typer.Exit(1)
        say_sources(result.get("source") or [], fmt)
        emit(rows, fmt, result, lambda: render.history_table(result))
        if plot and by == "series":
            _plot(api, rows, since, until, plot_max, per_gpu)
        elif plot:
            err.print("--plot draws series: use it with --by series")
    except CliError as exc:
        fail(exc)


def _plot(api: ApiClient, rows: list[dict], since: str, until: str | None, plot_max: int,
          per_gpu: bool) -> None:
    """Draw the first ``plot_max`` series of ``rows`` (each from its own source)."""
    curves = [api.get("/v1/history/points", series=r["series_key"], since=since, until=until,
                      source=r["source"]) for r in rows[:plot_max]]
    typer.echo(render.history_plot(curves, per_gpu_note=per_gpu))
    if len(rows) > plot_max:
        err.print(f"(plotted the {plot_max} cheapest of {len(rows)} series; --plot-max N)")


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
    embedded Redis; no daemon needed): describe-spot-price-history JSON, the AWS spot archive
    TSV, or dated SkyPilot catalog snapshots. Importing the same files again stores nothing
    new."""
    from scheduler.services.history import QueryError, parse_when
    from scheduler.services.history_import import HistoryImportError, import_path

    try:
        when = parse_when(at, "--at")
        report = import_path(direct_store(home), path, provider=provider, at=when)
    except (HistoryImportError, QueryError) as exc:
        print_error(exc)
        raise typer.Exit(2)
    except CliError as exc:
        fail(exc)
    console.print(render.import_summary(report.as_dict()))


@history_app.command("retention")
def retention(raw_days: float | None = typer.Option(None, help="days of raw price changes"),
              rollup_days: float | None = typer.Option(None, help="days of hourly rollups"),
              raw_max_points: int | None = typer.Option(None, help="raw changes per series, at most"),
              home: Path | None = HomeOption) -> None:
    """Show or change how long history is kept (shared by every daemon on this Redis), in
    Redis itself (REDIS_URL or GA_HOME's embedded Redis; no daemon needed)."""
    changes = {k: v for k, v in dict(raw_days=raw_days, rollup_days=rollup_days,
                                     raw_max_points=raw_max_points).items() if v is not None}
    try:
        history = direct_store(home).offers.history
        settings = history.configure(**changes) if changes else history.settings()
    except ValueError as exc:
        print_error(exc)
        raise typer.Exit(2)
    except CliError as exc:
        fail(exc)
    console.print(render.retention_line(settings))
