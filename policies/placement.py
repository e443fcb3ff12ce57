"""Placement v1: the cheapest eligible offer.

Ties break on lower interruption risk, then on-demand before spot (same price, no risk of
rework), then the offer's series key, so the answer is deterministic.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from policies.constraints import FilterResult, filter_offers, rejections
from scheduler.models import JobSpec, Market, MarketChoice, Offer, OfferKey


@dataclass(frozen=True)
class PlacementDecision:
    """The chosen offer (``None`` when nothing fits) with the filter result that explains it,
    and the cheapest eligible on-demand price (the all-on-demand baseline), if any."""

    offer: Offer | None
    filtered: FilterResult
    on_demand_reference_usd_per_hour: float | None

    @property
    def reason(self) -> str:
        if self.offer is not None:
            return f"cheapest of {len(self.filtered.eligible)} eligible offers"
        return "no offer fits: " + self.filtered.explain()


def _rank(offer: Offer) -> tuple[float, float, int, str]:
    return (
        offer.price_usd_per_hour,
        offer.interruption_risk,
        0 if offer.market is Market.ON_DEMAND else 1,
        offer.key.series(),
    )


def choose_offer(spec: JobSpec, offers: Iterable[Offer],
                 unavailable: frozenset[OfferKey] | set[OfferKey] = frozenset()) -> PlacementDecision:
    """Pick the cheapest offer that satisfies every constraint of ``spec``.

    Args:
        spec: the job spec.
        offers: the latest offers of every provider.
        unavailable: offer keys excluded for now (see :func:`policies.constraints.filter_offers`).

    Returns:
        A :class:`PlacementDecision`. Pure and deterministic.
    """
    offers = list(offers)
    filtered = filter_offers(spec, offers, unavailable)
    best = min(filtered.eligible, key=_rank, default=None)
    if best is None:
        filtered.rejected_by = rejections(spec, offers, unavailable)
    return PlacementDecision(best, filtered, on_demand_reference(spec, offers))


def on_demand_reference(spec: JobSpec, offers: Iterable[Offer]) -> float | None:
    """Cheapest on-demand price (USD/h) among offers meeting the job's hardware and location
    constraints, ignoring its market, price and risk limits; ``None`` when there is none."""
    as_on_demand = spec.model_copy(update={
        "market": MarketChoice.ON_DEMAND, "max_price_usd_per_hour": None, "max_interruption_risk": None,
    })
    eligible = filter_offers(as_on_demand, offers).eligible
    return min((o.price_usd_per_hour for o in eligible), default=None)
