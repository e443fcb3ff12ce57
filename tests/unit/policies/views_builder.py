"""Small hand-made markets for the policy tests: offers from tests.factories.offers, availability
statistics written down directly (what the history would have said)."""

from __future__ import annotations

import numpy as np

from policies.availability import always_available
from policies.views import AvailabilityStats, MarketView, OfferTable
from tests.factories.offers import offer

SPOT, OD = "spot", "on-demand"


def offers(*rows: tuple[str, str, float]) -> list:
    """``(zone, market, price)`` rows → Offer models (p3.2xlarge, us-west-2)."""
    return [offer(zone=zone, market=market, price_usd_per_hour=price,
                  interruption_risk=0.1 if market == SPOT else 0.0)
            for zone, market, price in rows]


def market(models: list, *, available=None, mean_up_h=2.0, up_age_h=0.0, mean_down_h=1.0,
           down_age_h=0.0, frac=0.8, corr=None, n=1,
           pool: AvailabilityStats | None = None) -> MarketView:
    """A :class:`MarketView` of ``models`` for ``n`` identical jobs. Spot stats take scalars or
    ``(m,)`` arrays (ignored for on-demand offers); the pool stats default to the spot offers'
    first values."""
    table = OfferTable.from_offers(models)
    m = len(models)
    avail = np.ones(m, bool) if available is None else np.asarray(available, bool)
    spot = AvailabilityStats(
        up_age_h=np.broadcast_to(np.asarray(up_age_h, float), (m,)).copy(),
        down_age_h=np.broadcast_to(np.asarray(down_age_h, float), (m,)).copy(),
        mean_up_h=np.broadcast_to(np.asarray(mean_up_h, float), (m,)).copy(),
        mean_down_h=np.broadcast_to(np.asarray(mean_down_h, float), (m,)).copy(),
        frac=np.broadcast_to(np.asarray(frac, float), (m,)).copy())
    full = always_available((m,))
    stats = AvailabilityStats(**{f: np.where(table.is_spot, getattr(spot, f), getattr(full, f))
                                 for f in AvailabilityStats.__dataclass_fields__})
    if pool is None:
        first = int(np.argmax(table.is_spot)) if table.is_spot.any() else 0
        pool = AvailabilityStats(**{f: np.full(n, getattr(spot, f)[first] if m else 0.0)
                                    for f in AvailabilityStats.__dataclass_fields__})
        if not table.is_spot.any():
            pool = AvailabilityStats(**{**pool.__dict__, "frac": np.zeros(n)})
    return MarketView(
        offers=table, price_usd_per_hour=np.array([o.price_usd_per_hour for o in models]),
        available=avail, offer_stats=stats, pool_stats=pool, zone_correlation=corr)
