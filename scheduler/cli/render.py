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
    "failed": "bold red", "cancelled": "dim",
}
TERMINAL_STATES = ("succeeded", "failed", "cancelled")
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


def job_panel(job: dict[str, Any], last_events: int | None = None) -> Panel:
    head = Text.assemble((job["id"], "bold"), "  ", state_text(job["state"]))
    if job.get("waiting_reason") and job["state"] not in TERMINAL_STATES:
        head.append(f"\n{job['waiting_reason']}", style="yellow")
    parts: list[Any] = [head, money_line(job), timeline(job, last_events)]
    if _all_placements(job):
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
