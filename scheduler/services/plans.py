"""``schedctl plan job.yaml``: what a job will cost and how long it will take, before it runs.

For each offer that fits the job spec (latest offers; when there are none, the latest prices
in history), price quantiles come from the offer's own history over a lookback window
(``p10``, time-weighted ``mean``, ``p90``; the current price when it has none). Interruptions
follow the offer's interruption risk ``r`` (monthly frequency) as a Poisson process of rate
``λ = -ln(1 - r) / 730 h``; each one loses on average half a checkpoint sync interval of work
plus a restart (launch, restore: ``restart_overhead_h``). With ``H`` compute hours:

- expected duration ``T = H / (1 - λ·c)`` where ``c`` = hours lost per interruption (the job
  never finishes when ``λ·c ≥ 1``); low ``H``; high ``H + n90·c`` with ``n90`` the 90th
  percentile of a Poisson count of mean ``λ·T``;
- cost low ``H × p10``, expected ``T × mean``, high ``T_high × p90`` (USD, instance prices).

Three scenarios: all **on-demand** (the cheapest fitting on-demand offer, ignoring the job's
market, price and risk limits, as the savings baseline does), **spot** (the fitting spot offer
of lowest expected cost) and the **policy** (what :func:`_policy_choice` would place the job
on now), plus the five fitting offers of lowest expected cost.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Any

from policies.constraints import filter_offers
from scheduler.models import JobSpec, Market, MarketChoice, Offer, utcnow
from scheduler.services import jobs as job_service
from scheduler.services.history import parse_when
from scheduler.services.history_stats import Accumulator
from scheduler.store import Store
from scheduler.store.history import from_ms, to_ms

HOURS_PER_MONTH = 730.0
# Relaunch + restore after an interruption on a real cloud: a few minutes (instance boot,
# agent start, checkpoint download).
RESTART_OVERHEAD_H = 0.1
# Spot offers rebuilt from history carry no risk figure; assume the Spot Advisor's middle
# bucket (10-15 %/month) rather than pretend they never fail.
UNKNOWN_SPOT_RISK = 0.15


def _policy_choice(spec: JobSpec, offers: list[Offer], unavailable: set) -> tuple[Offer | None, str]:
    """The one place plans call the placement policy (being rewritten: swap it here)."""
    from policies.placement import choose_offer

    decision = choose_offer(spec, offers, unavailable)
    return decision.offer, decision.reason


def interruption_rate_per_hour(risk: float) -> float:
    """Monthly interruption frequency ``risk`` in [0, 1] → Poisson rate per hour."""
    if risk <= 0:
        return 0.0
    if risk >= 1:
        return math.inf
    return -math.log1p(-risk) / HOURS_PER_MONTH


def poisson_quantile(mean: float, q: float = 0.9) -> int:
    """Smallest ``n`` with P(N ≤ n) ≥ ``q`` for N ~ Poisson(``mean``)."""
    if mean <= 0:
        return 0
    n, term = 0, math.exp(-mean)
    total = term
    while total < q and n < 100_000:
        n += 1
        term *= mean / n
        total += term
    return n


def estimate(offer: Offer, prices: dict[str, float], compute_hours: float, sync_interval_s: float,
             restart_overhead_h: float = RESTART_OVERHEAD_H) -> dict[str, Any]:
    """Duration and cost range of ``compute_hours`` on ``offer`` (see the module docstring).

    Args:
        prices: ``p10``, ``mean``, ``p90`` (USD/hour) and ``hours`` of history behind them.
        sync_interval_s: the job's checkpoint sync interval, seconds.
    Returns:
        The offer's identity, prices, risk, ``expected_interruptions``, ``rework_hours``,
        ``duration_hours`` and ``cost_usd`` as ``{"low", "expected", "high"}`` (``None`` when
        the job would never finish).
    """
    rate = interruption_rate_per_hour(offer.interruption_risk) if offer.market is Market.SPOT else 0.0
    lost_h = sync_interval_s / 2 / 3600 + restart_overhead_h
    row: dict[str, Any] = {
        "series": offer.key.series(), "provider": offer.provider, "region": offer.region,
        "zone": offer.zone, "instance_type": offer.instance_type, "market": offer.market.value,
        "gpu_model": offer.gpu_model, "gpu_count": offer.gpu_count,
        "price_now": offer.price_usd_per_hour, "price_p10": prices["p10"],
        "price_mean": prices["mean"], "price_p90": prices["p90"],
        "history_hours": prices["hours"], "interruption_risk": offer.interruption_risk,
    }
    if rate * lost_h >= 1:
        return {**row, "expected_interruptions": None, "rework_hours": None,
                "duration_hours": None, "cost_usd": None}
    expected_h = compute_hours / (1 - rate * lost_h)
    interruptions = rate * expected_h
    high_h = compute_hours + poisson_quantile(interruptions) * lost_h
    high_h = max(high_h, expected_h)
    return {**row, "expected_interruptions": interruptions, "rework_hours": expected_h - compute_hours,
            "duration_hours": {"low": compute_hours, "expected": expected_h, "high": high_h},
            "cost_usd": {"low": compute_hours * prices["p10"], "expected": expected_h * prices["mean"],
                         "high": high_h * prices["p90"]}}


def _history_prices(store: Store, offers: list[Offer], start_ms: int, end_ms: int) -> dict[str, dict[str, float]]:
    history = store.offers.history
    names = sorted({o.key.series() for o in offers})
    metas = history.metas(names)
    live = history.live(list(metas))
    out = {}
    for series, meta in metas.items():
        hi = end_ms if series in live else min(end_ms, meta.last_seen_ms)
        lo = max(start_ms, meta.first_ms)
        if lo > hi:
            continue
        acc = Accumulator()
        acc.add(*history.pieces(meta, lo, hi))
        stats = acc.result()
        if stats:
            out[series] = stats
    return out


def _offers_from_history(store: Store) -> list[Offer]:
    """Offers rebuilt from each series' latest price (hardware from the map)."""
    from scheduler.services.history import select_series

    history = store.offers.history
    matched = [(s, k, hw) for s, k, hw in select_series(store) if hw]
    metas = history.metas([s for s, _, _ in matched])
    # Every point is at or before the newest last_seen: one batch gives each series' last price.
    latest = history.prices_at(list(metas), max((m.last_seen_ms for m in metas.values()), default=0))
    out = []
    for series, key, hw in matched:
        meta, found = metas.get(series), latest.get(series)
        if meta is None or found is None:
            continue
        out.append(Offer(
            provider=key.provider, region=key.region, zone=key.zone,
            instance_type=key.instance_type, market=key.market, gpu_model=str(hw["gpu_model"]),
            gpu_count=int(hw["gpu_count"]), vram_gib=float(hw["vram_gib"]),
            vcpus=int(hw.get("vcpus") or 0), memory_gib=float(hw.get("memory_gib") or 0),
            price_usd_per_hour=found[0], observed_at=from_ms(meta.last_seen_ms),
            interruption_risk=UNKNOWN_SPOT_RISK if key.market is Market.SPOT else 0.0))
    return out


def plan(store: Store, raw_spec: Any, compute_hours: float | None = None, lookback: str = "30d",
         restart_overhead_h: float = RESTART_OVERHEAD_H, now: datetime | None = None) -> dict[str, Any]:
    """The plan of a job spec (a mapping, as submitted).

    Args:
        compute_hours: instance-hours the job needs without interruptions (default: the
            spec's ``expected_hours``, else 1: the result is then per compute hour).
        lookback: history window for the price quantiles (``30d``, ``1y``, an ISO date).

    Returns:
        ``{"job", "compute_hours", "compute_hours_source" ("option", "spec" or "default"),
        "gpu_hours", "budget_usd" (the spec's, or None), "over_budget" (scenario names whose
        expected cost exceeds it), "lookback_since", "offers_source", "eligible",
        "scenarios": {"on-demand", "spot", "policy"}, "best_offers", "assumptions"}``; a
        scenario is an :func:`estimate` or ``None`` when nothing fits. With a budget, every
        estimate carries ``over_budget`` (its expected cost exceeds ``budget_usd``).

    Raises:
        SpecError: the spec is invalid. QueryError: a bad ``lookback``.
        ValueError: ``compute_hours`` is not positive.
    """
    spec = job_service.parse_spec(raw_spec)
    if compute_hours is not None:
        hours, hours_source = float(compute_hours), "option"
    elif spec.expected_hours is not None:
        hours, hours_source = float(spec.expected_hours), "spec"
    else:
        hours, hours_source = 1.0, "default"
    if not hours > 0:
        raise ValueError(f"compute_hours: got {compute_hours}; must be > 0")
    now = now or utcnow()
    since = parse_when(lookback, "lookback", now) or now - timedelta(days=30)
    offers, source = store.offers.all_offers(), "latest offers"
    if not offers:
        offers, source = _offers_from_history(store), "latest prices in history"
    unavailable = store.offers.unavailable()
    as_spot = spec.model_copy(update={"market": MarketChoice.SPOT})
    as_on_demand = spec.model_copy(update={"market": MarketChoice.ON_DEMAND,
                                           "max_price_usd_per_hour": None,
                                           "max_interruption_risk": None})
    eligible = filter_offers(spec, offers, unavailable).eligible
    spot = filter_offers(as_spot, offers, unavailable).eligible
    on_demand = filter_offers(as_on_demand, offers, unavailable).eligible
    chosen, reason = _policy_choice(spec, offers, unavailable)
    pool = {o.key.series(): o for o in [*eligible, *spot, *on_demand] + ([chosen] if chosen else [])}
    stats = _history_prices(store, list(pool.values()), to_ms(since), to_ms(now))
    interval = spec.checkpoint.sync_interval_s

    def est(o: Offer) -> dict[str, Any]:
        s = stats.get(o.key.series())
        prices = ({"p10": s["p10"], "mean": s["mean"], "p90": s["p90"], "hours": s["hours"]} if s
                  else {"p10": o.price_usd_per_hour, "mean": o.price_usd_per_hour,
                        "p90": o.price_usd_per_hour, "hours": 0.0})
        row = estimate(o, prices, hours, interval, restart_overhead_h)
        if spec.budget_usd is not None:
            # A job that never finishes overruns any budget.
            row["over_budget"] = row["cost_usd"] is None or \
                row["cost_usd"]["expected"] > spec.budget_usd
        return row

    def best(candidates: list[Offer]) -> list[dict[str, Any]]:
        rows = [est(o) for o in candidates]
        return sorted(rows, key=lambda r: (r["cost_usd"] is None,
                                           r["cost_usd"]["expected"] if r["cost_usd"] else 0, r["series"]))

    policy = est(chosen) if chosen else None
    if policy is not None:
        policy["reason"] = reason
    scenarios = {"on-demand": next(iter(best(on_demand)), None),
                 "spot": next(iter(best(spot)), None),
                 "policy": policy if chosen else {"reason": reason}}
    return {
        "job": spec.name, "compute_hours": hours, "compute_hours_source": hours_source,
        "gpu_hours": hours * spec.resources.gpu_count, "budget_usd": spec.budget_usd,
        "over_budget": [name for name, est in scenarios.items() if (est or {}).get("over_budget")],
        "lookback_since": since.isoformat(), "offers_source": source, "eligible": len(eligible),
        "scenarios": scenarios,
        "best_offers": best(eligible)[:5],
        "assumptions": {"sync_interval_s": interval, "restart_overhead_h": restart_overhead_h,
                        "hours_per_month": HOURS_PER_MONTH,
                        "unknown_spot_risk": UNKNOWN_SPOT_RISK},
    }
