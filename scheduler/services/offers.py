"""Offer tables for the CLI and API: latest offers joined by instance type and zone, with the
on-demand and spot price side by side (in the spirit of ``sky gpus list``), and since when
each price is in force (its age), which the last poll time does not tell."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from core.models import Market, Offer, utcnow
from scheduler.store import Store
from scheduler.store.history import from_ms, to_ms


def table(store: Store, *, gpu: str | None = None, provider: str | None = None,
          market: str | None = None, min_vram_gib: float = 0) -> list[dict[str, Any]]:
    """Rows ``{gpu_model, gpu_count, vram_gib, provider, region, zone, instance_type,
    on_demand_usd_per_hour, spot_usd_per_hour, interruption_risk, observed_at, price_since,
    price_age_s, source}``, cheapest first. ``gpu`` matches the model case-insensitively;
    ``market`` keeps rows that have it. ``observed_at`` is the last poll; ``price_since`` (ISO,
    UTC) is when the row's spot price (else its on-demand price) started (see
    :func:`price_starts`), ``price_age_s`` the seconds since then (``None`` when unknown).
    ``source`` is the history source of the provider's offers (``real``, ``replay:<market>``)."""
    now = utcnow()
    rows: dict[tuple[str, str, str, str], dict[str, Any]] = {}
    kept = [o for o in store.offers.all_offers()
            if (not gpu or o.gpu_model.lower() == gpu.lower())
            and (not provider or o.provider.lower() == provider.lower())
            and o.vram_gib >= min_vram_gib]
    starts = price_starts(store, kept, now)
    sources = store.offers.history.source_of(o.provider for o in kept)
    for o in kept:
        row = rows.setdefault((o.provider, o.region, o.zone, o.instance_type), {
            "gpu_model": o.gpu_model, "gpu_count": o.gpu_count, "vram_gib": o.vram_gib,
            "provider": o.provider, "region": o.region, "zone": o.zone,
            "instance_type": o.instance_type, "on_demand_usd_per_hour": None,
            "spot_usd_per_hour": None, "interruption_risk": None,
            "observed_at": o.observed_at.isoformat(), "price_since": None,
            "source": sources[o.provider],
        })
        since = starts.get(o.key.series())
        if o.market is Market.ON_DEMAND:
            row["on_demand_usd_per_hour"] = o.price_usd_per_hour
            row["price_since"] = row["price_since"] or since
        else:
            row["spot_usd_per_hour"] = o.price_usd_per_hour
            row["interruption_risk"] = o.interruption_risk
            row["price_since"] = since or row["price_since"]
            if row["on_demand_usd_per_hour"] is None:  # a spot offer knows its on-demand price
                row["on_demand_usd_per_hour"] = o.on_demand_price_usd_per_hour
    out = list(rows.values())
    for r in out:
        r["price_age_s"] = age_s(r["price_since"], now)
    if market == Market.SPOT.value:
        out = [r for r in out if r["spot_usd_per_hour"] is not None]
    elif market == Market.ON_DEMAND.value:
        out = [r for r in out if r["on_demand_usd_per_hour"] is not None]
    out.sort(key=lambda r: (min(p for p in (r["spot_usd_per_hour"], r["on_demand_usd_per_hour"],
                                             float("inf")) if p is not None), r["zone"]))
    return out


def price_starts(store: Store, offers: list[Offer], now: datetime | None = None) -> dict[str, str]:
    """``series -> ISO time`` at which each offer's current price started: the first poll
    that listed it at this price, or earlier when the offer's own price history (its
    provider's source) shows the same price in force since an earlier change (e.g. the time
    AWS stamped the spot price). Offers never polled at their price are left out."""
    names = [o.key.series() for o in offers]
    first_seen = store.offers.price_since(names)
    in_force = store.offers.history.prices_at(names, to_ms(now or utcnow()))
    out = {}
    for o in offers:
        series = o.key.series()
        starts = [first_seen[series]] if series in first_seen else []
        price, since_ms = in_force.get(series, (None, 0))
        if price == o.price_usd_per_hour:
            starts.append(from_ms(since_ms))
        if starts:
            out[series] = min(starts).isoformat()
    return out


def age_s(since_iso: str | None, now: datetime) -> float | None:
    """Seconds from ``since_iso`` to ``now`` (``None`` when unknown)."""
    if not since_iso:
        return None
    return max(0.0, (now - datetime.fromisoformat(since_iso)).total_seconds())
