"""Benchmark: our policy vs the published ones on the "Can't Be Late" availability traces.

Settings of the paper (Wu et al., NSDI '24): a job of 48 h of compute, deadlines from 52 h to
80 h, restart overhead 0.2 h; spot availability from the 13-day AWS traces
(``cbl_spot_traces/availability/1-node/aws-10-26-2022``, one probe every 600 s, **1 =
available**), read from the shared data folder (``GA_DATA_DIR``). Prices follow the paper's
simulator: the traces give availability only, spot costs a constant 1/3 of on-demand
(on-demand $3.06/h, the p3.2xlarge list price, and spot $1.02/h; every cost is then normalised
to all-on-demand, so only the ratio matters).

Single-zone: each of the 8 traces alone (spot and on-demand in that zone). Multi-zone: the
us-west-2a and us-west-2b traces of the same instance type together (spot and on-demand in
both zones). For every setting, ``--starts`` random start points (seeded) with at least the
longest run's horizon left in the trace; every policy and the omniscient optimum see the same
starts. Policies see only the past of the trace (the history before the start, as the daemon's
price/availability history would give) and the present.

Run: ``python3 benchmarks/policies/cbl_traces.py [--starts 300] [--jobs 2] [--json]``; writes
``benchmarks/policies/RESULTS.md`` (and ``results.json`` with ``--json``) next to this file.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import zlib
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from benchmarks.policies import report
from providers.replay.market import ReplayMarket, ReplayOffer
from providers.replay.timeline import PriceSeries, load_trace
from core.config import shared_data_dir
from core.models import JobSpec
from scheduler.simulator.simulate import SimJob
from scheduler.simulator.market import build_sim_market
from scheduler.simulator.optimum import optimal_cost
from scheduler.simulator.runner import Comparison, compare, summary_row

TRACE_DIR = "traces/cbl_spot_traces/availability/1-node/aws-10-26-2022"
TYPES = ("k80_1", "k80_8", "v100_1", "v100_8")
DEADLINES_H = (52, 56, 60, 64, 68, 72, 76, 80)
COMPUTE_H, OVERHEAD_H = 48.0, 0.2
ON_DEMAND_USD, SPOT_USD = 3.06, 3.06 / 3
DEADLINE_POLICIES = ("arbiter", "greedy", "uniform-progress", "uniform-progress-no-condition2")
BLIND_POLICIES = ("skypilot-failover", "skypilot-eager", "skypilot-eager+od")
RUN_LIMIT_H = 150.0   # deadline-blind policies may run long past 80 h


def settings() -> list[tuple[str, str, tuple[str, ...]]]:
    """``(mode, name, trace files)`` for every setting."""
    out = [("single", f"us-west-2{z}_{t}", (f"us-west-2{z}_{t}.json",))
           for t in TYPES for z in "ab"]
    out += [("multi", f"us-west-2a+b_{t}", (f"us-west-2a_{t}.json", f"us-west-2b_{t}.json"))
            for t in TYPES]
    return out


def build_market(files: tuple[str, ...], starts_for=None):
    """The simulated market of one setting, and its length in ticks. ``starts_for(ticks)``
    picks the start ticks; the first one bounds the history the market's interruption risks
    come from (none before it), so policies see only the past."""
    offers = []
    for name in files:
        zone = name.split("_")[0]
        offers.append(ReplayOffer(
            provider="aws", region="us-west-2", zone=zone, instance_type="p3.2xlarge",
            gpu_model="V100", gpu_count=1, vram_gib=16, vcpus=8, memory_gib=61,
            on_demand_price_usd_per_hour=ON_DEMAND_USD, spot_prices=PriceSeries(SPOT_USD),
            trace=load_trace(shared_data_dir() / TRACE_DIR / name)))
    replay = ReplayMarket(name="+".join(files), path=REPO, time_scale=1.0, notice_seconds=120,
                          start_offset_hours=0.0, offers=offers)
    ticks = min(len(o.trace.data) for o in offers)
    spec = JobSpec(name="bench", command="true")
    starts = starts_for(ticks) if starts_for else np.zeros(1, int)
    market = build_sim_market(replay, spec, ticks, tick_s=600.0,
                              known_before_tick=int(starts.min()))
    return market, ticks, starts


def run_setting(args: tuple[str, str, tuple[str, ...], int, int]) -> dict:
    """Every policy, every deadline, on one setting; returns summary rows and per-run costs."""
    mode, name, files, n_starts, seed = args
    t0 = time.perf_counter()
    limit = int(round(RUN_LIMIT_H * 3600 / 600.0))
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    market, ticks, starts = build_market(
        files, lambda ticks: np.sort(rng.integers(0, ticks - limit, n_starts)))
    optimum = optimal_cost(market, COMPUTE_H, OVERHEAD_H, starts, list(DEADLINES_H))
    blind = compare(market, SimJob(COMPUTE_H, None, OVERHEAD_H), starts,
                    list(BLIND_POLICIES), limit, with_optimum=False)
    rows = []
    for i, deadline in enumerate(DEADLINES_H):
        job = SimJob(COMPUTE_H, float(deadline), OVERHEAD_H)
        comp = compare(market, job, starts, list(DEADLINE_POLICIES), limit, with_optimum=False)
        for policy in BLIND_POLICIES:
            comp.results[policy] = _with_deadline(blind.results[policy], float(deadline))
        comp.optimum_usd = optimum[:, i]
        for policy in ("on-demand", *DEADLINE_POLICIES, *BLIND_POLICIES):
            rows.append({"mode": mode, "setting": name, "deadline_h": deadline,
                         **summary_row(policy, comp), "norm": comp.normalised(policy).tolist()})
        rows.append(_optimum_row(mode, name, deadline, comp))
    return {"setting": name, "mode": mode, "rows": rows, "seconds": time.perf_counter() - t0}


def _with_deadline(result, deadline_h: float):
    """A deadline-blind policy's runs judged against ``deadline_h``."""
    from dataclasses import replace
    return replace(result, deadline_h=np.full(len(result.cost_usd), deadline_h))


def _optimum_row(mode: str, name: str, deadline: int, comp: Comparison) -> dict:
    norm = comp.optimum_usd / comp.baseline_usd
    return {"mode": mode, "setting": name, "deadline_h": deadline, "policy": "omniscient",
            "runs": len(norm), "cost_mean": float(norm.mean()),
            "cost_p95": float(np.percentile(norm, 95)), "gap_to_optimum": 0.0, "misses": 0,
            "unfinished": 0, "migrations": float("nan"), "preemptions": float("nan"),
            "norm": norm.tolist()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--starts", type=int, default=300, help="random starts per setting")
    parser.add_argument("--seed", type=int, default=2024)
    parser.add_argument("--jobs", type=int, default=2, help="worker processes")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent)
    parser.add_argument("--json", action="store_true", help="also write results.json (per row)")
    args = parser.parse_args(argv)
    if not (shared_data_dir() / TRACE_DIR).is_dir():
        print(f"no traces at {shared_data_dir() / TRACE_DIR} (set GA_DATA_DIR)", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    work = [(mode, name, files, args.starts, args.seed) for mode, name, files in settings()]
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        done = list(pool.map(run_setting, work))
    elapsed = time.perf_counter() - t0
    rows = [row for part in done for row in part["rows"]]
    command = "python3 benchmarks/policies/cbl_traces.py " + " ".join(argv or sys.argv[1:])
    meta = report.machine(command.strip(), elapsed, args.starts, args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.json:
        (args.out / "results.json").write_text(json.dumps(
            {"meta": meta, "rows": [{k: v for k, v in r.items() if k != "norm"} for r in rows]}))
    (args.out / "RESULTS.md").write_text(report.markdown(rows, meta, DEADLINES_H))
    print(report.verdict(rows))
    print(f"wrote {args.out / 'RESULTS.md'} in {elapsed:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
