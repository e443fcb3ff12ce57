"""Rich renderings of jobs and offers for the CLI."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

STATE_STYLE = {
    "pending": "yellow", "provisioning": "cyan", "running": "green",
    "checkpointing": "magenta", "migrating": "magenta", "succeeded": "bold green",
    "failed": "bold red", "cancelled": "dim",
}
PROGRESS_RE = re.compile(r"progress step=(\d+) total=(\d+)(?: loss=([0-9.]+))?")


def _usd(value: float | None, digits: int = 4) -> str:
    return "-" if value is None else f"${value:,.{digits}f}"


def _time(iso: str | None) -> str:
    if not iso:
        return "-"
    return datetime.fromisoformat(iso).strftime("%H:%M:%S")


def state_text(state: str) -> Text:
    return Text(state, style=STATE_STYLE.get(state, ""))


def money_line(job: dict[str, Any]) -> Text:
    d = job["derived"]
    text = Text(f"cost so far {_usd(d['cost_usd'])} for {d['billed_hours']:.2f} instance-hours")
    if d["on_demand_cost_usd"] is not None:
        text.append(f"  ·  all on-demand would have cost {_usd(d['on_demand_cost_usd'])}")
        if d["savings_pct"] is not None:
            text.append(f"  ·  saved {d['savings_pct']:.1f}%", style="bold green")
    return text


def timeline(job: dict[str, Any], last: int | None = None) -> Table:
    table = Table(title="timeline", expand=True, show_lines=False)
    table.add_column("time", no_wrap=True)
    table.add_column("state", no_wrap=True)
    table.add_column("event")
    table.add_column("$/h", justify="right", no_wrap=True)
    events = job["events"][-last:] if last else job["events"]
    for ev in events:
        table.add_row(_time(ev["at"]), state_text(ev["state"]), ev["message"],
                      _usd(ev.get("price_usd_per_hour")) if ev.get("price_usd_per_hour") else "")
    return table


def placements(job: dict[str, Any]) -> Table:
    table = Table(title="placements", expand=True)
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("where")
    table.add_column("market", no_wrap=True)
    table.add_column("$/h", justify="right", no_wrap=True)
    table.add_column("ran", no_wrap=True)
    table.add_column("end", no_wrap=True)
    table.add_column("cost", justify="right", no_wrap=True)
    rows = job["placements"] + ([job["placement"]] if job["placement"] else [])
    for p in rows:
        o = p["offer"]
        table.add_row(
            str(p["attempt"]),
            f"{o['provider']}/{o['zone']}\n{o['instance_type']} ({o['gpu_count']}x {o['gpu_model']})",
            o["market"], _usd(o["price_usd_per_hour"]),
            f"{_time(p.get('started_at'))}\n{_time(p.get('ended_at'))}",
            p.get("end_reason") or ("running" if p.get("instance_id") else ""),
            _usd(_placement_cost(p)),
        )
    return table


def _placement_cost(p: dict[str, Any]) -> float | None:
    if not p.get("started_at"):
        return 0.0
    start = datetime.fromisoformat(p["started_at"])
    end = datetime.fromisoformat(p["ended_at"]) if p.get("ended_at") else datetime.now(start.tzinfo)
    hours = (end - start).total_seconds() * p.get("time_scale", 1.0) / 3600
    return hours * p["offer"]["price_usd_per_hour"]


def job_panel(job: dict[str, Any], last_events: int | None = None) -> Panel:
    head = Text.assemble((job["id"], "bold"), "  ", state_text(job["state"]))
    if job.get("waiting_reason"):
        head.append(f"  ({job['waiting_reason']})", style="yellow")
    return Panel(Group(head, money_line(job), timeline(job, last_events), placements(job)),
                 title=job["spec"]["name"])


def jobs_table(jobs: list[dict[str, Any]]) -> Table:
    table = Table(title="jobs")
    for col in ("id", "state", "attempt", "offer", "cost", "on-demand", "created"):
        table.add_column(col)
    for job in jobs:
        p = job["placement"]
        offer = f"{p['offer']['provider']}/{p['offer']['zone']} {p['offer']['instance_type']}" if p else "-"
        table.add_row(job["id"], state_text(job["state"]), str(job["attempt"]), offer,
                      _usd(job["derived"]["cost_usd"]), _usd(job["derived"]["on_demand_cost_usd"]),
                      _time(job["created_at"]))
    return table


def offers_table(rows: list[dict[str, Any]]) -> Table:
    table = Table(title="offers (USD per hour)")
    for col, justify in (("GPU", "left"), ("count", "right"), ("VRAM GiB", "right"),
                         ("provider", "left"), ("region/zone", "left"), ("instance type", "left"),
                         ("on-demand $/h", "right"), ("spot $/h", "right"),
                         ("interruption risk", "right")):
        table.add_column(col, justify=justify)
    for r in rows:
        risk = "-" if r["interruption_risk"] is None else f"{100 * r['interruption_risk']:.1f}%/mo"
        table.add_row(r["gpu_model"], str(r["gpu_count"]), f"{r['vram_gib']:g}", r["provider"],
                      f"{r['region']}/{r['zone']}", r["instance_type"],
                      _usd(r["on_demand_usd_per_hour"], 3), _usd(r["spot_usd_per_hour"], 3), risk)
    return table


def problems_table(problems: list[dict[str, Any]]) -> Table:
    table = Table(title="the job spec was refused; nothing was stored", title_style="bold red")
    table.add_column("field", style="bold")
    table.add_column("got")
    table.add_column("problem / allowed")
    for p in problems:
        value = p.get("value")
        shown = "{...}" if isinstance(value, dict) else repr(value)
        table.add_row(str(p.get("field")), shown[:60], str(p.get("problem")))
    return table


def latest_progress(lines: list[str]) -> tuple[int, int, float | None] | None:
    """The newest ``progress step=N total=M loss=X`` line of a job's output, parsed."""
    for line in reversed(lines):
        m = PROGRESS_RE.search(line)
        if m:
            return int(m.group(1)), int(m.group(2)), float(m.group(3)) if m.group(3) else None
    return None
