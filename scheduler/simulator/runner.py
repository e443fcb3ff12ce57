"""Run a job through several policies on one market and summarise the outcomes.

Used by ``schedctl simulate`` and by ``benchmarks/policies``. Every policy gets the same runs
(same start ticks, same market) so costs compare run by run; costs are normalised to the
all-on-demand baseline of the same run (on the cheapest on-demand offer meeting the hardware
constraints when the job's own offers are all spot).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from policies import baselines
from policies.decisions import decide
from scheduler.simulator.anchors import cheapest_per_hour, speed_blind
from scheduler.simulator.market import SimMarket, SimulationError
from scheduler.simulator.optimum import deadline_ticks, optimal_cost
from scheduler.simulator.simulate import Policy, SimJob, SimResult, simulate

OURS = "arbiter"
UP_NO_CONDITION2 = "uniform-progress-no-condition2"
"""The authors' variant of uniform progress (``rc_cr_threshold_no_condition2`` in their code)."""
CHEAPEST_PER_HOUR = "cheapest-per-hour"
"""The anchors' rule (SkyPilot, dstack): the cheapest $/h that fits (:mod:`.anchors`)."""
OURS_PER_HOUR = "arbiter-per-hour"
"""Our policy told every offer runs at speed 1: the same as ``arbiter`` on a market without
speeds, so it is shown only where speeds differ."""


def policy_registry() -> dict[str, Policy]:
    """Every policy the simulator knows, by name: ours (``arbiter``, the daemon's :func:`policies.decisions.decide`),
    the baselines of :mod:`policies.baselines` and the anchors' rules of
    :mod:`scheduler.simulator.anchors` (``cheapest-per-hour``, ``arbiter-per-hour``)."""
    return {
        OURS: decide,
        OURS_PER_HOUR: speed_blind(decide),
        CHEAPEST_PER_HOUR: cheapest_per_hour,
        "greedy": baselines.greedy,
        "uniform-progress": baselines.uniform_progress,
        UP_NO_CONDITION2: baselines.uniform_progress_no_condition2,
        "on-demand": baselines.on_demand,
        "skypilot-failover": functools.partial(baselines.skypilot, strategy="failover"),
        "skypilot-eager": functools.partial(baselines.skypilot, strategy="eager"),
        "skypilot-eager+od": functools.partial(baselines.skypilot, strategy="eager",
                                               od_fallback=True),
    }


@dataclass
class Comparison:
    """Results of several policies on the same runs, and the omniscient optimum (USD per run,
    ``None`` when not asked for). ``baseline_usd`` is ``nan`` where no on-demand baseline
    exists; ``notes`` says what was assumed (a rounded deadline, the baseline's offer, the
    optimum's horizon), for the reader of the table."""

    results: dict[str, SimResult]
    baseline_usd: np.ndarray
    optimum_usd: np.ndarray | None
    notes: list[str] = field(default_factory=list)

    def normalised(self, name: str) -> np.ndarray:
        """Cost of policy ``name`` divided by the all-on-demand cost of the same run."""
        return self.results[name].cost_usd / self.baseline_usd


def compare(market: SimMarket, job: SimJob, start_ticks: np.ndarray, names: Sequence[str],
            max_ticks: int, with_optimum: bool = True,
            registry: Mapping[str, Policy] | None = None) -> Comparison:
    """Simulate ``job`` under each named policy from each start tick.

    Args:
        market: the simulated market; must cover ``max(start_ticks) + max_ticks`` ticks.
        job: the job (its ``deadline_h`` applies to every run). A deadline that is not a
            whole number of ticks is rounded down to the tick grid for every policy and the
            optimum alike, and a note says so.
        start_ticks: ``(n,)`` absolute start ticks.
        names: policy names from :func:`policy_registry`. ``on-demand`` is always in the
            results (callers show only the names they asked for); the normalisation baseline
            is all on-demand *without* the budgets, so a budget stop does not shrink it. When
            no eligible offer is on-demand (a spot-only spec), the baseline runs on the
            cheapest on-demand offer meeting the hardware constraints (``market.baseline``),
            or is ``nan`` when there is none; a note says which.
        max_ticks: ticks simulated per run at most.
        with_optimum: also compute the omniscient optimum: finishing by the deadline, or
            within the ``max_ticks`` simulated when there is none or it is later (noted).
            Its DP knows one speed for all offers: where the offers' speeds differ it is not
            computed (``optimum_usd`` is ``None``) and a note says so.
        registry: the policies by name (default :func:`policy_registry`; it must have
            ``on-demand``).

    Raises:
        SimulationError: unknown policy name, a deadline shorter than one tick, as
            :func:`simulate`, or the optimum cannot be computed (as :func:`optimal_cost`;
            it is never left out silently).
    """
    registry = policy_registry() if registry is None else registry
    unknown = [n for n in names if n not in registry]
    if unknown:
        raise SimulationError(f"unknown policy {unknown[0]!r}; choose from {', '.join(registry)}")
    notes: list[str] = []
    job = _on_the_grid(job, market.tick_h, notes)
    results = {name: simulate(registry[name], market, job, start_ticks, max_ticks=max_ticks)
               for name in dict.fromkeys(["on-demand", *names])}
    baseline = _baseline(market, job, start_ticks, max_ticks, results, registry, notes)
    optimum = None
    if with_optimum and job.nodes > 1:
        notes.append("omniscient optimum: not computed for a gang (its DP knows one node)")
    elif with_optimum and not market.uniform_speed:
        notes.append("omniscient optimum: not computed, the offers run at different speeds "
                     "and its DP assumes one")
    elif with_optimum:
        horizon_h = max_ticks * market.tick_h
        deadline = job.deadline_h
        if deadline is None or deadline > horizon_h + 1e-9:
            why = "no deadline" if deadline is None else "the deadline is past the simulated hours"
            notes.append(f"omniscient optimum: {why}; it finishes within the {horizon_h:g} h "
                         "simulated")
            deadline = horizon_h
        # one speed s for every offer: c reference-hours take c / s hours anywhere
        speed = 1.0 if market.speed is None else float(market.speed[0])
        optimum = optimal_cost(market, job.compute_h / speed, job.restart_overhead_h,
                               start_ticks, [deadline])[:, 0]
    return Comparison(results, baseline, optimum, notes)


def _on_the_grid(job: SimJob, tick_h: float, notes: list[str]) -> SimJob:
    """``job`` with its deadline rounded down to whole ticks (decisions happen on ticks)."""
    if job.deadline_h is None:
        return job
    ticks = deadline_ticks(job.deadline_h, tick_h)
    if ticks < 1:
        raise SimulationError(f"the deadline ({job.deadline_h:g} h) is shorter than one tick "
                              f"({tick_h * 3600:g} s)")
    if abs(ticks * tick_h - job.deadline_h) < 1e-9:
        return job
    notes.append(f"deadline {job.deadline_h:g} h rounded down to {ticks * tick_h:g} h "
                 f"({ticks} ticks of {tick_h * 3600:g} s) for every policy and the optimum")
    return replace(job, deadline_h=ticks * tick_h)


def _baseline(market: SimMarket, job: SimJob, start_ticks: np.ndarray, max_ticks: int,
              results: dict[str, SimResult], registry: dict[str, Policy],
              notes: list[str]) -> np.ndarray:
    """All on-demand cost per run without budgets, on the baseline market when the job's
    own has no on-demand offer."""
    own = not market.table.is_spot.all()
    if not own:
        notes.append(market.baseline_note or "no on-demand offer: costs are not normalised")
        if market.baseline is None:
            return np.full(len(start_ticks), np.nan)
    limited = math.isfinite(job.budget_usd) or math.isfinite(job.user_budget_usd)
    if own and not limited:
        return results["on-demand"].cost_usd
    unlimited = replace(job, budget_usd=math.inf, user_budget_usd=math.inf)
    return simulate(registry["on-demand"], market if own else market.baseline, unlimited,
                    start_ticks, max_ticks=max_ticks).cost_usd


def summary_row(name: str, comp: Comparison) -> dict[str, float]:
    """One table row: mean / p95 normalised cost, gap to the optimum (mean of cost/optimum − 1
    over the runs that met the deadline; ``nan`` when none did),
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
    if not np.any((r.spot_h + r.on_demand_h) > 0):
        # No run was ever placed (e.g. on-demand under a spot-only spec): its $0 is no cost.
        for key in ("cost_mean", "cost_p95", "cost_usd_mean"):
            row[key] = float("nan")
    if comp.optimum_usd is not None:
        # only runs that met the deadline: an unfinished run's cost (the hours it ran) is not
        # comparable with a finished schedule's, it would show as "below the optimum"
        with np.errstate(divide="ignore", invalid="ignore"):
            gap = r.cost_usd / comp.optimum_usd - 1.0
        ok = np.isfinite(gap) & r.met_deadline
        row["gap_to_optimum"] = float(np.mean(gap[ok])) if ok.any() else float("nan")
    return row
