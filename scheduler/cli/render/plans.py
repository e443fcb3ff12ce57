"""``schedctl plan``: the scenarios and the five best offers of a plan, in a panel."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from scheduler.cli.render.tables import (
    Column,
    count,
    fitted_table,
    output_width,
    per_1k,
    short_price,
)


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
    a = plan["assumptions"]
    foot = Text(f"hours: {a['restart_overhead_h']:g} h to start (launch, boot, agent "
                f"install, restore: the restart overhead), the work at the offer's speed, "
                f"and rework; rework: "
                f"each interruption loses half a checkpoint sync interval "
                f"({a['sync_interval_s']:g} s) plus {a['restart_overhead_h']:g} h to restart; "
                f"risk = monthly interruption frequency", style="dim")
    return Panel(Group(_head(plan), _scenarios(plan, inner), _best_offers(plan, inner), foot),
                 title=f"plan: {plan['job']}", box=box.ROUNDED)


def _head(plan: dict[str, Any]) -> Text:
    """The hours, the prices' and offers' sources, providers that listed nothing, the budget."""
    source = {"option": "", "spec": " (the spec's expected_hours)", "work": "",
              "default": " (default: the spec has no expected_hours; --compute-hours sets it)"}
    work = plan.get("work")
    hours = f"{plan['compute_hours']:.4g} compute hours"
    if work:
        per = (f" ({count(work['amount'])} × {work['epochs']:g} epochs)"
               if work["epochs"] != 1 else "")
        hours = (f"{count(work['total'])} {work['unit']}{per} = {plan['compute_hours']:.4g} "
                 f"hours on one {work['reference_gpu']} at "
                 f"{count(work['reference_rate_per_h'])} {work['unit']}/h")
    elif plan.get("reference_gpu"):
        hours += f" on one {plan['reference_gpu']}"
    if plan.get("like_job"):
        hours += f" (rates as {plan['like_job']} measured them)"
    head = Text(f"{hours}{source.get(plan.get('compute_hours_source', 'option'), '')} "
                f"({plan['gpu_hours']:.4g} GPU-hours); prices: history since "
                f"{plan['lookback_since'][:10]}; offers: {plan['offers_source']} "
                f"({plan['eligible']} fit)")
    unplanned = plan.get("unplanned_work")
    if unplanned:
        head.append(f"\nthe spec's work.total ({count(unplanned['total'])} {unplanned['unit']}) "
                    "cannot be turned into hours without work.throughput, expected_hours + "
                    "reference_gpu, or --like JOB: planned by "
                    + ("the spec's expected_hours" if plan.get("compute_hours_source") == "spec"
                       else "the hour (the default)"), style="yellow")
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
    return head


def _cost(est: dict[str, Any]) -> Text:
    return Text(_range(est["cost_usd"], "${:,.2f}"),
                style="bold red" if est.get("over_budget") else "")


def _scenarios(plan: dict[str, Any], width: int) -> Table:
    cols = [Column("scenario / offer", "left", wrap=True), Column("$/h"), Column("risk", drop=1),
            Column("hours"), Column("cost")]
    rows = []
    for name, est in plan["scenarios"].items():
        if not est or "series" not in est:
            rows.append([Text.assemble((name, "bold"), "\n", (est or {}).get("reason", "no offer fits")),
                         "-", "-", "-", "-"])
            continue
        why = f"\n{est['reason']}" if est.get("reason") else ""  # the policy's, as placed
        rows.append([Text.assemble((name, "bold"), "\n", (_where(est), "dim"), why),
                     short_price(est["price_mean"]),
                     f"{100 * est['interruption_risk']:.0f}%",
                     _range(est["duration_hours"], "{:.1f}"), _cost(est)])
    return fitted_table("scenarios: expected (low–high)", cols, rows, width, expand=True)


def _best_offers(plan: dict[str, Any], width: int) -> Table:
    with_rates = any(est.get("throughput_source") for est in plan["best_offers"])
    cols = [Column("offer", "left", wrap=True), Column("GPU", "left", drop=3), Column("$/h"),
            Column("risk", drop=2), Column("rework h", drop=7), Column("hours", drop=5),
            Column("cost")]
    with_units = any(est.get("cost_per_1k_usd") is not None for est in plan["best_offers"])
    if with_units:
        cols.append(Column("$/1k", drop=4))
    if with_rates:
        cols.append(Column("rate" if with_units else "speed", "left", drop=6))
    rows = []
    for est in plan["best_offers"]:
        rework = "-" if est["rework_hours"] is None else f"{est['rework_hours']:.2f}"
        prices = short_price(est["price_mean"])
        if est["price_p10"] != est["price_p90"]:
            prices += f" ({short_price(est['price_p10'])}–{short_price(est['price_p90'])})"
        hours = est.get("hours_to_finish")
        row = [_where(est), f"{est['gpu_count']}x {est['gpu_model']}", prices,
               f"{100 * est['interruption_risk']:.0f}%", rework,
               "never" if hours is None else f"{hours:.1f}", _cost(est)]
        if with_units:
            row.append(per_1k(est.get("cost_per_1k_usd")))
        if with_rates:
            row.append(_rate(est))
        rows.append(row)
    title = "five best offers by expected cost to finish ($/h: mean, p10–p90)"
    unit = (plan.get("work") or {}).get("unit")
    if with_units and unit:
        title += f"; $/1k {unit}: price ÷ rate"
    elif with_rates and not with_units:
        title += f"; speed: work per hour relative to one {_reference(plan)}"
    return fitted_table(title, cols, rows, width, expand=True)


def _reference(plan: dict[str, Any]) -> str:
    """``T4 (the spec's reference_gpu)``: the GPU the plan's speeds are relative to."""
    gpu = plan.get("reference_gpu") or "A100-80GB"
    if plan.get("reference_gpu_source") == "spec":
        return f"{gpu} (the spec's reference_gpu)"
    return f"{gpu} (the default reference; the spec sets none)"


def _rate(est: dict[str, Any]) -> str:
    """``1.3M/h declared``: the job's rate on the offer and where it comes from; ``0.25×
    prior`` in reference-hours per hour (the offer's speed)."""
    rate = est.get("rate_per_h")
    if rate is None:
        return est.get("throughput_source") or "-"
    if est.get("rate_unit") == "reference-hours":
        return f"{rate:.3g}× {est['throughput_source']}"
    return f"{count(rate)}/h {est['throughput_source']}"
