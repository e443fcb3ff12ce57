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

from core.models import JobSpec, describe_validation_error
from scheduler.cli import render
from scheduler.cli.app import app, console, err, print_error

POLICY_HELP = ("comma-separated: arbiter, greedy, uniform-progress, "
               "uniform-progress-no-condition2, on-demand, skypilot-failover, skypilot-eager, "
               "skypilot-eager+od, cheapest-per-hour, arbiter-per-hour (ours, blind to the "
               "offers' speeds), or 'all' (arbiter-per-hour only where speeds differ)")


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


def _table(rows: list[dict], title: str, budgeted: bool = False,
           width: int | None = None) -> Table:
    """Policies and their mean outcomes; at 80 columns the least telling columns go first."""
    cols = [("policy", "policy", "{}", 0), ("USD", "cost_usd_mean", "{:,.2f}", 0),
            ("÷OD", "cost_mean", "{:.3f}", 0), ("end h", "finish_h", "{:.1f}", 0),
            ("late", "misses", "{}", 0), ("spot h", "spot_h", "{:.1f}", 3),
            ("OD h", "on_demand_h", "{:.1f}", 4), ("moves", "migrations", "{:.1f}", 1),
            ("reclaims", "preemptions", "{:.1f}", 2)]
    if budgeted:
        cols.insert(5, ("stopped", "budget_stopped", "{}", 0))
    if rows and "gap_to_optimum" in rows[0]:
        cols.append(("vs opt", "gap_to_optimum", "{:+.1%}", 0))
    columns = [render.Column(head, "left" if head == "policy" else "right", drop)
               for head, _, _, drop in cols]
    cells = [[_cell(fmt, row[key]) for _, key, fmt, _ in cols] for row in rows]
    return render.fitted_table(title, columns, cells, width)


def _cell(fmt: str, value) -> str:
    """``-`` for a mean over no runs (no run finished: ``nan``)."""
    return "-" if isinstance(value, float) and math.isnan(value) else fmt.format(value)


@app.command()
def simulate(
    job_file: Path = typer.Argument(..., help="job spec YAML (its constraints choose the offers)"),
    market: Path = typer.Option(..., "--market", help="replay market YAML"),
    compute_hours: float | None = typer.Option(
        None, help="compute the job needs, hours on the spec's reference_gpu (> 0; default: "
                   "the spec's work.total at its declared throughput, else expected_hours)"),
    deadline_hours: float | None = typer.Option(
        None, help="deadline, hours after the simulated start (default: none)"),
    restart_overhead_hours: float = typer.Option(
        0.2, help="launch + setup + restore of each new instance, hours"),
    checkpoint_interval_hours: float = typer.Option(
        0.0, help="hours of work on an instance between checkpoints (0: continuous)"),
    move_extra_hours: float = typer.Option(0.0, help="checkpoint size ÷ bandwidth, hours"),
    budget_usd: float | None = typer.Option(
        None, help="job budget, USD (default: the spec's budget_usd); alerts at 80/90 %, "
                   "checkpoint and stop at 100 %"),
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
    compute_hours, budget_usd = _hours_and_budget(spec, compute_hours, deadline_hours,
                                                  budget_usd)
    from providers.replay.market import MarketError
    from scheduler.simulator.market import SimulationError
    from scheduler.simulator.simulate import SimJob
    try:
        job = SimJob(compute_hours, deadline_hours, restart_overhead_hours,
                     checkpoint_interval_hours, move_extra_hours, budget_usd)
        comp, names, replay, starts, start_h = _compare(spec, market, job, policy, start_hours,
                                                        runs, seed, optimum, tick_seconds)
    except (MarketError, SimulationError) as exc:
        print_error(exc)
        raise typer.Exit(2)
    from scheduler.simulator.runner import summary_row
    rows = [summary_row(name, comp) for name in names]
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        for note in _notes(comp):   # stdout stays JSON
            typer.echo(f"note: {note}", err=True)
        return
    title = (f"{spec.name}: {compute_hours:.4g} h of compute (A100-80GB hours) on {replay.name}"
             f"{f', deadline {deadline_hours:g} h' if deadline_hours else ''}"
             f"{f', budget ${budget_usd:,.2f}' if math.isfinite(budget_usd) else ''}; "
             f"{len(starts)} run(s) from market hour {start_h:g}"
             f"{' (random starts)' if runs > 1 else ''}")
    _print_outcomes(title, rows, comp, names, budget_usd)


def _hours_and_budget(spec: JobSpec, compute_hours: float | None, deadline_hours: float | None,
                      budget_usd: float | None) -> tuple[float, float]:
    """The compute in A100-80GB reference-hours (the option, else the spec's ``work.total`` at
    its declared throughput, else its ``expected_hours``; hours on the spec's
    ``reference_gpu`` are converted, :func:`policies.throughput.reference_hours`) and the
    budget in USD (the option, else the spec's, else infinite). Exits 2 when the hours are unknown or the
    spec has an absolute deadline and no ``--deadline-hours`` replaces it."""
    if spec.deadline is not None and deadline_hours is None:
        err.print("[bold red]error:[/] the job spec has a deadline: give --deadline-hours (hours "
                  "after the simulated start); an absolute time means nothing on a replayed clock")
        raise typer.Exit(2)
    from policies.throughput import (
        REFERENCE_GPU,
        WorkModel,
        reference_hours,
        spec_reference_hours,
    )

    # The simulator's speeds are per A100-80GB (the market files' and the GPU table's
    # reference): hours on another reference_gpu are converted by the table's relatives.
    if compute_hours is None:
        compute_hours = spec_reference_hours(spec, REFERENCE_GPU)
    else:
        compute_hours = reference_hours(WorkModel.from_spec(spec), None, compute_hours,
                                        reference=REFERENCE_GPU)
    if compute_hours is None:
        err.print("[bold red]error:[/] compute hours unknown: give --compute-hours, or set "
                  "expected_hours, or work.total with work.throughput in the job spec")
        raise typer.Exit(2)
    if budget_usd is None:
        budget_usd = math.inf if spec.budget_usd is None else spec.budget_usd
    return compute_hours, budget_usd


def _print_outcomes(title: str, rows: list[dict], comp, names: list[str],
                    budget_usd: float) -> None:
    """The policies' table, its legend, the notes and (with a budget) the alerts table."""
    budgeted = math.isfinite(budget_usd)
    console.print(_table(rows, title, budgeted))
    console.print("USD: mean cost; ÷OD: cost / all on-demand (without budget); end h: mean finish "
                  "hour of finished runs; late: runs past the deadline or unfinished; "
                  + ("stopped: runs checkpointed and stopped at 100 % of the budget (cost up to "
                     "there); " if budgeted else "")
                  + "moves: migrations; reclaims: preemptions; vs opt: above the omniscient "
                  "optimum", style="dim")
    for note in _notes(comp):
        console.print(f"note: {note}", highlight=False)
    if budgeted:
        console.print(_alert_table(comp, names, budget_usd))


def _notes(comp) -> list[str]:
    """What the numbers assume (rounded deadline, baseline offer, optimum horizon), and the
    optimum's own mean cost."""
    notes = list(comp.notes)
    if comp.optimum_usd is not None:
        opt = comp.optimum_usd
        finite = np.isfinite(opt)
        if finite.any():
            with np.errstate(invalid="ignore", divide="ignore"):
                norm = float(np.mean(opt[finite] / comp.baseline_usd[finite]))
            ratio = "" if math.isnan(norm) else f", ÷OD {norm:.3f}"
            notes.append(f"omniscient optimum: mean ${float(np.mean(opt[finite])):,.2f}{ratio}"
                         + ("" if finite.all() else
                            f"; {int((~finite).sum())} run(s) cannot finish in time at all"))
        else:
            notes.append("omniscient optimum: no run can finish in time at all")
    return notes


def _compare(spec: JobSpec, market: Path, job, policy: str, start_hours: float | None,
             runs: int, seed: int, optimum: bool, tick_seconds: float | None):
    """Load the market, build its arrays around the start(s) and run the policies."""
    from providers.replay.market import load_market
    from scheduler.simulator.market import build_sim_market
    from scheduler.simulator.runner import OURS_PER_HOUR, compare, policy_registry

    replay = load_market(market)
    deadline = job.deadline_h or 0.0
    tick_h = (tick_seconds or _tick_s(replay)) / 3600
    start_h = replay.start_offset_hours if start_hours is None else start_hours
    slowest = 1.0
    while True:
        # compute_h is reference-hours: on offers slower than the reference it takes longer
        hours = job.compute_h / slowest
        horizon_h = max(3 * hours, deadline + 2 * hours)
        max_ticks = math.ceil(horizon_h / tick_h)
        starts = _starts(start_h, runs, seed, tick_h, horizon_h)
        sim = build_sim_market(replay, spec, int(starts.max()) + max_ticks + 1, tick_seconds,
                               known_before_tick=int(starts.min()))
        if sim.speed is None or float(sim.speed.min()) >= slowest:
            break
        slowest = float(sim.speed.min())
    names = [p.strip() for p in policy.split(",") if p.strip()]
    if policy == "all":
        names = [n for n in policy_registry() if n != OURS_PER_HOUR or not sim.uniform_speed]
    comp = compare(sim, job, starts, names, max_ticks, with_optimum=optimum)
    return comp, list(dict.fromkeys(names)), replay, starts, start_h


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


def _alert_table(comp, names: list[str], budget_usd: float, width: int | None = None) -> Table:
    """Budget alerts summarised: per asked policy, how many runs reached 80 / 90 / 100 %."""
    rows = []
    for name in names:
        result = comp.results[name]
        reached = [len({run for run, _, th, _ in result.alerts if abs(th - t) < 1e-9})
                   for t in (0.8, 0.9)]
        rows.append([name, str(len(result.cost_usd)), *map(str, reached),
                     str(int(result.budget_stopped.sum()))])
    columns = [render.Column("policy", "left")] + [
        render.Column(head) for head in ("runs", "80 %", "90 %", "100 %: stopped")]
    return render.fitted_table(f"budget ${budget_usd:,.2f}: runs whose spend reached",
                               columns, rows, width)
