"""Benchmark: cost to finish vs "cheapest $/h that fits" on a market of many GPU models.

The market (:mod:`benchmarks.heterogeneous.market`) is built at run time from the real catalogs
and availability traces in the shared data folder (``GA_DATA_DIR``). Each job type needs some
reference-hours of work (hours on one A100-80GB, the reference); one market hour on an offer
does ``speed`` reference-hours: what :func:`policies.throughput.estimate_rates` gives the job's
``WorkModel`` before any progress report (the simulator's default,
:func:`scheduler.simulator.speeds.spec_speeds`), i.e. the GPU table's relative throughput for
the job's workload (:mod:`policies.gpu_table`: Lambda's fp16 one-GPU benchmarks where they
exist, the spec formula otherwise) times ``1 + (n - 1) × 0.9`` for an ``n``-GPU offer. The
simulated job runs at exactly that speed (the prior is right: no learning is exercised here).

Policies, all through :func:`scheduler.simulator.runner.compare` on the same starts:

- ``arbiter``: ours, ranking by expected cost to finish (price ÷ speed, risk-inflated);
- ``cheapest-per-hour``: the anchors' rule (SkyPilot, dstack): the cheapest available offer
  that fits, spot or on-demand, kept until reclaimed; it knows no deadline;
- ``arbiter-per-hour``: ours blind to speeds (the policy before it knew them: deadline- and
  risk-aware, ranking by $/h).

Run: ``python3 benchmarks/heterogeneous/run.py [--runs 30] [--seed 13]``; writes
``RESULTS.md`` next to this file (``--out`` elsewhere).
"""

from __future__ import annotations

import argparse
import platform
import re
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from benchmarks.heterogeneous.market import build_market
from core.config import shared_data_dir
from core.models import JobSpec
from policies.views import NO_OFFER
from providers.replay.market import ReplayMarket
from scheduler.simulator.market import SimMarket, build_sim_market
from scheduler.simulator.runner import (
    CHEAPEST_PER_HOUR,
    OURS,
    OURS_PER_HOUR,
    compare,
    policy_registry,
)
from scheduler.simulator.simulate import SimJob

POLICIES = (OURS, CHEAPEST_PER_HOUR, OURS_PER_HOUR)
SCALING_EFFICIENCY = 0.9
OVERHEAD_H = 0.2
HISTORY_TICKS = 144          # a day of trace before the first start (interruption risks)
TARGET_SAVING = 0.20
# The markets, the first: Vast selections of benchmarks.heterogeneous.market (None: AWS
# only); the target is checked on TARGET_MARKET only
MARKETS = ("consumer", None, "all")
TARGET_MARKET = "aws+vast-consumer"


@dataclass(frozen=True)
class JobType:
    """A job of the benchmark: ``compute_h`` reference-hours of ``workload`` needing
    ``min_vram_gib`` per GPU, with a deadline ``deadline_h`` after the start or none."""

    name: str
    workload: str
    min_vram_gib: float
    compute_h: float
    deadline_h: float | None = None

    def spec(self) -> JobSpec:
        """Its spec: the resources, and the workload that chooses the GPU table's priors."""
        return JobSpec(name=re.sub(r"[^a-z0-9]+", "-", self.name).strip("-"), command="true",
                       resources={"min_vram_gib": self.min_vram_gib},
                       work={"workload": self.workload,
                             "scaling_efficiency": SCALING_EFFICIENCY})


JOBS = (
    JobType("transformer", "transformer", 16, 24.0),
    JobType("transformer, deadline 60 h", "transformer", 16, 24.0, 60.0),
    JobType("transformer 20 GiB", "transformer", 20, 24.0),
    JobType("transformer 20 GiB, deadline 48 h", "transformer", 20, 24.0, 48.0),
    JobType("cnn", "cnn", 12, 24.0),
    JobType("cnn, deadline 48 h", "cnn", 12, 24.0, 48.0),
)


def _recording(policy, seen: list[np.ndarray]):
    """``policy``, remembering each run's first launched offer (for the table's "first on")."""
    def run(jobs, market):
        d = policy(jobs, market)
        seen.append(np.where(jobs.current == NO_OFFER, d.offer, NO_OFFER))
        return d
    return run


def first_offers(sim: SimMarket, seen: list[np.ndarray]) -> Counter:
    first = np.full(len(seen[0]), NO_OFFER) if seen else np.zeros(0, int)
    for step in seen:
        first = np.where(first == NO_OFFER, step, first)
    names = Counter()
    for j in first:
        if j != NO_OFFER:
            o = sim.offers[j]
            names[f"{o.gpu_count}x{o.gpu_model} {o.provider} {o.market.value}"] += 1
    return names


def run_job(replay: ReplayMarket, job: JobType, starts: np.ndarray, max_ticks: int,
            policies=POLICIES) -> dict:
    """Simulate one job type under ``policies``; a dict of per-policy rows and notes."""
    sim = build_sim_market(replay, job.spec(), int(starts.max()) + max_ticks + 1,
                           known_before_tick=int(starts.min()))
    registry = policy_registry()
    recorded: dict[str, list[np.ndarray]] = {p: [] for p in policies}
    registry.update({p: _recording(registry[p], recorded[p]) for p in policies})
    comp = compare(sim, SimJob(job.compute_h, job.deadline_h, OVERHEAD_H), starts,
                   list(policies), max_ticks, with_optimum=False, registry=registry)
    rows = {}
    for p in policies:
        r = comp.results[p]
        rows[p] = {
            "cost_usd": float(np.mean(r.cost_usd)), "finish_h": float(np.nanmean(r.finish_h))
            if r.finished.any() else float("nan"),
            "misses": int((~r.met_deadline).sum()), "unfinished": int((~r.finished).sum()),
            "preemptions": float(np.mean(r.preemptions)), "spot_h": float(np.mean(r.spot_h)),
            "first_on": first_offers(sim, recorded[p]).most_common(2),
        }
    return {"job": job, "rows": rows, "notes": comp.notes, "offers": len(sim.offers),
            "market": replay.name, "cheapest": cheapest_offers(sim),
            "hazard": hazard_check(sim, int(starts.min()))}


def hazard_check(sim: SimMarket, first_tick: int) -> list[tuple[str, float, int, float]]:
    """The policy's interruption model against the trace, per spot offer, over the ticks from
    ``first_tick`` on (only the past is used by each forecast): ``(offer, reclaims predicted,
    reclaims seen, share of ticks available)``. Predicted: the sum over the ticks the offer is
    available of ``hazard × tick`` (:func:`policies.risk.hazard_per_h`, the rate the policy
    inflates prices with); seen: the ticks at which it then became unavailable."""
    from policies.risk import hazard_per_h

    k = np.arange(first_tick, sim.available.shape[0] - 1)
    lam = hazard_per_h(sim.offer_stats.take(k), sim.table.is_spot)   # (ticks, m)
    out = []
    for j, o in enumerate(sim.offers):
        if o.market.value != "spot":
            continue
        up = sim.available[k, j]
        seen = int((up & ~sim.available[k + 1, j]).sum())
        out.append((f"{o.gpu_count}×{o.gpu_model} {o.provider} spot {o.zone}",
                    float((lam[:, j] * sim.tick_h)[up].sum()), seen, float(up.mean())))
    return out


def cheapest_offers(sim: SimMarket) -> str:
    """The offer cheapest per hour and the one cheapest per reference-hour (price ÷ speed),
    at the market's catalog prices (availability aside), in words."""
    price = sim.price[0]
    speed = np.ones(len(price)) if sim.speed is None else sim.speed

    def name(j: int) -> str:
        o = sim.offers[j]
        return (f"{o.gpu_count}× {o.gpu_model} {o.provider} {o.market.value} ${price[j]:.3f}/h, "
                f"speed {speed[j]:.3f}, ${price[j] / speed[j]:.3f} per reference-hour")
    per_h, per_ref = int(np.argmin(price)), int(np.argmin(price / speed))
    return f"cheapest per hour: {name(per_h)}; cheapest per reference-hour: {name(per_ref)}"


def _commit() -> str:
    """HEAD's short hash, with the code paths the results depend on that differ from it."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True,
                              check=True).stdout
    try:
        head = git("rev-parse", "--short", "HEAD").strip()
        dirty = git("status", "--porcelain", "--", "policies", "scheduler/simulator",
                    "benchmarks/heterogeneous")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    changed = sorted({line[3:] for line in dirty.splitlines()
                      if not line[3:].endswith("RESULTS.md")})
    return head + (f" plus uncommitted changes to {', '.join(changed)}" if changed else "")


def claims(results: list[dict]) -> list[str]:
    """The issue's target, checked: on every transformer job on the issue's market
    (:data:`TARGET_MARKET`), ours costs >= 20 % less on average than cheapest $/h and misses no
    deadline; the same check on the other jobs and markets is shown as ``info``."""
    out = []
    for res in results:
        job, rows = res["job"], res["rows"]
        ours, anchor = rows[OURS], rows[CHEAPEST_PER_HOUR]
        saving = 1 - ours["cost_usd"] / anchor["cost_usd"]
        ok = saving >= TARGET_SAVING and ours["misses"] == 0
        kind = "target" if job.workload == "transformer" and res["market"] == TARGET_MARKET \
            else "info"
        out.append(f"[{'ok' if ok else 'NO'}] ({kind}) {res['market']}: {job.name}: arbiter ${ours['cost_usd']:.2f} "
                   f"vs cheapest-per-hour ${anchor['cost_usd']:.2f} ({saving:+.1%} saved), "
                   f"arbiter misses {ours['misses']}, cheapest-per-hour misses {anchor['misses']}")
    return out


def report(results: list[dict], command: str, runs: int, seed: int, runtime_s: float) -> str:
    lines = [
        "# Cost to finish vs cheapest $/h on a heterogeneous market",
        "",
        "Generated by `benchmarks/heterogeneous/run.py`; do not edit by hand.",
        "",
        f"- command: `{command}`",
        (f"- machine: {platform.machine()}, Python {platform.python_version()}; date "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, commit {_commit()}, runtime {runtime_s:.0f} s"),
        (f"- {runs} random starts per job (seed {seed}) over the 13-day traces, at least "
        f"{HISTORY_TICKS} ticks (a day) in; ticks of 600 s (the traces' probe interval); "
        f"restart overhead {OVERHEAD_H} h; continuous checkpoints"),
        ("- markets: AWS us-west-2 (usw2-az1, usw2-az2) g4dn.xlarge T4, g5.xlarge A10G, "
        "g6.xlarge L4, p3.2xlarge V100, p4d.24xlarge 8×A100-40GB, on-demand and spot, from "
        "SkyPilot's AWS catalog, plus Vast.ai rows of the 2026-05-20 snapshot, **on-demand "
        "only** (the snapshot has no interruptible prices):"),
        ("  - `aws+vast-consumer`, **the issue's market** (the target is checked here): "
        "AWS + Vast's consumer GPUs, i.e. the GeForce rows the GPU table has a row for: "
        "RTX 3090, RTX 4090, RTX 5090 (28 of 64 rows). Left out: Vast's datacenter GPUs "
        "(V100, A100, L40S, H100, H200; the issue takes those from AWS), its workstation "
        "cards (RTX A5000, A6000, 6000 Ada, 5880 Ada, PRO 6000 WS), and the GeForce RTX "
        "3060/4060/4070/5070 rows (5), for which the GPU table has no row (their speed would "
        "be invented)"),
        "  - `aws`: AWS alone (info)",
        ("  - `aws+vast-all`: AWS + every Vast row the GPU table knows, datacenter and "
        "workstation included (info): its 1× V100 at $0.18/h is the cheapest per hour and "
        "less than 20 % dearer per transformer reference-hour than the cheapest to finish "
        "(see the offers below), so no policy can save 20 % on the transformer there"),
        ("- spot availability: Can't-Be-Late AWS traces (1 = available): p3.2xlarge its own "
        "(v100_1); g4dn/g5/g6 **borrow** the p2.xlarge trace (k80_1, rotated 0/3/6 days), p4d "
        "the p3.16xlarge trace (v100_8); us-west-2a/b stand for usw2-az1/az2 (an assumed "
        "pairing). Spot prices are the catalog's, constant"),
        ("- speed of an offer (reference-hours per hour; reference = one A100-80GB): the GPU "
        "table's relative for the job's workload (Lambda fp16 benchmarks, else the spec "
        f"formula: T4, A10G, L4, RTX 5090, L40S are formula rows) × 1 + (n−1)×{SCALING_EFFICIENCY} "
        "for n GPUs. The job runs at exactly the speed the policy is told (no prior error, no "
        "learning)"),
        ("- cheapest-per-hour: cheapest available offer that fits, spot or on-demand, kept until "
        "reclaimed, no deadline knowledge (SkyPilot's / dstack's ranking). arbiter-per-hour: "
        "our policy told every offer runs at speed 1. Neither the omniscient optimum nor "
        "learning from progress is part of this benchmark"),
        ("- a deadline job's cheapest-per-hour runs finish late but finish: their cost is a "
         "full cost to finish, compare it knowing the deadline was missed"),
        "",
        "## Claims",
        "",
        "```",
        *claims(results),
        "```",
        "",
        "## Mean outcomes",
        "",
        ("| job | policy | USD | ÷ cheapest $/h | end h | missed/unfinished | reclaims | spot h "
        "| first on (runs) |"),
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for res in results:
        job, rows = res["job"], res["rows"]
        anchor = rows[CHEAPEST_PER_HOUR]["cost_usd"]
        for p, row in rows.items():
            first = ", ".join(f"{name} ({n})" for name, n in row["first_on"])
            lines.append(
                f"| {res['market']}: {job.name} ({job.compute_h:g} ref-h, ≥{job.min_vram_gib:g} GiB, "
                f"{res['offers']} offers) | {p} | {row['cost_usd']:.2f} | "
                f"{row['cost_usd'] / anchor:.3f} | {row['finish_h']:.1f} | "
                f"{row['misses']}/{row['unfinished']} | {row['preemptions']:.2f} | "
                f"{row['spot_h']:.1f} | {first} |")
    lines += ["", ("A run that did not finish within the simulated horizon counts as missed and "
              "its cost covers only the hours simulated."), "", "## The offers behind them", ""]
    seen = set()
    for res in results:
        key = (res["market"], res["job"].workload, res["job"].min_vram_gib)
        if key not in seen:
            seen.add(key)
            lines.append(f"- {res['market']}, {res['job'].workload} ≥{res['job'].min_vram_gib:g} "
                         f"GiB: {res['cheapest']}")
    worse = [f"{r['market']}: {r['job'].name} (${r['rows'][OURS]['cost_usd']:.2f} vs "
             f"${r['rows'][OURS_PER_HOUR]['cost_usd']:.2f})" for r in results
             if r["rows"][OURS]["cost_usd"] > r["rows"][OURS_PER_HOUR]["cost_usd"] * (1 + 1e-6)
             and r["rows"][OURS_PER_HOUR]["misses"] == 0]
    lines += ["", "Where arbiter paid more than arbiter-per-hour while both met every deadline: "
              + ("; ".join(worse) if worse else "nowhere") + ".", ""]
    lines += ["## The interruption model against the traces", "",
              ("Per spot offer, from the first start to the end of the simulated window: reclaims "
               "the policy's hazard (`policies.risk.hazard_per_h`, 1 ÷ (mean uptime + age), each "
               "tick forecast from the past only) predicts over the ticks the offer is available, "
               "and the reclaims the trace then has. A ratio above 1: the policy under-estimates "
               "how often that offer is reclaimed, so its inflated price is too low. Runs modelled "
               "as the policy's own migration rule models them (Lomax, shape 2, mean remaining "
               "uptime = mean + age) have a hazard of 2 ÷ (mean + age), twice the rate used: the "
               "ratios near 2 are that factor. Where arbiter pays more than arbiter-per-hour, it "
               "is on the offers it alone finds worth it, fast and often reclaimed (8×A100 spot), "
               "whose reclaims it under-counts most."), "",
              "| offer | available | predicted | seen | seen ÷ predicted |", "|---|---:|---:|---:|---:|"]
    done = set()
    for res in results:
        for name, pred, seen, frac in res["hazard"]:
            if name not in done:
                done.add(name)
                lines.append(f"| {name} | {frac:.0%} | {pred:.1f} | {seen} | {seen / pred:.2f} |")
    lines.append("")
    return "\n".join(lines)


def starts_for(runs: int, seed: int, trace_ticks: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.sort(rng.integers(HISTORY_TICKS, trace_ticks, runs))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("RESULTS.md"))
    args = parser.parse_args(argv)
    began = time.monotonic()
    results = []
    for vast in MARKETS:
        replay = build_market(shared_data_dir(), vast)
        trace_ticks = min(len(o.trace.data) for o in replay.offers if o.trace is not None)
        starts = starts_for(args.runs, args.seed, trace_ticks)
        for job in JOBS:
            # long enough for the slowest offer that fits (a T4 at 0.15 takes ~6.7× the work)
            max_ticks = int(np.ceil(3 * job.compute_h / 0.15 / (600 / 3600)))
            results.append(run_job(replay, job, starts, max_ticks))
            print(claims(results[-1:])[0], flush=True)
    command = "python3 benchmarks/heterogeneous/run.py" + (
        f" --runs {args.runs}" if args.runs != 30 else "") + (
        f" --seed {args.seed}" if args.seed != 13 else "")
    args.out.write_text(report(results, command, args.runs, args.seed, time.monotonic() - began))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
