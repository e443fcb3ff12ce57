"""Run a job through several policies on one market and summarise the outcomes.

Used by ``schedctl simulate`` and by ``benchmarks/policies``. Every policy gets the same runs
(same start ticks, same market) so costs compare run by run; costs are normalised to the
all-on-demand baseline of the same run.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from policies import baselines
from policies.engine import DEFAULT_CONFIG, PolicyConfig, decide
from scheduler.simulator.engine import Policy, SimJob, SimResult, simulate
from scheduler.simulator.market import SimMarket, SimulationError
from scheduler.simulator.optimum import optimal_cost

OURS = "arbiter"


def policy_registry(cfg: PolicyConfig = DEFAULT_CONFIG) -> dict[str, Policy]:
    """Every policy the simulator knows, by name: ours (``arbiter``, the daemon's engine) and
    the baselines of :mod:`policies.baselines`."""
    return {
        OURS: functools.partial(decide, cfg=cfg),
        "greedy": baselines.greedy,
        "uniform-progress": baselines.uniform_progress,
        "on-demand": baselines.on_demand,
        "skypilot-failover": functools.partial(baselines.skypilot, strategy="failover"),
        "skypilot-eager": functools.partial(baselines.skypilot, strategy="eager"),
        "skypilot-eager+od": functools.partial(baselines.skypilot, strategy="eager",
                                               od_fallback=True),
    }


@dataclass
class Comparison:
    """Results of several policies on the same runs, and the omniscient optimum (USD per run,
    ``None`` when not computed)."""

    results: dict[str, SimResult]
    baseline_usd: np.ndarray
    optimum_usd: np.ndarray | None

    def normalised(self, name: str) -> np.ndarray:
        """Cost of policy ``name`` divided by the all-on-demand cost of the same run."""
        return self.results[name].cost_usd / self.baseline_usd


def compare(market: SimMarket, job: SimJob, start_ticks: np.ndarray, names: Sequence[str],
            max_ticks: int, with_optimum: bool = True,
            cfg: PolicyConfig = DEFAULT_CONFIG) -> Comparison:
    """Simulate ``job`` under each named policy from each start tick.

    Args:
        market: the simulated market; must cover ``max(start_ticks) + max_ticks`` ticks.
        job: the job (its ``deadline_h`` applies to every run).
        start_ticks: ``(n,)`` absolute start ticks.
        names: policy names from :func:`policy_registry`. ``on-demand`` is always in the
            results (callers show only the names they asked for); the normalisation baseline
            is all on-demand *without* the budgets, so a budget stop does not shrink it.
        max_ticks: ticks simulated per run at most.
        with_optimum: also compute the omniscient optimum (needs a deadline that is a whole
            number of ticks; skipped otherwise).
        cfg: knobs of our policy.

    Raises:
        SimulationError: unknown policy name, or as :func:`simulate`.
    """
    registry = policy_registry(cfg)
    unknown = [n for n in names if n not in registry]
    if unknown:
        raise SimulationError(f"unknown policy {unknown[0]!r}; choose from {', '.join(registry)}")
    results = {name: simulate(registry[name], market, job, start_ticks, max_ticks=max_ticks)
               for name in dict.fromkeys(["on-demand", *names])}
    if math.isfinite(job.budget_usd) or math.isfinite(job.user_budget_usd):
        unlimited = replace(job, budget_usd=math.inf, user_budget_usd=math.inf)
        baseline = simulate(registry["on-demand"], market, unlimited, start_ticks,
                            max_ticks=max_ticks).cost_usd
    else:
        baseline = results["on-demand"].cost_usd
    optimum = None
    if with_optimum and job.deadline_h is not None and _whole_ticks(job.deadline_h, market):
        optimum = optimal_cost(market, job.compute_h, job.restart_overhead_h, start_ticks,
                               [job.deadline_h])[:, 0]
    return Comparison(results, baseline, optimum)


def _whole_ticks(hours: float, market: SimMarket) -> bool:
    ticks = hours / market.tick_h
    return abs(ticks - round(ticks)) < 1e-9


def summary_row(name: str, comp: Comparison) -> dict[str, float]:
    """One table row: mean / p95 normalised cost, gap to the optimum (mean of cost/optimum − 1),
    deadline misses, runs stopped by a budget, mean migrations and preemptions, spot and on-demand hours, finish time."""
    r = comp.results[name]
    norm = comp.normalised(name)
    row = {
        "policy": name, "runs": len(norm),
        "cost_mean": float(np.mean(norm)), "cost_p95": float(np.percentile(norm, 95)),
        "cost_usd_mean": float(np.mean(r.cost_usd)),
        "misses": int((~r.met_deadline).sum()),
        "unfinished": int((~r.finished).sum()),
        "budget_stopped": int(r.budget_stopped.sum()),
        "migrations": float(np.mean(r.migrations)), "preemptions": float(np.mean(r.preemptions)),
        "spot_h": float(np.mean(r.spot_h)), "on_demand_h": float(np.mean(r.on_demand_h)),
        "finish_h": float(np.nanmean(r.finish_h)) if r.finished.any() else float("nan"),
    }
    if comp.optimum_usd is not None:
        with np.errstate(divide="ignore", invalid="ignore"):
            gap = r.cost_usd / comp.optimum_usd - 1.0
        row["gap_to_optimum"] = float(np.mean(gap[np.isfinite(gap)])) if np.isfinite(gap).any() \
            else float("nan")
    return row
