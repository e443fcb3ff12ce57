"""The all-on-demand baseline of a job: the cheapest on-demand offer its hardware and location
constraints admit. Placement itself is
:func:`policies.decisions.decide_placement`."""

from __future__ import annotations

from collections.abc import Iterable

from core.models import JobSpec, MarketChoice, Offer
from policies.constraints import filter_offers


def on_demand_reference(spec: JobSpec, offers: Iterable[Offer]) -> float | None:
    """Cheapest on-demand price (USD/h) among offers meeting the job's hardware and location
    constraints, ignoring its market, price and risk limits; ``None`` when there is none. For a
    gang of N nodes: N × that price, among offers with room for N instances (capacity unknown
    or >= N): what running the whole gang on on-demand costs per hour."""
    as_on_demand = spec.model_copy(update={
        "market": MarketChoice.ON_DEMAND, "max_price_usd_per_hour": None, "max_interruption_risk": None,
    })
    eligible = filter_offers(as_on_demand, offers).eligible
    cheapest = min((o.price_usd_per_hour for o in eligible), default=None)
    nodes = spec.resources.nodes
    return cheapest if cheapest is None or nodes == 1 else nodes * cheapest
