"""Rich renderings of jobs and offers for the CLI. Tables use light borders and short columns
so they stay readable in an 80-column terminal."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from rich import box
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


def _time(iso: str | None) -> str:
    if not iso:
        return "-"
    return datetime.fromisoformat(iso).strftime("%H:%M:%S")


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def state_text(state: str) -> Text:
    return Text(state, style=STATE_STYLE.get(state, ""))


def _table(title: str | None = None, expand: bool = True) -> Table:
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
            text.append(f" · saved {d['savings_pct']:.1f}%", style="bold green")
    scales = {p.get("time_scale", 1.0) for p in _all_placements(job)}
    scale = max(scales, default=1.0)
    if scale != 1.0:
        text.append(f"\n(replayed market: 1 s of wall time = {scale:g} s of market time; "
                    "costs are in market hours)", style="dim")
    return text


def _all_placements(job: dict[str, Any]) -> list[dict[str, Any]]:
    return job["placements"] + ([job["placement"]] if job["placement"] else [])


def timeline(job: dict[str, Any], last: int | None = None) -> Table:
    table = _table("timeline")
    table.add_column("time", no_wrap=True)
    table.add_column("state", no_wrap=True)
    table.add_column("event", ratio=1)
    events = job["events"][-last:] if last else job["events"]
    for ev in events:
        table.add_row(_time(ev["at"]), state_text(ev["state"]), ev["message"])
    return table


def placements(job: dict[str, Any]) -> Table:
    table = _table("placements")
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("where", ratio=1)
    table.add_column("market", no_wrap=True)
    table.add_column("$/h", justify="right", no_wrap=True)
    table.add_column("hours", justify="right", no_wrap=True)
    table.add_column("end", no_wrap=True)
    table.add_column("cost", justify="right", no_wrap=True)
    for p in _all_placements(job):
        o = p["offer"]
        table.add_row(
            str(p["attempt"]), f"{o['provider']}/{o['zone']} {o['instance_type']}",
            o["market"], _usd(o["price_usd_per_hour"], 3), f"{_billed_hours(p):.2f}",
            p.get("end_reason") or ("running" if p.get("instance_id") else "launching"),
            _usd(_billed_hours(p) * o["price_usd_per_hour"]),
        )
    return table


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
    parts: list[Any] = [head, money_line(job), timeline(job, last_events)]
    if with_placements and _all_placements(job):
        parts.append(placements(job))
    return Panel(Group(*parts), title=job["spec"]["name"], box=box.ROUNDED)


def jobs_table(jobs: list[dict[str, Any]]) -> Table:
    table = _table("jobs")
    for col in ("id", "state", "tries", "last offer", "cost", "on-demand", "created"):
        table.add_column(col, no_wrap=col not in ("id", "last offer"))
    for job in jobs:
        placed = _all_placements(job)
        offer = "-"
        if placed:
            o = placed[-1]["offer"]
            offer = f"{o['provider']}/{o['zone']} {o['instance_type']}"
        table.add_row(job["id"], state_text(job["state"]), str(job["attempt"]), offer,
                      _usd(job["derived"]["cost_usd"]), _usd(job["derived"]["on_demand_cost_usd"]),
                      _time(job["created_at"]))
    return table


def offers_table(rows: list[dict[str, Any]], market: str | None = None) -> Table:
    table = _table("offers, USD/hour (risk: monthly interruption frequency)", expand=False)
    table.add_column("GPU", no_wrap=True)
    table.add_column("VRAM", justify="right", no_wrap=True)
    table.add_column("provider/zone", no_wrap=True)
    table.add_column("instance type", no_wrap=True)
    if market != "spot":
        table.add_column("on-demand", justify="right", no_wrap=True)
    if market != "on-demand":
        table.add_column("spot", justify="right", no_wrap=True)
        table.add_column("risk", justify="right", no_wrap=True)
    for r in rows:
        cells = [f"{r['gpu_count']}x {r['gpu_model']}", f"{r['vram_gib']:g}G",
                 f"{r['provider']}/{r['zone']}", r["instance_type"]]
        if market != "spot":
            cells.append(_usd(r["on_demand_usd_per_hour"], 3))
        if market != "on-demand":
            risk = "-" if r["interruption_risk"] is None else f"{100 * r['interruption_risk']:.0f}%"
            cells += [_usd(r["spot_usd_per_hour"], 3), risk]
        table.add_row(*cells)
    return table


def problems_table(problems: list[dict[str, Any]]) -> Group:
    table = _table()
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
    table = _table(title, expand=False)
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
    return Text(
        f"read {report['files']} files, {report['records']:,} records (skipped: {skipped})\n"
        f"{report['observations']:,} observations, {report['unique']:,} distinct "
        f"({report['observations'] - report['unique']:,} repeated across files), "
        f"{report['series']:,} series, {(report['first'] or '-')[:19]} → {(report['last'] or '-')[:19]}\n"
        f"stored {report['stored']:,} price changes; {report['unchanged']:,} repeated the price in "
        f"force; {report['late']:,} older than rolled-up history (dropped); "
        f"{report['compacted']:,} series rolled up; {report['hardware']:,} instance types learned")


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


def plan_panel(plan: dict[str, Any]) -> Panel:
    """Scenarios and the best offers of ``POST /v1/plans``."""
    head = Text(f"{plan['compute_hours']:g} compute hours ({plan['gpu_hours']:g} GPU-hours); "
                f"prices: history since {plan['lookback_since'][:10]}; offers: "
                f"{plan['offers_source']} ({plan['eligible']} fit)")
    scen = _table("scenarios: expected (low–high)")
    scen.add_column("scenario / offer", ratio=1)
    for col in ("$/h", "risk", "hours", "cost"):
        scen.add_column(col, no_wrap=True, justify="right")
    for name, est in plan["scenarios"].items():
        if not est or "series" not in est:
            scen.add_row(Text.assemble((name, "bold"), "\n", (est or {}).get("reason", "no offer fits")),
                         "-", "-", "-", "-")
            continue
        scen.add_row(Text.assemble((name, "bold"), "\n", (_where(est), "dim")), _price(est["price_mean"]),
                     f"{100 * est['interruption_risk']:.0f}%",
                     _range(est["duration_hours"], "{:.1f}"), _range(est["cost_usd"], "${:,.2f}"))
    best = _table("five best offers by expected cost ($/h: mean, p10–p90)")
    best.add_column("offer", ratio=1)
    for col in ("GPU", "$/h", "risk", "rework h", "cost"):
        best.add_column(col, no_wrap=True, justify="left" if col == "GPU" else "right")
    for est in plan["best_offers"]:
        rework = "-" if est["rework_hours"] is None else f"{est['rework_hours']:.2f}"
        prices = _price(est["price_mean"])
        if est["price_p10"] != est["price_p90"]:
            prices += f" ({_price(est['price_p10'])}–{_price(est['price_p90'])})"
        best.add_row(_where(est), f"{est['gpu_count']}x {est['gpu_model']}", prices,
                     f"{100 * est['interruption_risk']:.0f}%", rework,
                     _range(est["cost_usd"], "${:,.2f}"))
    a = plan["assumptions"]
    foot = Text(f"rework: each interruption loses half a checkpoint sync interval "
                f"({a['sync_interval_s']:g} s) plus {a['restart_overhead_h']:g} h to restart; "
                f"risk = monthly interruption frequency", style="dim")
    return Panel(Group(head, scen, best, foot), title=f"plan: {plan['job']}", box=box.ROUNDED)


def cost_report(report: dict[str, Any]) -> Group:
    """Jobs and totals of ``GET /v1/cost-report``."""
    table = _table("cost report (USD; compute in market hours)")
    for col in ("job", "state", "compute", "storage", "transfer", "total", "GPU-h", "$/GPU-h",
                "on-demand", "saved"):
        table.add_column(col, no_wrap=col != "job", justify="left" if col in ("job", "state") else "right")
    for r in report["jobs"] + [dict(report["totals"], job="all", state="")]:
        saved = "-" if r.get("savings_pct") is None else f"{r['savings_pct']:.1f}%"
        table.add_row(r["job"], r["state"], _usd(r["compute_usd"], 2), _usd(r["storage_usd"], 4),
                      _usd(r["transfer_usd"], 4), _usd(r["total_usd"], 2), f"{r['gpu_hours']:.2f}",
                      _usd(r["usd_per_gpu_hour"], 3), _usd(r["on_demand_usd"], 2), saved)
    p = report["prices"]
    note = Text(f"storage ${p['storage_usd_per_gb_month']}/GB-month, transfer "
                f"${p['transfer_usd_per_gb']}/GB, estimated from checkpoint manifests", style="dim")
    return Group(table, note)
