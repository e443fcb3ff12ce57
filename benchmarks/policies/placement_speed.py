"""Benchmark: decision speed of placing 1,000 pending jobs against 10,000 offers.

One decision = what the daemon's placement step does for all pending jobs at once: evaluate
every job's constraints against every offer (:func:`policies.eligibility.eligible_matrix`),
assemble the views, and run :func:`policies.decisions.decide_placement`. The offer table
(:meth:`OfferTable.from_offers`) is built once per offer poll, so it is timed separately.

Synthetic but shaped like real catalogs: 10,000 offers over 3 providers, 12 regions, 36 zones,
6 GPU models, spot and on-demand; 1,000 jobs with all-distinct specs (GPU count/model, VRAM,
market, provider/region allow-deny lists, price and risk limits), most with deadlines.

Run: ``python3 benchmarks/policies/placement_speed.py [--jobs 1000] [--offers 10000]``; prints
the median of ``--repeat`` runs; the result is recorded in ``RESULTS-speed.md`` with ``--write``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from benchmarks.policies.report import machine
from policies.availability import always_available
from policies.eligibility import eligible_matrix
from policies.decisions import decide_placement
from policies.views import AvailabilityStats, JobView, MarketView, OfferTable
from core.models import JobSpec, Offer

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


def market_view(table: OfferTable, prices: np.ndarray, eligible: np.ndarray,
                rng: np.random.Generator) -> MarketView:
    n, m = eligible.shape
    capacity = ~table.is_spot | (rng.random(m) < 0.8)
    spot = AvailabilityStats(up_age_h=rng.exponential(3.0, m), down_age_h=np.zeros(m),
                             mean_up_h=rng.uniform(0.5, 20.0, m), mean_down_h=rng.uniform(0.2, 5, m),
                             frac=rng.uniform(0.3, 0.95, m))
    full = always_available((m,))
    stats = AvailabilityStats(**{f: np.where(table.is_spot, getattr(spot, f), getattr(full, f))
                                 for f in AvailabilityStats.__dataclass_fields__})
    pool = AvailabilityStats(up_age_h=np.zeros(n), down_age_h=rng.exponential(1.0, n),
                             mean_up_h=np.full(n, 3.0), mean_down_h=np.full(n, 1.0),
                             frac=np.full(n, 0.7))
    return MarketView(offers=table, price_usd_per_hour=prices, available=eligible & capacity,
                      offer_stats=stats, pool_stats=pool)


def jobs_view(n: int, rng: np.random.Generator) -> JobView:
    compute = rng.uniform(1.0, 72.0, n)
    deadline = np.where(rng.random(n) < 0.8, compute * rng.uniform(1.05, 2.0, n), np.inf)
    return JobView.build(n, compute_h=compute, remaining_compute_h=compute,
                         time_to_deadline_h=deadline, restart_overhead_h=0.2,
                         decision_interval_h=1 / 60)


def one_decision(specs, table, prices, rng) -> tuple[float, np.ndarray]:
    t0 = time.perf_counter()
    eligible = eligible_matrix(specs, table, prices)
    market = market_view(table, prices, eligible, rng)
    decision = decide_placement(jobs_view(len(specs), rng), market)
    return time.perf_counter() - t0, decision.offer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--offers", type=int, default=10000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--write", action="store_true", help="record in RESULTS-speed.md")
    args = parser.parse_args(argv)
    load = os.getloadavg()
    rng = np.random.default_rng(0)
    offers = make_offers(args.offers, rng)
    t0 = time.perf_counter()
    table = OfferTable.from_offers(offers)
    prices = np.array([o.price_usd_per_hour for o in offers])
    table_s = time.perf_counter() - t0
    specs = make_specs(args.jobs, rng)
    times, placed = [], None
    for _ in range(args.repeat):
        seconds, placed = one_decision(specs, table, prices, rng)
        times.append(seconds)
    median = statistics.median(times)
    line = (f"{args.jobs} jobs x {args.offers} offers: median {median * 1000:.0f} ms over "
            f"{args.repeat} runs (min {min(times) * 1000:.0f}, max {max(times) * 1000:.0f}); "
            f"{int((placed >= 0).sum())} jobs placed; offer table built in {table_s * 1000:.0f} ms")
    print(line)
    if args.write:
        meta = machine("python3 benchmarks/policies/placement_speed.py " + " ".join(argv or sys.argv[1:]),
                       sum(times), args.repeat, 0)
        (Path(__file__).parent / "RESULTS-speed.md").write_text(
            "# Decision speed: placing pending jobs against offers\n\n"
            "Generated by `benchmarks/policies/placement_speed.py`; do not edit by hand.\n\n"
            f"- command: `{meta['command'].strip()}`\n"
            f"- machine: {meta['nproc']} cores, {meta['cpu']}, Python {meta['python']}\n"
            f"- date: {meta['date']}, commit {meta['commit']}; load average before the run "
            f"{load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (other work shared the 2 cores)\n"
            "- timed: constraints of every job against every offer (vectorised), views, and "
            "`policies.decisions.decide_placement` for all jobs at once; not timed: building the "
            "offer table (once per offer poll, shown separately)\n\n"
            f"**{line}**\n\nAll runs (ms): {', '.join(f'{t * 1000:.0f}' for t in times)}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
