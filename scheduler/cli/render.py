"""Rich renderings of jobs and offers for the CLI. Tables use light borders and short columns
so they stay readable in an 80-column terminal: ids and numbers are never cut (``no_wrap`` with
their full width as minimum); when the width is short, :func:`fitted_table` drops the
lower-priority columns first and says which."""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rich import box
from rich.cells import cell_len
from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

STATE_STYLE = {
    "pending": "yellow", "provisioning": "cyan", "running": "green",
    "checkpointing": "magenta", "migrating": "magenta", "succeeded": "bold green",
    "failed": "bold red", "cancelled": "dim", "stopped": "bold yellow",
}
TERMINAL_STATES = ("succeeded", "failed", "cancelled", "stopped")
PROGRESS_RE = re.compile(r"progress step=(\d+) total=(\d+)(?: loss=([0-9.]+))?")


def _usd(value: float | None, digits: int = 4) -> str:
    return "-" if value is None else f"${value:,.{digits}f}"


def _usd_cents(value: float | None) -> str:
    """Cents for large sums, four decimals below $100 (a short run's $0.0020 is not $0.00)."""
    return _usd(value, 2 if value is not None and abs(value) >= 100 else 4)


def _time(iso: str | None) -> str:
    if not iso:
        return "-"
    return datetime.fromisoformat(iso).strftime("%H:%M:%S")


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def state_text(state: str) -> Text:
    return Text(state, style=STATE_STYLE.get(state, ""))


# Output that is not a terminal (a pipe, a file, CI logs) is not cut to rich's 80-column
# default: COLUMNS when set, else this.
PIPE_WIDTH = 200
# Columns between two table columns (divider + collapsed padding of the light borders).
COLUMN_GAP = 2
# A wrapping text column (an offer's "provider/zone type market") keeps at least this width.
WRAP_MIN_WIDTH = 16


def stdout_width() -> int | None:
    """Console width for stdout: ``None`` on a terminal (rich follows its size), else the
    ``COLUMNS`` environment variable or :data:`PIPE_WIDTH`."""
    if sys.stdout.isatty():
        return None
    cols = os.environ.get("COLUMNS", "")
    return int(cols) if cols.isdigit() and int(cols) > 0 else PIPE_WIDTH


def output_width() -> int:
    """Characters a table may use on stdout (see :func:`stdout_width`)."""
    return stdout_width() or shutil.get_terminal_size().columns


@dataclass(frozen=True)
class Column:
    """A column of :func:`fitted_table`: ``drop`` 0 is always shown; when the table is too
    wide, the column with the highest ``drop`` goes first. ``wrap`` columns (free text) fold
    onto more lines down to :data:`WRAP_MIN_WIDTH`; all others are never cut."""

    header: str
    justify: str = "right"
    drop: int = 0
    wrap: bool = False


def _cell_width(cell: Any) -> int:
    text = cell.plain if isinstance(cell, Text) else str(cell)
    return max((cell_len(line) for line in text.split("\n")), default=0)


def fitted_table(title: str | None, columns: Sequence[Column], rows: Sequence[Sequence[Any]],
                 width: int | None = None, expand: bool = False) -> Table:
    """A table of ``rows`` (one cell per column: str or Text) that fits in ``width``
    characters (default :func:`output_width`) by dropping columns by ``drop`` priority; the
    caption names the dropped ones. Kept non-wrapping columns get their widest cell as their
    minimum width, so ids and numbers are never cut."""
    width = output_width() if width is None else width
    need = [max([cell_len(c.header)] + [_cell_width(r[i]) for r in rows])
            for i, c in enumerate(columns)]
    floor = [min(n, WRAP_MIN_WIDTH) if c.wrap else n for n, c in zip(need, columns)]
    keep = list(range(len(columns)))

    def total() -> int:
        return sum(floor[i] for i in keep) + COLUMN_GAP * (len(keep) - 1)

    while total() > width:
        droppable = [i for i in keep if columns[i].drop > 0]
        if not droppable:
            break
        keep.remove(max(droppable, key=lambda i: (columns[i].drop, i)))
    table = new_table(title, expand)
    for i in keep:
        c = columns[i]
        table.add_column(c.header, justify=c.justify, no_wrap=not c.wrap, min_width=floor[i],
                         overflow="fold", ratio=1 if c.wrap else None)
    for r in rows:
        table.add_row(*[r[i] for i in keep])
    hidden = [c.header for i, c in enumerate(columns) if i not in keep]
    if hidden:
        table.caption = f"not shown at {width} columns: {', '.join(hidden)} (a wider terminal or COLUMNS shows them)"
        table.caption_justify = "left"
    return table


def new_table(title: str | None = None, expand: bool = True) -> Table:
    """An empty table in the CLI's light style."""
    return Table(title=title, box=box.SIMPLE_HEAD, expand=expand, padding=(0, 1),
                 pad_edge=False, collapse_padding=True, show_edge=False,
                 title_justify="left", title_style="bold")


def money_line(job: dict[str, Any]) -> Text:
    d = job["derived"]
    label = "cost" if job["state"] in TERMINAL_STATES else "cost so far"
    text = Text(f"{label} {_usd(d['cost_usd'])} for {d['billed_hours']:.2f} instance-hours")
    if d["on_demand_cost_usd"] is not None:
        text.append(f" · all on-demand: {_usd(d['on_demand_cost_usd'])}")
        if d["savings_pct"] is not None:
            saved = round(d["savings_pct"], 1) + 0.0  # never "-0.0%"
            text.append(f" · saved {saved:.1f}%", style="bold green")
    scales = {p.get("time_scale", 1.0) for p in _all_placements(job)}
    scale = max(scales, default=1.0)
    if scale != 1.0:
        text.append(f"\n(replayed market: 1 s of wall time = {scale:g} s of market time; "
                    "costs are in market hours)", style="dim")
    return text


def _all_placements(job: dict[str, Any]) -> list[dict[str, Any]]:
    return job["placements"] + ([job["placement"]] if job["placement"] else [])


def timeline(job: dict[str, Any], last: int | None = None) -> Table:
    table = new_table("timeline")
    table.add_column("time", no_wrap=True)
    table.add_column("state", no_wrap=True)
    table.add_column("event", ratio=1)
    events = job["events"][-last:] if last else job["events"]
    for ev in events:
        table.add_row(_time(ev["at"]), state_text(ev["state"]), ev["message"])
    return table


def event_line(event: dict[str, Any]) -> Text:
    """One timeline event as one line (``status --watch`` into a pipe): UTC date and time,
    state, message, and the offer with its price when the event names one."""
    at = str(event.get("at", ""))[:19].replace("T", " ")
    line = Text.assemble(at, " ", state_text(str(event.get("state", "?"))), " ",
                         str(event.get("message", "")))
    if event.get("offer"):
        price = event.get("price_usd_per_hour")
        line.append(f" ({event['offer']}" + ("" if price is None else f" @ ${price:.4f}/h") + ")",
                    style="dim")
    return line


def placements(job: dict[str, Any]) -> Table:
    table = new_table("placements")
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("where", ratio=1)
    table.add_column("market", no_wrap=True)
    table.add_column("$/h", justify="right", no_wrap=True)
    table.add_column("hours", justify="right", no_wrap=True)
    table.add_column("end", no_wrap=True)
    table.add_column("cost", justify="right", no_wrap=True)
    # The daemon's figures (the held offer's price series integrated; $/h: its latest price).
    billed = job.get("derived", {}).get("placement_costs") or []
    for i, p in enumerate(_all_placements(job)):
        o = p["offer"]
        d = billed[i] if i < len(billed) else {
            "cost_usd": _billed_hours(p) * o["price_usd_per_hour"],
            "billed_hours": _billed_hours(p), "price_usd_per_hour": o["price_usd_per_hour"]}
        table.add_row(
            str(p["attempt"]), f"{o['provider']}/{o['zone']} {o['instance_type']}",
            o["market"], _usd(d["price_usd_per_hour"], 3), f"{d['billed_hours']:.2f}",
            _placement_end(p, job.get("command_failure")), _usd(d["cost_usd"]),
        )
    return table


def _placement_end(p: dict[str, Any], failure: dict[str, Any] | None) -> str:
    end = p.get("end_reason") or ("running" if p.get("instance_id") else "launching")
    if end == "failed" and failure and failure["attempt"] == p["attempt"]:
        end += f" (exit {failure['exit_code']})"
    return end


def exit_code_meaning(code: int) -> str:
    """``3``, or ``137 (killed by SIGKILL)`` for a shell-convention death by signal."""
    import signal

    if 128 < code < 128 + 65:
        try:
            return f"{code} (killed by {signal.Signals(code - 128).name})"
        except ValueError:
            pass
    return str(code)


def failure_block(job: dict[str, Any]) -> Text | None:
    """The latest non-zero exit of the job's command: its exit code and the last lines of
    its log, or ``None`` (no failure recorded, or the job succeeded after it)."""
    failure = job.get("command_failure")
    if not failure or job["state"] == "succeeded":
        return None
    text = Text(f"attempt {failure['attempt']}: the command exited with code "
                f"{exit_code_meaning(failure['exit_code'])} at {_time(failure['at'])}",
                style="bold red")
    if failure["log_tail"]:
        text.append(f"\nlast {plural(len(failure['log_tail']), 'line')} of its log "
                    f"(all of it: schedctl logs {job['id']}):", style="red")
        for line in failure["log_tail"]:
            text.append(f"\n  {line}", style="dim")
    else:
        text.append("\n(it printed nothing)", style="red")
    return text


def _billed_hours(p: dict[str, Any]) -> float:
    """Market hours a placement has been billed (mirrors ``Placement.billed_hours``)."""
    if not p.get("started_at"):
        return 0.0
    start = datetime.fromisoformat(p["started_at"])
    end = datetime.fromisoformat(p["ended_at"]) if p.get("ended_at") else datetime.now(start.tzinfo)
    return max(0.0, (end - start).total_seconds()) * p.get("time_scale", 1.0) / 3600


def job_panel(job: dict[str, Any], last_events: int | None = None,
              with_placements: bool = True) -> Panel:
    head = Text.assemble((job["id"], "bold"), "  ", state_text(job["state"]))
    if job.get("waiting_reason") and job["state"] not in TERMINAL_STATES:
        head.append(f"\n{job['waiting_reason']}", style="yellow")
    parts: list[Any] = [head, money_line(job)]
    failure = failure_block(job)
    if failure is not None:
        parts.append(failure)
    parts.append(timeline(job, last_events))
    if with_placements and _all_placements(job):
        parts.append(placements(job))
    return Panel(Group(*parts), title=job["spec"]["name"], box=box.ROUNDED)


def jobs_table(jobs: list[dict[str, Any]], width: int | None = None) -> Table:
    """``schedctl list``: the id (what users type next) and state are always shown in full."""
    columns = [Column("id", "left"), Column("state", "left"), Column("tries", drop=2),
               Column("last offer", "left", drop=4, wrap=True), Column("cost"),
               Column("on-demand", drop=3), Column("created", drop=1)]
    rows = []
    for job in jobs:
        placed = _all_placements(job)
        offer = "-"
        if placed:
            o = placed[-1]["offer"]
            offer = f"{o['provider']}/{o['zone']} {o['instance_type']}"
        rows.append([job["id"], state_text(job["state"]), str(job["attempt"]), offer,
                     _usd(job["derived"]["cost_usd"]), _usd(job["derived"]["on_demand_cost_usd"]),
                     _time(job["created_at"])])
    return fitted_table("jobs", columns, rows, width, expand=True)


def offers_table(rows: list[dict[str, Any]], market: str | None = None) -> Table:
    table = new_table("offers, USD/hour (risk: monthly interruption frequency; age: since "
                      "the price started)", expand=False)
    table.add_column("GPU", no_wrap=True)
    table.add_column("VRAM", justify="right", no_wrap=True)
    table.add_column("provider/zone", no_wrap=True)
    table.add_column("instance type", no_wrap=True)
    if market != "spot":
        table.add_column("on-demand", justify="right", no_wrap=True)
    if market != "on-demand":
        table.add_column("spot", justify="right", no_wrap=True)
        table.add_column("risk", justify="right", no_wrap=True)
    table.add_column("age", justify="right", no_wrap=True)  # of the price: since it started
    for r in rows:
        cells = [f"{r['gpu_count']}x {r['gpu_model']}", f"{r['vram_gib']:.4g}G",
                 f"{r['provider']}/{r['zone']}", r["instance_type"]]
        if market != "spot":
            cells.append(_usd(r["on_demand_usd_per_hour"], 3))
        if market != "on-demand":
            risk = "-" if r["interruption_risk"] is None else f"{100 * r['interruption_risk']:.0f}%"
            cells += [_usd(r["spot_usd_per_hour"], 3), risk]
        cells.append(price_age(r.get("price_age_s")))
        table.add_row(*cells)
    return table


def price_age(seconds: float | None) -> str:
    """How long a price has been in force: ``45s``, ``12m``, ``3h``, ``5d``, ``2y`` (``-``
    when unknown)."""
    if seconds is None:
        return "-"
    seconds = max(0.0, float(seconds))
    for unit, size in (("y", 365 * 86400), ("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size:.0f}{unit}"
    return f"{seconds:.0f}s"


def problems_table(problems: list[dict[str, Any]]) -> Group:
    table = new_table()
    table.add_column("field", style="bold", no_wrap=True)
    table.add_column("got")
    table.add_column("problem / allowed", ratio=1)
    for p in problems:
        value = p.get("value")
        if p.get("problem") == "required field is missing":
            shown = "-"
        else:
            shown = "{...}" if isinstance(value, dict) else repr(value)
        table.add_row(str(p.get("field")), shown[:60], str(p.get("problem")))
    return Group(Text("The job spec was refused; nothing was stored.", style="bold red"), table)


def latest_progress(lines: list[str]) -> tuple[int, int, float | None] | None:
    """The newest ``progress step=N total=M loss=X`` line of a job's output, parsed."""
    for line in reversed(lines):
        m = PROGRESS_RE.search(line)
        if m:
            return int(m.group(1)), int(m.group(2)), float(m.group(3)) if m.group(3) else None
    return None


# ----- price history, plans, cost reports -------------------------------------------------------
def _num(value: float | None, digits: int = 4) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _price(value: float | None) -> str:
    """A price in 4 significant figures at most 6 characters wide (0.9180, 12.24, 1,234)."""
    if value is None:
        return "-"
    if value >= 1000:
        return f"{value:,.0f}"
    return f"{value:.4g}" if value >= 1 else f"{value:.4f}".rstrip("0").rstrip(".") or "0"


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
        cells += [_price(r[k]) for k in ("min", "p50", "mean", "p90", "max", "last")]
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


def _range(d: dict[str, float] | None, fmt: str) -> str:
    """``expected (low–high)``, or just ``expected`` when the range is a point."""
    if d is None:
        return "never ends"
    mid = fmt.format(d["expected"])
    lo, hi = fmt.format(d["low"]), fmt.format(d["high"])
    return mid if lo == hi == mid else f"{mid} ({lo}–{hi})"


def _where(est: dict[str, Any]) -> str:
    market = "spot" if est["market"] == "spot" else "on-demand"
    return f"{est['provider']}/{est['zone']} {est['instance_type']} {market}"


def plan_panel(plan: dict[str, Any], width: int | None = None) -> Panel:
    """Scenarios and the best offers of ``POST /v1/plans``; a warning when the spec's
    ``budget_usd`` is below an expected cost."""
    inner = (output_width() if width is None else width) - 4  # panel border and padding
    source = {"option": "", "spec": " (the spec's expected_hours)",
              "default": " (default: the spec has no expected_hours; --compute-hours sets it)"}
    head = Text(f"{plan['compute_hours']:g} compute hours"
                f"{source.get(plan.get('compute_hours_source', 'option'), '')} "
                f"({plan['gpu_hours']:g} GPU-hours); prices: history since "
                f"{plan['lookback_since'][:10]}; offers: {plan['offers_source']} "
                f"({plan['eligible']} fit)")
    for problem in plan.get("offers_problems") or []:
        head.append(f"\nnot listed: {problem}", style="yellow")
    budget = plan.get("budget_usd")
    if budget is not None:
        over = [n for n, est in plan["scenarios"].items() if (est or {}).get("over_budget")]
        if over:
            head.append(f"\nover budget: the expected cost of {', '.join(over)} exceeds the "
                        f"spec's budget_usd ${budget:,.2f} (the daemon stops the job at 100 %)",
                        style="bold red")
        elif any(est and "series" in est for est in plan["scenarios"].values()):
            head.append(f"\nbudget ${budget:,.2f} (spec): every scenario's expected cost fits",
                        style="green")
    cols = [Column("scenario / offer", "left", wrap=True), Column("$/h"), Column("risk", drop=1),
            Column("hours"), Column("cost")]
    rows = []
    for name, est in plan["scenarios"].items():
        if not est or "series" not in est:
            rows.append([Text.assemble((name, "bold"), "\n", (est or {}).get("reason", "no offer fits")),
                         "-", "-", "-", "-"])
            continue
        cost = Text(_range(est["cost_usd"], "${:,.2f}"), style="bold red" if est.get("over_budget") else "")
        why = f"\n{est['reason']}" if est.get("reason") else ""  # the policy's, as placed
        rows.append([Text.assemble((name, "bold"), "\n", (_where(est), "dim"), why),
                     _price(est["price_mean"]),
                     f"{100 * est['interruption_risk']:.0f}%",
                     _range(est["duration_hours"], "{:.1f}"), cost])
    scen = fitted_table("scenarios: expected (low–high)", cols, rows, inner, expand=True)
    cols = [Column("offer", "left", wrap=True), Column("GPU", "left", drop=3), Column("$/h"),
            Column("risk", drop=2), Column("rework h", drop=4), Column("cost")]
    rows = []
    for est in plan["best_offers"]:
        rework = "-" if est["rework_hours"] is None else f"{est['rework_hours']:.2f}"
        prices = _price(est["price_mean"])
        if est["price_p10"] != est["price_p90"]:
            prices += f" ({_price(est['price_p10'])}–{_price(est['price_p90'])})"
        rows.append([_where(est), f"{est['gpu_count']}x {est['gpu_model']}", prices,
                     f"{100 * est['interruption_risk']:.0f}%", rework,
                     Text(_range(est["cost_usd"], "${:,.2f}"),
                          style="bold red" if est.get("over_budget") else "")])
    best = fitted_table("five best offers by expected cost ($/h: mean, p10–p90)", cols, rows,
                        inner, expand=True)
    a = plan["assumptions"]
    foot = Text(f"rework: each interruption loses half a checkpoint sync interval "
                f"({a['sync_interval_s']:g} s) plus {a['restart_overhead_h']:g} h to restart; "
                f"risk = monthly interruption frequency", style="dim")
    return Panel(Group(head, scen, best, foot), title=f"plan: {plan['job']}", box=box.ROUNDED)


def cost_report(report: dict[str, Any], width: int | None = None) -> Group:
    """Jobs and totals of ``GET /v1/cost-report``; the job id is never cut."""
    cols = [Column("job", "left"), Column("state", "left", drop=3), Column("compute", drop=5),
            Column("storage", drop=7), Column("transfer", drop=6), Column("total"),
            Column("GPU-h", drop=4), Column("$/GPU-h", drop=8), Column("on-demand", drop=2),
            Column("saved", drop=1)]
    rows = []
    for r in report["jobs"] + [dict(report["totals"], job="all", state="")]:
        saved = "-" if r.get("savings_pct") is None else f"{r['savings_pct']:.1f}%"
        rows.append([r["job"], r["state"], _usd_cents(r["compute_usd"]), _usd(r["storage_usd"], 4),
                     _usd(r["transfer_usd"], 4), _usd_cents(r["total_usd"]),
                     f"{r['gpu_hours']:.2f}", _usd(r["usd_per_gpu_hour"], 3),
                     _usd_cents(r["on_demand_usd"]), saved])
    table = fitted_table("cost report (USD; compute in market hours)", cols, rows, width,
                         expand=True)
    p = report["prices"]
    note = Text(f"storage ${p['storage_usd_per_gb_month']}/GB-month, transfer "
                f"${p['transfer_usd_per_gb']}/GB, estimated from checkpoint manifests", style="dim")
    return Group(table, note)
