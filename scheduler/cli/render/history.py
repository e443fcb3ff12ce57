"""Price history as the CLI shows it: statistics tables, why a query found nothing, terminal
plots, an import's summary and the retention settings."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from rich.table import Table
from rich.text import Text

from scheduler.cli.render.tables import new_table, short_price


def history_table(result: dict[str, Any]) -> Table:
    """Statistics rows of ``GET /v1/history`` (per series or group), 80 columns wide."""
    unit = "USD/GPU-hour" if result.get("per_gpu") else "USD/hour"
    title = (f"{result['since'][:16]} → {result['until'][:16]} UTC, {unit}, time-weighted "
             "(chg: changes, vol: std/mean)")
    table = new_table(title, expand=False)
    by = result["by"]
    table.add_column({"series": "series", "zone": "provider/zone", "region": "provider/region",
                      "provider": "provider", "hour-of-day": "hour UTC"}[by], ratio=1)
    for col in ("min", "p50", "mean", "p90", "max", "last", "chg", "vol"):
        table.add_column(col, justify="right", no_wrap=True)
    if by != "series":
        table.add_column("n", justify="right", no_wrap=True)
    for r in result["rows"]:
        if by == "series":
            gpu = f"{r['gpu_count']}x{r['gpu_model']}" if r.get("gpu_model") else "?"
            mkt = "spot" if r["market"] == "spot" else "od"
            cells = [f"{r['provider']}/{r['zone']} {r['instance_type']} {mkt} {gpu}"]
        elif by == "hour-of-day":
            cells = [f"{r['hour']:02d}:00"]
        else:
            cells = [f"{r['provider']}/{r.get('zone') or r.get('region') or ''}".rstrip("/")]
        if r.get("source", "real") != "real":  # a replayed market's prices, never real ones
            cells[0] = f"{r['source']} {cells[0]}"
        cells += [short_price(r[k]) for k in ("min", "p50", "mean", "p90", "max", "last")]
        cells += [str(r["changes"]), f"{100 * r['volatility']:.1f}%"]
        if by != "series":
            cells.append(str(r["series"]))
        table.add_row(*cells)
    return table


def history_empty(result: dict[str, Any]) -> str:
    """Why a history query found nothing, with where the matching data is."""
    if not result["matched"]:
        return "no price history matches these filters (import some: schedctl history import PATH)"
    out = result["outside"]
    return (f"{result['matched']} series match, none with prices in "
            f"{result['since'][:16]} → {result['until'][:16]}; their history spans "
            f"{(out['first'] or '?')[:16]} → {(out['last'] or '?')[:16]} (use --since/--until)")


def history_plot(curves: list[dict[str, Any]], per_gpu_note: bool = False, width: int = 80,
                 height: int = 20) -> str:
    """A terminal plot (plotext) of step functions ``{"series", "points": [[iso, price]]}``.
    Prices are instance prices (USD/hour) even with ``--per-gpu``."""
    import plotext as plt

    plt.clear_figure()
    plt.theme("clear")
    plt.date_form("Y-m-d H:M")
    for curve in curves:
        xs, ys = [], []
        for (at, price), nxt in zip(curve["points"], curve["points"][1:] + [None]):
            stamp = datetime.fromisoformat(at).strftime("%Y-%m-%d %H:%M")
            xs.append(stamp)
            ys.append(price)
            if nxt is not None:  # hold the price until the next change: a step
                xs.append(datetime.fromisoformat(nxt[0]).strftime("%Y-%m-%d %H:%M"))
                ys.append(price)
        if xs:
            plt.plot(xs, ys, label=curve["series"])
    plt.plotsize(width, height)
    plt.title("USD/hour (instance price)" + (" - plotted per instance" if per_gpu_note else ""))
    return plt.build()


def import_summary(report: dict[str, Any]) -> Text:
    skipped = ", ".join(f"{n} {why}" for why, n in report["skipped"].items()) or "none"
    # Late points are not lost data: a re-import finds its old records older than the raw
    # window, whose period the store keeps as hourly roll-ups.
    late = (f"{report['late']:,} not re-stored: older than the raw window (that period is kept "
            f"as hourly roll-ups); " if report["late"] else "")
    return Text(
        f"read {report['files']} files, {report['records']:,} records (skipped: {skipped})\n"
        f"{report['observations']:,} observations, {report['unique']:,} distinct "
        f"({report['observations'] - report['unique']:,} repeated across files), "
        f"{report['series']:,} series, {(report['first'] or '-')[:19]} → {(report['last'] or '-')[:19]}\n"
        f"stored {report['stored']:,} price changes; {report['unchanged']:,} repeated the price in "
        f"force; {late}{report['compacted']:,} series rolled up; {report['hardware']:,} instance "
        "types learned")


def retention_line(settings: Any) -> str:
    return (f"raw price changes: {settings.raw_days:g} days (at most {settings.raw_max_points:,} "
            f"per series); hourly rollups: {settings.rollup_days:g} days")
