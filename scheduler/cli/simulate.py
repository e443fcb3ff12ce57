"""``schedctl simulate``: replay a market through the scheduling policies on a virtual clock.

Nothing is launched: the market file (the same one ``schedctl daemon --market`` serves) is read
with :func:`providers.replay.market.load_market`, the job spec chooses the offers, and every
policy decides through the same ``policies/`` functions the daemon uses.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import typer
import yaml
from pydantic import ValidationError
from rich.table import Table

from scheduler.cli import render
from scheduler.cli.app import app, console, err
from scheduler.models import JobSpec, describe_validation_error

POLICY_HELP = ("comma-separated: arbiter, greedy, uniform-progress, on-demand, "
               "skypilot-failover, skypilot-eager, skypilot-eager+od, or 'all'")


def _load_spec(path: Path) -> JobSpec:
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as exc:
        err.print(f"[bold red]error:[/] {path}: cannot read: {exc.strerror or exc}")
        raise typer.Exit(2)
    except yaml.YAMLError as exc:
        err.print(f"[bold red]error:[/] {path}: not valid YAML: {exc}")
        raise typer.Exit(2)
    try:
        return JobSpec.model_validate(raw)
    except ValidationError as exc:
        err.print(render.problems_table(describe_validation_error(exc)))
        raise typer.Exit(2)


def _table(rows: list[dict], title: str) -> Table:
    table = Table(title=title)
    cols = [("policy", "policy", "{}"), ("USD", "cost_usd_mean", "{:.2f}"),
            ("÷OD", "cost_mean", "{:.3f}"), ("end h", "finish_h", "{:.1f}"),
            ("late", "misses", "{}"), ("spot h", "spot_h", "{:.1f}"),
            ("OD h", "on_demand_h", "{:.1f}"), ("moves", "migrations", "{:.1f}"),
            ("reclaims", "preemptions", "{:.1f}")]
    if rows and "gap_to_optimum" in rows[0]:
        cols.append(("vs opt", "gap_to_optimum", "{:+.1%}"))
    for head, _, _ in cols:
        if head == "policy":
            table.add_column(head, no_wrap=True, min_width=17)
        else:
            table.add_column(head, justify="right")
    for row in rows:
        table.add_row(*[fmt.format(row[key]) for _, key, fmt in cols])
    return table


@app.command()
def simulate(
    job_file: Path = typer.Argument(..., help="job spec YAML (its constraints choose the offers)"),
    market: Path = typer.Option(..., "--market", help="replay market YAML"),
    compute_hours: float = typer.Option(..., help="compute the job needs, hours (> 0)"),
    deadline_hours: float | None = typer.Option(
        None, help="deadline, hours after the simulated start (default: none)"),
    restart_overhead_hours: float = typer.Option(
        0.2, help="launch + setup + restore of each new instance, hours"),
    checkpoint_interval_hours: float = typer.Option(
        0.0, help="progress between checkpoints, hours (0: continuous)"),
    move_extra_hours: float = typer.Option(0.0, help="checkpoint size ÷ bandwidth, hours"),
    budget_usd: float = typer.Option(math.inf, help="job budget, USD (alerts at 80/90/100 %)"),
    start_hours: float | None = typer.Option(
        None, help="market hour of the start (default: the market's start_offset_hours)"),
    runs: int = typer.Option(1, help="number of runs; more than 1 draws random start hours"),
    seed: int = typer.Option(0, help="random seed for the start hours"),
    policy: str = typer.Option("all", help=POLICY_HELP),
    optimum: bool = typer.Option(True, help="also compute the omniscient optimum"),
    tick_seconds: float | None = typer.Option(None, help="tick length (default: trace gap)"),
    as_json: bool = typer.Option(False, "--json", help="print JSON rows instead of a table"),
) -> None:
    """Simulate a job on a replayed market under our policy and the baselines."""
    spec = _load_spec(job_file)
    if spec.deadline is not None and deadline_hours is None:
        err.print("[bold red]error:[/] the job spec has a deadline: give --deadline-hours (hours "
                  "after the simulated start); an absolute time means nothing on a replayed clock")
        raise typer.Exit(2)
    from providers.replay.market import MarketError
    from scheduler.simulator.engine import SimJob
    from scheduler.simulator.market import SimulationError
    try:
        job = SimJob(compute_hours, deadline_hours, restart_overhead_hours,
                     checkpoint_interval_hours, move_extra_hours, budget_usd)
        comp, replay, starts, start_h = _compare(spec, market, job, policy, start_hours, runs,
                                                 seed, optimum, tick_seconds)
    except (MarketError, SimulationError) as exc:
        err.print(f"[bold red]error:[/] {exc}")
        raise typer.Exit(2)
    from scheduler.simulator.runner import summary_row
    rows = [summary_row(name, comp) for name in comp.results]
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    title = (f"{spec.name}: {compute_hours:g} h of compute on {replay.name}"
             f"{f', deadline {deadline_hours:g} h' if deadline_hours else ''}; "
             f"{len(starts)} run(s) from market hour {start_h:g}"
             f"{' (random starts)' if runs > 1 else ''}")
    console.print(_table(rows, title))
    console.print("USD: mean cost; ÷OD: cost / all on-demand; end h: finish hour; late: runs past "
                  "the deadline; moves: migrations; reclaims: preemptions; vs opt: above the "
                  "omniscient optimum", style="dim")
    _print_alerts(comp, budget_usd)


def _compare(spec: JobSpec, market: Path, job, policy: str, start_hours: float | None,
             runs: int, seed: int, optimum: bool, tick_seconds: float | None):
    """Load the market, build its arrays around the start(s) and run the policies."""
    from providers.replay.market import load_market
    from scheduler.simulator.market import build_sim_market
    from scheduler.simulator.runner import compare, policy_registry

    replay = load_market(market)
    names = list(policy_registry()) if policy == "all" else \
        [p.strip() for p in policy.split(",") if p.strip()]
    deadline = job.deadline_h or 0.0
    horizon_h = max(3 * job.compute_h, deadline + 2 * job.compute_h)
    tick_h = (tick_seconds or _tick_s(replay)) / 3600
    max_ticks = math.ceil(horizon_h / tick_h)
    start_h = replay.start_offset_hours if start_hours is None else start_hours
    starts = _starts(start_h, runs, seed, tick_h, horizon_h)
    sim = build_sim_market(replay, spec, int(starts.max()) + max_ticks + 1, tick_seconds)
    comp = compare(sim, job, starts, names, max_ticks, with_optimum=optimum)
    return comp, replay, starts, start_h


def _tick_s(replay) -> float:
    from scheduler.simulator.market import default_tick_s
    return default_tick_s(replay)


def _starts(start_h: float, runs: int, seed: int, tick_h: float, horizon_h: float) -> np.ndarray:
    if runs < 1:
        raise typer.BadParameter("--runs must be >= 1")
    first = int(round(start_h / tick_h))
    if runs == 1:
        return np.array([first])
    span = int(round(max(horizon_h, 24.0) * 4 / tick_h))
    return first + np.random.default_rng(seed).integers(0, span, runs)


def _print_alerts(comp, budget_usd: float) -> None:
    if not math.isfinite(budget_usd):
        return
    for name, result in comp.results.items():
        for run, scope, threshold, at_h in result.alerts:
            console.print(f"{name}: run {run}: {scope} budget at {threshold:.0%} "
                          f"after {at_h:.2f} h" + ("; checkpointed and stopped"
                                                   if threshold >= 1 and name == "arbiter" else ""))
