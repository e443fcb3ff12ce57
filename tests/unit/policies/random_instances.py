"""Seeded random decision instances for the equivalence tests: offer tables with many exact
and near ties, job views with every optional field (deadlines, gangs, preemptions, budgets,
checkpoints, running instances), markets with or without speeds and zone correlation."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np

from core.models import JobSpec, Offer
from policies.availability import always_available
from policies.views import (
    NO_OFFER,
    NO_ZONE,
    AvailabilityStats,
    JobView,
    MarketView,
    OfferTable,
)

GPUS = (("T4", 16), ("A10G", 24), ("L4", 24), ("A100", 40), ("H100", 80))
PROVIDERS = ("aws", "gcp", "azure")
T0 = datetime(2026, 11, 30, tzinfo=UTC)
FIELDS = tuple(AvailabilityStats.__dataclass_fields__)


def offers(rng: np.random.Generator, m: int) -> list[Offer]:
    """``m`` offers; prices from a short list (exact ties) plus tiny jitters (near ties)."""
    out = []
    base = rng.choice([0.5, 1.0, 1.5, 2.0, 3.0], size=max(m, 1))
    for i in range(m):
        region = f"region-{int(rng.integers(3))}"
        gpu, vram = GPUS[int(rng.integers(len(GPUS)))]
        spot = bool(rng.random() < 0.6)
        od = float(base[i])
        price = od * (float(rng.choice([0.3, 0.5])) if spot else 1.0)
        if rng.random() < 0.3:
            price += float(rng.choice([1e-12, 1e-10, 3e-9, 1e-6]))
        out.append(Offer(
            provider=PROVIDERS[int(rng.integers(3))], region=region,
            zone=f"{region}-{'ab'[int(rng.integers(2))]}", instance_type=f"type-{i}",
            market="spot" if spot else "on-demand", gpu_model=gpu,
            gpu_count=int(rng.choice([1, 2, 4])), vram_gib=vram, vcpus=8, memory_gib=32.0,
            price_usd_per_hour=round(price, 14), on_demand_price_usd_per_hour=od,
            interruption_risk=float(rng.choice([0.05, 0.1])) if spot else 0.0,
            interruption_notice_s=float(rng.choice([0.0, 30.0, 120.0])) if rng.random() < 0.5
            else None,
            capacity=int(rng.integers(0, 4)) if rng.random() < 0.3 else None,
            observed_at=T0))
    return out


def specs(rng: np.random.Generator, n: int) -> list[JobSpec]:
    """``n`` job specs touching every vectorised constraint."""
    out = []
    for i in range(n):
        fields = {
            "name": f"job-{i}", "command": "python train.py",
            "resources": {"gpu_count": int(rng.choice([1, 1, 2, 4])),
                          "min_vram_gib": float(rng.choice([0, 16, 24, 40])),
                          "min_vcpus": int(rng.choice([0, 0, 8, 16])),
                          "nodes": int(rng.choice([1, 1, 1, 2, 3])),
                          "gpu_models": [GPUS[int(k)][0] for k in rng.choice(5, 2, replace=False)]
                          if rng.random() < 0.4 else None},
            "market": str(rng.choice(["auto", "auto", "spot", "on-demand"])),
        }
        if rng.random() < 0.3:
            fields["providers"] = {"deny": [PROVIDERS[int(rng.integers(3))]]}
        if rng.random() < 0.3:
            fields["regions"] = {"allow": [f"region-{int(rng.integers(3))}", "nowhere"]}
        if rng.random() < 0.2:
            fields["zones"] = {"deny": [f"region-{int(rng.integers(3))}-a"]}
        if rng.random() < 0.6:
            fields["max_price_usd_per_hour"] = float(rng.choice([0.3, 0.5, 1.0, 1.5, 2.5]))
        if rng.random() < 0.3:
            fields["max_interruption_risk"] = float(rng.choice([0.0, 0.05, 0.1]))
        out.append(JobSpec.model_validate(fields))
    return out


def market(rng: np.random.Generator, table: OfferTable, prices: np.ndarray, n: int,
           speed: str = "none", correlation: bool = False, density: float = 0.5) -> MarketView:
    """A market for ``n`` jobs: ``available`` ``(n, m)``; ``speed`` one of ``none``, ``shared``
    (``(m,)``), ``per_job`` (``(n, m)``), with some unusable (0, nan, inf, negative) and tied speeds."""
    m = len(table)
    avail = rng.random((n, m)) < density
    spot_stats = AvailabilityStats(
        up_age_h=rng.choice([0.0, 1.0, 5.0], m), down_age_h=np.zeros(m),
        mean_up_h=rng.choice([0.5, 2.0, 10.0], m), mean_down_h=rng.uniform(0.2, 3.0, m),
        frac=rng.uniform(0.3, 0.95, m))
    full = always_available((m,))
    stats = AvailabilityStats(**{f: np.where(table.is_spot, getattr(spot_stats, f),
                                             getattr(full, f)) for f in FIELDS})
    pool = AvailabilityStats(up_age_h=np.zeros(n), down_age_h=rng.exponential(1.0, n),
                             mean_up_h=rng.choice([1.0, 3.0], n), mean_down_h=np.ones(n),
                             frac=rng.choice([0.0, 0.7], n))
    corr = None
    if correlation and len(table.zone_names):
        z = len(table.zone_names)
        corr = np.clip(rng.uniform(-0.5, 1.0, (z, z)), -1, 1)
        np.fill_diagonal(corr, 1.0)
    view = MarketView(offers=table, price_usd_per_hour=prices, available=avail,
                      offer_stats=stats, pool_stats=pool, zone_correlation=corr)
    if speed == "none":
        return view
    shape = (m,) if speed == "shared" else (n, m)
    s = rng.choice([0.5, 1.0, 1.0, 2.0, 4.0], shape) * np.where(rng.random(shape) < 0.1, 0.0, 1.0)
    s = np.where(rng.random(shape) < 0.03, np.nan, s)
    s = np.where(rng.random(shape) < 0.02, rng.choice([np.inf, -1.0]), s)
    return MarketView(**{**view.__dict__, "speed": s})


def jobs(rng: np.random.Generator, n: int, m: int, running: float = 0.0,
         zones: int = 1) -> JobView:
    """``n`` jobs; a share ``running`` runs on a random offer (with a start age, a previous
    offer and progress since the last checkpoint)."""
    compute = rng.choice([0.5, 2.0, 10.0, 40.0], n) * rng.choice([1.0, 1.0, 1.3], n)
    remaining = np.where(rng.random(n) < 0.1, np.nan,
                         np.where(rng.random(n) < 0.05, 0.0, compute * rng.uniform(0.2, 1.0, n)))
    deadline = np.where(rng.random(n) < 0.7, compute * rng.choice([0.9, 1.1, 1.5, 3.0], n),
                        np.inf)
    on = (rng.random(n) < running) & (m > 0)
    current = np.where(on, rng.integers(0, max(m, 1), n), NO_OFFER)
    preempted = rng.random(n) < 0.3
    return JobView.build(
        n, compute_h=compute, remaining_compute_h=remaining, time_to_deadline_h=deadline,
        current=current, overhead_left_h=np.where(on, rng.choice([0.0, 0.1], n), 0.0),
        restart_overhead_h=rng.choice([0.0, 0.1, 0.25], n),
        decision_interval_h=rng.choice([1 / 60, 0.25], n),
        move_extra_h=rng.choice([0.0, 0.05], n),
        checkpoint_interval_h=rng.choice([0.0, 0.5, 1.0], n),
        checkpoint_age_h=np.where(on, rng.uniform(0, 1.0, n), 0.0),
        final_checkpoint_s=rng.choice([0.0, 60.0, np.inf], n),
        last_preempted_zone=np.where(preempted, rng.integers(0, max(zones, 1), n), NO_ZONE),
        since_preemption_h=np.where(preempted, rng.choice([0.5, 3.0, 10.0], n), np.inf),
        since_start_h=np.where(on, rng.choice([0.2, 2.0, 8.0], n), np.inf),
        previous=np.where(rng.random(n) < 0.3, rng.integers(0, max(m, 1), n), NO_OFFER),
        spent_usd=rng.choice([0.0, 50.0, 100.0], n),
        budget_usd=rng.choice([np.inf, np.inf, 100.0], n),
        nodes=rng.choice([1.0, 1.0, 1.0, 2.0, 3.0], n))
