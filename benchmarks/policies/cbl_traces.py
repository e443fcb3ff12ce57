"""Benchmark: our policy vs the published ones and the omniscient optimum, on every trace set
that fits the "Can't Be Late" job.

Settings of the paper (Wu et al., NSDI '24): a job of 48 h of compute, deadlines from 52 h to
80 h by 4, restart overhead 0.2 h. Trace sets (:mod:`benchmarks.policies.trace_sets`, **1 =
available**): the CBL availability traces, the CBL 1-node GPU preemption traces (V100, 4
zones) and the one Bamboo trace longer than 80 h; each zone alone (spot and on-demand there)
and the zones of one region (CBL sets) together. Prices follow the paper's simulator: the
traces give availability only, spot costs a constant 1/3 of on-demand (on-demand $3.06/h,
spot $1.02/h); costs are normalised to all-on-demand on the same run.

For every setting, ``--starts`` distinct random start ticks (seeded; every start tick the
trace allows when it allows fewer) with 80 h of trace after each; every policy and the
omniscient optimum see the same starts, and no run is simulated past 80 h. Policies see only
the past of the trace and the present. The robustness part runs our policy with each numeric
knob of :class:`policies.decisions.PolicyConfig` that the policy reads at ``--knob-factors``
times its default, at the deadlines ``--robust-deadlines``, on the same starts.

Run: ``python3 benchmarks/policies/cbl_traces.py [--starts 300] [--jobs 2] [--json]``; writes
``RESULTS.md`` (and ``results.json`` with ``--json``) to ``--out`` (default: next to this file).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import re
import subprocess
import sys
import time
import zlib
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from benchmarks.policies import report, trace_sets
from core.config import shared_data_dir
from core.models import JobSpec
from policies.decisions import PolicyConfig, decide
from providers.replay.market import ReplayMarket, ReplayOffer
from providers.replay.timeline import PriceSeries
from scheduler.simulator.market import build_sim_market
from scheduler.simulator.optimum import optimal_cost
from scheduler.simulator.runner import Comparison, policy_registry, summary_row
from scheduler.simulator.simulate import SimJob, SimResult, simulate

DEADLINES_H = (52, 56, 60, 64, 68, 72, 76, 80)
ROBUST_DEADLINES_H = (52, 64, 80)
COMPUTE_H, OVERHEAD_H = 48.0, 0.2
ON_DEMAND_USD, SPOT_USD = 3.06, 3.06 / 3
DEADLINE_POLICIES = ("arbiter", "greedy", "uniform-progress", "uniform-progress-no-condition2")
BLIND_POLICIES = ("skypilot-failover", "skypilot-eager", "skypilot-eager+od")
TICK_S = trace_sets.TICK_S
LIMIT_TICKS = int(round(max(DEADLINES_H) * 3600 / TICK_S))


def build_market(setting: trace_sets.Setting):
    """The simulated market of ``setting`` over its whole trace, and its length in ticks."""
    offers = []
    for zone, path in setting.files:
        offers.append(ReplayOffer(
            provider="aws", region=zone.rstrip("abcdef") if zone[-1].isalpha() else zone,
            zone=zone, instance_type="p3.2xlarge" if setting.gpu == "V100" else "p2.xlarge",
            gpu_model=setting.gpu, gpu_count=1, vram_gib=16, vcpus=8, memory_gib=61,
            on_demand_price_usd_per_hour=ON_DEMAND_USD, spot_prices=PriceSeries(SPOT_USD),
            trace=trace_sets.load(path)))
    ticks = int(min(o.trace.duration_s for o in offers) // TICK_S)
    replay = ReplayMarket(name=setting.key, path=REPO, time_scale=1.0, notice_seconds=120,
                          start_offset_hours=0.0, offers=offers)
    return replay, ticks


def start_ticks(setting: trace_sets.Setting, ticks: int, n: int, seed: int) -> np.ndarray:
    """``(k,)`` sorted distinct start ticks with :data:`LIMIT_TICKS` of trace after each:
    ``n`` of them drawn with ``seed``, or all there are when fewer."""
    feasible = ticks - LIMIT_TICKS + 1
    if feasible < 1:
        raise SystemExit(f"{setting.key}: {ticks} ticks, fewer than the {LIMIT_TICKS} a run needs")
    if feasible <= n:
        return np.arange(feasible)
    rng = np.random.default_rng([seed, zlib.crc32(setting.key.encode())])
    return np.sort(rng.choice(feasible, n, replace=False))


def _market_and_starts(key: str, n_starts: int, seed: int):
    setting = {s.key: s for s in trace_sets.settings()}[key]
    replay, ticks = build_market(setting)
    starts = start_ticks(setting, ticks, n_starts, seed)
    # policies learn interruption risks from the trace before the first start only
    market = build_sim_market(replay, JobSpec(name="bench", command="true"), ticks,
                              tick_s=TICK_S, known_before_tick=int(starts.min()))
    return setting, market, starts


def simulate_deadlines(market, starts: np.ndarray, deadlines: tuple[int, ...], names,
                       registry) -> dict[str, list[SimResult]]:
    """``{name: [SimResult per deadline]}``: each policy simulated once over all
    ``starts × deadlines`` runs (``simulate`` takes a deadline per run; the policies decide run
    by run, so this equals one call per deadline at a fraction of the per-tick overhead)."""
    n = len(starts)
    all_starts = np.tile(starts, len(deadlines))
    all_deadlines = np.repeat(np.asarray(deadlines, dtype=float), n)
    job = SimJob(COMPUTE_H, float(max(deadlines)), OVERHEAD_H)
    out = {}
    for name in names:
        r = simulate(registry[name], market, job, all_starts, deadline_h=all_deadlines,
                     max_ticks=LIMIT_TICKS)
        out[name] = [_slice(r, slice(i * n, (i + 1) * n)) for i in range(len(deadlines))]
    return out


def _slice(r: SimResult, sl: slice) -> SimResult:
    return SimResult(**{f.name: getattr(r, f.name)[sl] for f in dataclasses.fields(SimResult)
                        if f.name != "alerts"}, alerts=[])


def run_setting(args: tuple[str, int, int]) -> dict:
    """Every policy, every deadline, on one setting: summary rows with per-run costs."""
    key, n_starts, seed = args
    cpu0 = time.process_time()
    setting, market, starts = _market_and_starts(key, n_starts, seed)
    registry = policy_registry()
    optimum = optimal_cost(market, COMPUTE_H, OVERHEAD_H, starts, list(DEADLINES_H))
    timed = simulate_deadlines(market, starts, DEADLINES_H, ("on-demand", *DEADLINE_POLICIES),
                               registry)
    blind = {name: simulate(registry[name], market, SimJob(COMPUTE_H, None, OVERHEAD_H),
                            starts, max_ticks=LIMIT_TICKS) for name in BLIND_POLICIES}
    rows = []
    where = {"set": setting.trace_set, "mode": setting.mode, "setting": setting.name}
    for i, deadline in enumerate(DEADLINES_H):
        results = {name: timed[name][i] for name in timed}
        for name, r in blind.items():
            results[name] = dataclasses.replace(r, deadline_h=np.full(len(starts), float(deadline)))
        # all on-demand is the normalisation baseline (no budgets here, so no re-run)
        comp = Comparison(results, results["on-demand"].cost_usd, optimum[:, i])
        for policy in ("on-demand", *DEADLINE_POLICIES, *BLIND_POLICIES):
            rows.append({**where, "deadline_h": deadline, **summary_row(policy, comp),
                         "norm": comp.normalised(policy).tolist()})
        rows.append(_optimum_row(where, deadline, comp))
    return {"key": key, "rows": rows, "starts": len(starts), "ticks": market.available.shape[0],
            "cpu_s": time.process_time() - cpu0}


def _optimum_row(where: dict, deadline: int, comp: Comparison) -> dict:
    norm = comp.optimum_usd / comp.baseline_usd
    return {**where, "deadline_h": deadline, "policy": "omniscient", "runs": len(norm),
            "cost_mean": float(norm.mean()), "cost_p95": float(np.percentile(norm, 95)),
            "gap_to_optimum": 0.0, "misses": 0, "unfinished": 0, "migrations": float("nan"),
            "preemptions": float("nan"), "norm": norm.tolist()}


def knob_variants(factors: tuple[float, ...]) -> tuple[dict[str, dict], list[str]]:
    """``({label: PolicyConfig overrides}, notes)``: every numeric knob the policy reads
    (``cfg.<knob>`` in ``policies/*.py``) at ``factor ×`` its current default."""
    read = set()
    for path in (REPO / "policies").glob("*.py"):
        read |= set(re.findall(r"\bcfg\.(\w+)", path.read_text()))
    base, out, notes = PolicyConfig(), {}, []
    for f in dataclasses.fields(PolicyConfig):
        value = getattr(base, f.name)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if f.name not in read:
            notes.append(f"`{f.name}` is not read by the policy: not varied")
            continue
        if value == 0:
            notes.append(f"`{f.name}` defaults to 0: a factor leaves it there, not varied")
            continue
        for k in factors:
            out[f"{f.name}={value * k:g} (×{k:g})"] = {f.name: type(value)(value * k)}
    return out, notes


def run_robust(args: tuple[str, int, int, dict[str, dict]]) -> dict:
    """Our policy with each knob variant on one setting at :data:`ROBUST_DEADLINES_H`."""
    key, n_starts, seed, variants = args
    cpu0 = time.process_time()
    setting, market, starts = _market_and_starts(key, n_starts, seed)
    registry = policy_registry()
    registry |= {label: functools.partial(decide, cfg=PolicyConfig(**over))
                 for label, over in variants.items()}
    optimum = optimal_cost(market, COMPUTE_H, OVERHEAD_H, starts, list(ROBUST_DEADLINES_H))
    timed = simulate_deadlines(market, starts, ROBUST_DEADLINES_H, ("on-demand", *variants),
                               registry)
    rows = []
    for i, deadline in enumerate(ROBUST_DEADLINES_H):
        results = {name: timed[name][i] for name in timed}
        comp = Comparison(results, results["on-demand"].cost_usd, optimum[:, i])
        for label in variants:
            r = summary_row(label, comp)
            rows.append({"set": setting.trace_set, "mode": setting.mode,
                         "setting": setting.name, "deadline_h": deadline, "variant": label,
                         "cost_mean": r["cost_mean"], "gap_to_optimum": r["gap_to_optimum"],
                         "misses": r["misses"]})
    return {"key": key, "robust": rows, "cpu_s": time.process_time() - cpu0}


def _git(repo: Path, *args: str) -> str:
    try:
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                              check=False).stdout.strip()
    except OSError:
        return ""


def _loadavg() -> str:
    try:
        return Path("/proc/loadavg").read_text().strip()
    except OSError:
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--starts", type=int, default=300, help="start ticks per setting")
    parser.add_argument("--seed", type=int, default=2024)
    parser.add_argument("--jobs", type=int, default=2, help="worker processes")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent)
    parser.add_argument("--json", action="store_true", help="also write results.json (per row)")
    parser.add_argument("--knob-factors", default="0.5,1.5",
                        help="robustness: multiples of each knob's default ('' skips it)")
    parser.add_argument("--only", default="", help="comma-separated setting keys (debugging)")
    parser.add_argument("--git-repo", type=Path, default=REPO,
                        help="the checkout this code comes from, for the commit in the report "
                             "(when running from a `git archive` export of it)")
    parser.add_argument("--git-commit", default="HEAD",
                        help="the commit this code is (of an export: the one exported)")
    args = parser.parse_args(argv)
    if not (shared_data_dir() / trace_sets.AVAIL_DIR).is_dir():
        print(f"no traces under {shared_data_dir()} (set GA_DATA_DIR)", file=sys.stderr)
        return 2
    t0, cpu0 = time.perf_counter(), time.process_time()
    load_start = _loadavg()
    keys = [s.key for s in trace_sets.settings()]
    if args.only:
        keys = [k for k in keys if k in args.only.split(",")]
    factors = tuple(float(x) for x in args.knob_factors.split(",") if x.strip())
    variants, knob_notes = knob_variants(factors) if factors else ({}, [])
    # the multi-zone settings are the slowest: first, so the pool ends together
    order = sorted(keys, key=lambda k: "+" not in k)
    done, robust, cpu_workers = {}, [], 0.0
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = []
        for k in order:
            futures.append(pool.submit(run_setting, (k, args.starts, args.seed)))
            if variants:
                futures.append(pool.submit(run_robust, (k, args.starts, args.seed, variants)))
        for fut in as_completed(futures):
            part = fut.result()
            cpu_workers += part["cpu_s"]
            if "rows" in part:
                done[part["key"]] = part
            else:
                robust += part["robust"]
            print(f"  {part['key']}: {part['cpu_s']:.0f} s CPU", file=sys.stderr, flush=True)
    elapsed = time.perf_counter() - t0
    rows = [row for k in keys for row in done[k]["rows"]]
    command = ("python3 benchmarks/policies/cbl_traces.py " + " ".join(
        argv if argv is not None else sys.argv[1:])).strip()
    meta = report.machine(command, elapsed, args.starts, args.seed)
    exported = not (REPO / ".git").exists()
    meta |= {
        "commit": _git(args.git_repo, "rev-parse", "--short", args.git_commit) or "unknown",
        "exported": exported,
        "cpu_s": cpu_workers + time.process_time() - cpu0,
        "loadavg_start": load_start, "loadavg_end": _loadavg(),
        "policy_commit": _git(args.git_repo, "log", "-1", "--format=%h %cI %s",
                              args.git_commit, "--", "policies/"),
        # an export of HEAD holds committed code only, whatever the checkout has on disk
        "policy_dirty": not exported and bool(_git(args.git_repo, "status", "--porcelain", "--",
                                                   "policies/")),
        "runs": {k: done[k]["starts"] for k in keys},
        "ticks": {k: done[k]["ticks"] for k in keys},
        "knob_notes": knob_notes, "variants": list(variants),
        "robust_deadlines": ROBUST_DEADLINES_H, "repo": str(REPO),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    if args.json:
        (args.out / "results.json").write_text(json.dumps(
            {"meta": meta, "rows": [{k: v for k, v in r.items() if k != "norm"} for r in rows],
             "robust": robust}))
    by_key = {s.key: s for s in trace_sets.settings()}
    data = {k: {"source": trace_sets.SET_SOURCES[by_key[k].trace_set],
                "zones": [(z, Path(p).name, trace_sets.describe(trace_sets.load(p)))
                          for z, p in by_key[k].files]} for k in keys}
    (args.out / "RESULTS.md").write_text(report.markdown(
        rows, robust, meta, DEADLINES_H, data, trace_sets.left_out()))
    print(report.verdict(rows))
    print(f"wrote {args.out / 'RESULTS.md'} in {elapsed:.0f} s ({meta['cpu_s']:.0f} s CPU)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
