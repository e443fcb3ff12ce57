"""Offer tables for the CLI and API: latest offers joined by instance type and zone, with the
on-demand and spot price side by side (in the spirit of ``sky gpus list``)."""

from __future__ import annotations

from typing import Any

from scheduler.models import Market
from scheduler.store import Store


def table(store: Store, *, gpu: str | None = None, provider: str | None = None,
          market: str | None = None, min_vram_gib: float = 0) -> list[dict[str, Any]]:
    """Rows ``{gpu_model, gpu_count, vram_gib, provider, region, zone, instance_type,
    on_demand_usd_per_hour, spot_usd_per_hour, interruption_risk, observed_at}``, cheapest
    first. ``gpu`` matches the model case-insensitively; ``market`` keeps rows that have it."""
    rows: dict[tuple[str, str, str, str], dict[str, Any]] = {}
    for o in store.offers.all_offers():
        if gpu and o.gpu_model.lower() != gpu.lower():
            continue
        if provider and o.provider.lower() != provider.lower():
            continue
        if o.vram_gib < min_vram_gib:
            continue
        row = rows.setdefault((o.provider, o.region, o.zone, o.instance_type), {
            "gpu_model": o.gpu_model, "gpu_count": o.gpu_count, "vram_gib": o.vram_gib,
            "provider": o.provider, "region": o.region, "zone": o.zone,
            "instance_type": o.instance_type, "on_demand_usd_per_hour": None,
            "spot_usd_per_hour": None, "interruption_risk": None,
            "observed_at": o.observed_at.isoformat(),
        })
        if o.market is Market.ON_DEMAND:
            row["on_demand_usd_per_hour"] = o.price_usd_per_hour
        else:
            row["spot_usd_per_hour"] = o.price_usd_per_hour
            row["interruption_risk"] = o.interruption_risk
            if row["on_demand_usd_per_hour"] is None:  # a spot offer knows its on-demand price
                row["on_demand_usd_per_hour"] = o.on_demand_price_usd_per_hour
    out = list(rows.values())
    if market == Market.SPOT.value:
        out = [r for r in out if r["spot_usd_per_hour"] is not None]
    elif market == Market.ON_DEMAND.value:
        out = [r for r in out if r["on_demand_usd_per_hour"] is not None]
    out.sort(key=lambda r: (min(p for p in (r["spot_usd_per_hour"], r["on_demand_usd_per_hour"],
                                             float("inf")) if p is not None), r["zone"]))
    return out
