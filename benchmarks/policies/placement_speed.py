"""Benchmark: decision speed of placing 1,000 pending jobs against 10,000 offers.

One decision = what the daemon's placement step does for all pending jobs at once: evaluate
every job's constraints against every offer (:func:`policies.eligibility.eligible_matrix`,
offers without capacity passed as ``unavailable``, so that its matrix is the view's
``available`` as in :func:`scheduler.controller.policy_inputs.inputs_many`), assemble the
views, and run :func:`policies.decisions.decide_placement`. The offer table
(:meth:`OfferTable.from_offers`) is built once per offer poll, so it is timed separately.

Synthetic but shaped like real catalogs: 10,000 offers over 3 providers, 12 regions, 36 zones,
6 GPU models, spot and on-demand; 1,000 jobs with all-distinct specs (GPU count/model, VRAM,
market, provider/region allow-deny lists, price and risk limits), most with deadlines.

Side by side in one run, on the same inputs, alternating: **new** (the current policies: specs
grouped by kind, the decision on the candidate pairs) and **old** (the dense-grid reference the
equivalence tests keep, ``tests/unit/policies/reference_*.py``); every decision of the two is
checked identical. Wall and CPU (process) time are both reported: the machine is shared.

Run: ``python3 benchmarks/policies/placement_speed.py [--jobs 1000] [--offers 10000]
[--speeds none|per-job]``; prints median and p99 of ``--repeat`` runs of each; recorded in
``RESULTS-speed.md`` with ``--write``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from benchmarks.policies.report import machine  # noqa: E402
from core.models import JobSpec, Offer  # noqa: E402
from policies import decisions, eligibility  # noqa: E402
from policies.availability import always_available  # noqa: E402
from policies.views import (  # noqa: E402
    AvailabilityStats,
    JobView,
    MarketView,
    OfferTable,
    with_speed,
)
from tests.unit.policies import reference_decisions, reference_eligibility  # noqa: E402

PATHS = {"new": (eligibility.eligible_matrix, decisions.decide_placement),
         "old": (reference_eligibility.eligible_matrix, reference_decisions.decide_placement)}

GPUS = (("T4", 16), ("A10G", 24), ("L4", 24), ("V100", 16), ("A100", 40), ("H100", 80))
PROVIDERS = ("aws", "gcp", "azure")
T0 = datetime(2026, 11, 30, tzinfo=UTC)


def make_offers(m: int, rng: np.random.Generator) -> list[Offer]:
    out = []
    for i in range(m):
        provider = PROVIDERS[i % 3]
        region = f"region-{int(rng.integers(4))}"
        gpu, vram = GPUS[int(rng.integers(len(GPUS)))]
        count = int(rng.choice([1, 2, 4, 8]))
        spot = bool(rng.random() < 0.6)
        od_price = round(float(rng.uniform(0.3, 4.0)) * count, 4)
        out.append(Offer(
            provider=provider, region=region, zone=f"{region}-{'abc'[int(rng.integers(3))]}",
            instance_type=f"type-{i}", market="spot" if spot else "on-demand", gpu_model=gpu,
            gpu_count=count, vram_gib=vram, vcpus=8 * count, memory_gib=32.0 * count,
            price_usd_per_hour=round(od_price * (float(rng.uniform(0.25, 0.5)) if spot else 1), 4),
            on_demand_price_usd_per_hour=od_price,
            interruption_risk=float(rng.choice([0.05, 0.1, 0.15, 0.2])) if spot else 0.0,
            observed_at=T0))
    return out


def make_specs(n: int, rng: np.random.Generator) -> list[JobSpec]:
    specs = []
    for i in range(n):
        fields = {
            "name": f"job-{i}", "command": "python train.py",
            "resources": {"gpu_count": int(rng.choice([1, 1, 2, 4])),
                          "min_vram_gib": float(rng.choice([0, 16, 24, 40])),
                          "gpu_models": [GPUS[int(k)][0] for k in rng.choice(6, 2, replace=False)]
                          if rng.random() < 0.4 else None},
            "market": str(rng.choice(["auto", "auto", "spot", "on-demand"])),
            "providers": {"deny": [PROVIDERS[i % 3]]} if rng.random() < 0.3 else {},
            "regions": {"allow": [f"region-{int(rng.integers(4))}"]} if rng.random() < 0.3 else {},
            # all-distinct specs: a price limit unique to each job
            "max_price_usd_per_hour": round(5.0 + i / 1000.0, 4),
        }
        if rng.random() < 0.3:
            fields["max_interruption_risk"] = 0.15
        specs.append(JobSpec.model_validate(fields))
    return specs


def market_inputs(table: OfferTable, n: int, rng: np.random.Generator) -> dict:
    """The random parts of a market view (capacity, availability stats), drawn once per run so
    that both paths see the same market."""
    m = len(table)
    return {"capacity": ~table.is_spot | (rng.random(m) < 0.8),
            "up_age_h": rng.exponential(3.0, m), "mean_up_h": rng.uniform(0.5, 20.0, m),
            "mean_down_h": rng.uniform(0.2, 5, m), "frac": rng.uniform(0.3, 0.95, m),
            "pool_down_age_h": rng.exponential(1.0, n)}


def market_view(table: OfferTable, prices: np.ndarray, eligible: np.ndarray,
                inputs: dict) -> MarketView:
    """The view over ``eligible`` (``(n, m)``, offers without capacity already refused)."""
    n, m = eligible.shape
    spot = AvailabilityStats(up_age_h=inputs["up_age_h"], down_age_h=np.zeros(m),
                             mean_up_h=inputs["mean_up_h"], mean_down_h=inputs["mean_down_h"],
                             frac=inputs["frac"])
    full = always_available((m,))
    stats = AvailabilityStats(**{f: np.where(table.is_spot, getattr(spot, f), getattr(full, f))
                                 for f in AvailabilityStats.__dataclass_fields__})
    pool = AvailabilityStats(up_age_h=np.zeros(n), down_age_h=inputs["pool_down_age_h"],
                             mean_up_h=np.full(n, 3.0), mean_down_h=np.full(n, 1.0),
                             frac=np.full(n, 0.7))
    return MarketView(offers=table, price_usd_per_hour=prices,
                      available=eligible, offer_stats=stats, pool_stats=pool)


def jobs_view(n: int, rng: np.random.Generator) -> JobView:
    compute = rng.uniform(1.0, 72.0, n)
    deadline = np.where(rng.random(n) < 0.8, compute * rng.uniform(1.05, 2.0, n), np.inf)
    return JobView.build(n, compute_h=compute, remaining_compute_h=compute,
                         time_to_deadline_h=deadline, restart_overhead_h=0.2,
                         decision_interval_h=1 / 60)


def one_decision(path: str, specs, table, prices, capacity, jobs, speed) -> tuple[float, float, object]:
    """``(wall s, CPU s, decision)`` of one placement step on the given inputs."""
    eligible_matrix, decide_placement = PATHS[path]
    w0, c0 = time.perf_counter(), time.process_time()
    eligible = eligible_matrix(specs, table, prices, ~capacity["capacity"])
    market = market_view(table, prices, eligible, capacity)
    if speed is not None:
        market = with_speed(market, speed)
    decision = decide_placement(jobs, market)
    return time.perf_counter() - w0, time.process_time() - c0, decision


def _stats(values: list[float]) -> str:
    ms = np.array(values) * 1000
    return (f"median {np.median(ms):.0f} ms, p99 {np.percentile(ms, 99):.0f} ms, "
            f"min {ms.min():.0f} ms")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--offers", type=int, default=10000)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--speeds", choices=("none", "per-job"), default="none",
                        help="per-job: every job its own (n, m) speeds (the daemon's speed model)")
    parser.add_argument("--write", action="store_true", help="record in RESULTS-speed.md")
    args = parser.parse_args(argv)
    load = open("/proc/loadavg").read().strip() if os.path.exists("/proc/loadavg") else "?"
    rng = np.random.default_rng(0)
    offers = make_offers(args.offers, rng)
    t0 = time.perf_counter()
    table = OfferTable.from_offers(offers)
    prices = np.array([o.price_usd_per_hour for o in offers])
    table_s = time.perf_counter() - t0
    specs = make_specs(args.jobs, rng)
    wall = {p: [] for p in PATHS}
    cpu = {p: [] for p in PATHS}
    placed = 0
    for k in range(args.repeat):
        views = market_inputs(table, args.jobs, rng)
        jobs = jobs_view(args.jobs, rng)
        speed = rng.choice([0.5, 1.0, 2.0, 4.0], (args.jobs, args.offers)) \
            if args.speeds == "per-job" else None
        got = {}
        for p in (("new", "old") if k % 2 == 0 else ("old", "new")):
            w, c, got[p] = one_decision(p, specs, table, prices, views, jobs, speed)
            wall[p].append(w)
            cpu[p].append(c)
        if not (np.array_equal(got["new"].offer, got["old"].offer)
                and np.array_equal(got["new"].reason, got["old"].reason)):
            raise SystemExit(f"run {k}: the new and old decisions differ")
        placed = int((got["new"].offer >= 0).sum())
    ratio = np.median(wall["old"]) / np.median(wall["new"])
    lines = [f"{args.jobs} jobs x {args.offers} offers, speeds {args.speeds}, {args.repeat} runs "
             f"each; {placed} jobs placed, decisions identical in every run; offer table built "
             f"in {table_s * 1000:.0f} ms"]
    for p in PATHS:
        lines.append(f"{p}: wall {_stats(wall[p])}; CPU {_stats(cpu[p])}")
    lines.append(f"old / new (median wall): {ratio:.1f}x")
    print("\n".join(lines))
    if args.write:
        meta = machine("python3 benchmarks/policies/placement_speed.py " + " ".join(argv or sys.argv[1:]),
                       sum(wall["new"]) + sum(wall["old"]), args.repeat, 0)
        out = Path(__file__).parent / "RESULTS-speed.md"
        head = ("# Decision speed: placing pending jobs against offers\n\n"
                "Generated by `benchmarks/policies/placement_speed.py`; do not edit by hand "
                "(one section per `--speeds`).\n\n"
                "Timed: constraints of every job against every offer (offers without "
                "capacity refused as unavailable, as the daemon does), views, and "
                "`decide_placement` for all jobs at once; not timed: building the offer table "
                "(once per offer poll, shown separately). **new** is the current code, **old** "
                "the dense-grid reference (`tests/unit/policies/reference_*.py`), run "
                "alternately on the same inputs. The machine is shared (its load is given per "
                "section): the CPU time of the process is the steadier figure, the minimum the "
                "least disturbed run.\n")
        sections = {}
        if out.exists() and "## speeds" in out.read_text():
            for part in out.read_text().split("\n## speeds ")[1:]:
                sections[part.split("\n", 1)[0].strip()] = "## speeds " + part.rstrip() + "\n"
        sections[args.speeds] = (
            f"## speeds {args.speeds}\n\n"
            f"- command: `{meta['command'].strip()}`\n"
            f"- machine: {meta['nproc']} cores, {meta['cpu']}, Python {meta['python']}\n"
            f"- date: {meta['date']}, commit {meta['commit']}; `/proc/loadavg` before the run: "
            f"`{load}`\n\n" + "\n".join(f"- {line}" for line in lines) + "\n\n"
            + "\n".join(f"All runs, {p} (wall ms): "
                        + ", ".join(f"{t * 1000:.0f}" for t in wall[p]) for p in PATHS) + "\n")
        out.write_text(head + "\n" + "\n".join(sections[k] for k in sorted(sections)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
