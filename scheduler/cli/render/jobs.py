"""Jobs as the CLI shows them: ``status`` (a panel with the money line, the command's failure,
the timeline and the placements), ``status --watch`` lines, ``list``, a refused spec's
problems, and the training progress the demo follows."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from rich import box
from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from scheduler.cli.render.tables import (
    TERMINAL_STATES,
    Column,
    clock,
    count,
    fitted_table,
    new_table,
    per_1k,
    percent,
    plural,
    short_price,
    state_text,
    usd,
)

PROGRESS_RE = re.compile(r"progress step=(\d+) total=(\d+)(?: loss=([0-9.]+))?")


def money_line(job: dict[str, Any]) -> Text:
    d = job["derived"]
    label = "cost" if job["state"] in TERMINAL_STATES else "cost so far"
    hours = d.get("instance_hours", d["billed_hours"])  # a gang's counts every node
    text = Text(f"{label} {usd(d['cost_usd'])} for {hours:.2f} instance-hours")
    work = d.get("work") or {}
    if work.get("cost_so_far_per_1k_usd") is not None:
        text.append(f" ({per_1k(work['cost_so_far_per_1k_usd'])} per 1k {work['unit']} done)")
    if d["on_demand_cost_usd"] is not None:
        text.append(f" · all on-demand: {usd(d['on_demand_cost_usd'])}")
        if d["savings_pct"] is not None:
            text.append(f" · saved {percent(d['savings_pct'])}", style="bold green")
    scales = {p.get("time_scale", 1.0) for p in _all_placements(job)}
    scale = max(scales, default=1.0)
    if scale != 1.0:
        text.append(f"\n(replayed market: 1 s of wall time = {scale:g} s of market time; "
                    "costs are in market hours)", style="dim")
    return text


def work_line(job: dict[str, Any]) -> Text | None:
    """The job's work and what it costs on its offer (``derived.work`` of the job summary,
    :class:`scheduler.services.work.WorkCost`), e.g. ``work: 200k of 1M samples · 200k
    samples/h on 1x A100-80GB (measured) at $2.0000/h = $0.01 per 1k samples · 4.0 h, $8.00
    to finish``; ``None`` for a job with no work unit (nothing changes for it)."""
    w = (job.get("derived") or {}).get("work")
    if not w:
        return None
    unit = w["unit"]
    text = Text(f"work: {count(w['done'])}"
                + (f" of {count(w['total'])}" if w.get("total") is not None else "")
                + f" {unit}")
    if w.get("rate_units_per_h") is not None:
        gpus = f"{w['gpu_count']}x {w['gpu_model']}"
        nodes = ((job.get("spec") or {}).get("resources") or {}).get("nodes") or 1
        each = f" × {nodes} nodes" if nodes > 1 else ""
        text.append(f" · {count(w['rate_units_per_h'])} {unit}/h on {gpus}{each} "
                    f"({w['rate_source']}) at {usd(w['price_usd_per_hour'])}/h{each} = ")
        text.append(f"{per_1k(w['cost_per_1k_usd'])} per 1k {unit}", style="bold")
        if w.get("hours_to_finish") is not None and job["state"] not in TERMINAL_STATES:
            text.append(f" · {w['hours_to_finish']:.1f} h, "
                        f"{usd(w['cost_to_finish_usd'], 2)} to finish")
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
        table.add_row(clock(ev["at"]), state_text(ev["state"]), ev["message"])
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
        nodes = d.get("node_count") or len(p.get("nodes") or []) or 1
        table.add_row(
            str(p["attempt"]), f"{o['provider']}/{o['zone']} {o['instance_type']}"
            + (f" ×{nodes}" if nodes > 1 else ""),
            o["market"], usd(d["price_usd_per_hour"], 3), f"{d['billed_hours']:.2f}",
            _placement_end(p, job.get("command_failure")), usd(d["cost_usd"]),
        )
    return table


def gang_nodes(gang: dict[str, Any], now: datetime | None = None) -> Table:
    """A gang's nodes (``derived.gang`` of the job summary,
    :func:`scheduler.services.jobs.gang_nodes`): rank, instance, zone, state, the last
    heartbeat (UTC clock and its age at ``now``, default the wall clock) and what each node
    has cost. Every cell is plain text (an instance id or address is never read as markup)."""
    ended = " (ended)" if gang.get("ended") else ""
    table = new_table(f"nodes of attempt {gang['attempt']}{ended}", expand=False)
    for name, justify in (("rank", "right"), ("instance", "left"), ("zone", "left"),
                          ("address", "left"), ("state", "left"), ("last heartbeat", "left"),
                          ("$ per node", "right")):
        table.add_column(name, justify=justify, no_wrap=True)
    now = now or datetime.now(UTC)
    for node in gang["nodes"]:
        table.add_row(Text(str(node["rank"])), Text(node.get("instance_id") or "-"),
                      Text(node.get("zone") or "-"), Text(node.get("address") or "-"),
                      state_text(node["state"]), Text(_heartbeat(node.get("last_heartbeat"), now)),
                      Text(usd(node["cost_usd"])))
    return table


def _heartbeat(iso: str | None, now: datetime) -> str:
    if not iso:
        return "-"
    age_s = max(0, int((now - datetime.fromisoformat(iso)).total_seconds()))
    return f"{clock(iso)} ({age_s} s ago)"


def gang_total(gang: dict[str, Any]) -> Text:
    """``gang of 2 nodes: $1.0000 in all`` (the placement's cost, every node counted)."""
    return Text(f"gang of {plural(gang['node_count'], 'node')}: {usd(gang['cost_usd'])} "
                "in all", style="bold")


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
                f"{exit_code_meaning(failure['exit_code'])} at {clock(failure['at'])}",
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
    work = work_line(job)
    if work is not None:
        parts.append(work)
    failure = failure_block(job)
    if failure is not None:
        parts.append(failure)
    parts.append(timeline(job, last_events))
    if with_placements and _all_placements(job):
        parts.append(placements(job))
    gang = (job.get("derived") or {}).get("gang")
    if gang:
        parts.extend([gang_nodes(gang), gang_total(gang)])
    return Panel(Group(*parts), title=job["spec"]["name"], box=box.ROUNDED)


def jobs_table(jobs: list[dict[str, Any]], width: int | None = None) -> Table:
    """``schedctl list``: the id (what users type next) and state are always shown in full."""
    columns = [Column("id", "left"), Column("state", "left"), Column("tries", drop=2),
               Column("last offer", "left", drop=5, wrap=True), Column("$/h", drop=6),
               Column("cost"), Column("$/1k units", drop=4), Column("on-demand", drop=3),
               Column("created", drop=1), Column("owner", "left", drop=2)]
    rows = []
    for job in jobs:
        placed = _all_placements(job)
        offer, price = "-", "-"
        if placed:
            o = placed[-1]["offer"]
            offer = f"{o['provider']}/{o['zone']} {o['instance_type']}"
            costs = job["derived"].get("placement_costs") or []
            price = short_price(costs[-1]["price_usd_per_hour"] if costs
                                else o["price_usd_per_hour"])
        rows.append([job["id"], state_text(job["state"]), str(job["attempt"]), offer, price,
                     usd(job["derived"]["cost_usd"]), _per_1k_cell(job["derived"].get("work")),
                     usd(job["derived"]["on_demand_cost_usd"]), clock(job["created_at"]),
                     job["spec"]["owner"]])
    return fitted_table("jobs", columns, rows, width, expand=True)


def _per_1k_cell(work: dict[str, Any] | None) -> str:
    """``$0.01/1k samples`` on the job's offer (else what the work done cost per 1k), ``-``
    without a cost per unit."""
    if not work:
        return "-"
    value = work.get("cost_per_1k_usd")
    if value is None:
        value = work.get("cost_so_far_per_1k_usd")
    return "-" if value is None else f"{per_1k(value)}/1k {work['unit']}"


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
