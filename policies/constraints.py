"""Constraint filters: which offers a job spec admits, and why the others were refused.

Each constraint is a named predicate over (spec, offer). :func:`filter_offers` applies them in a
fixed order and counts, per constraint, how many offers it was the *first* to remove, so that a
"nothing fits" answer can say which constraint to relax.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from scheduler.models import JobSpec, Offer, OfferKey

Predicate = Callable[[JobSpec, Offer], bool]


def _gpu_models_ok(spec: JobSpec, offer: Offer) -> bool:
    models = spec.resources.gpu_models
    if not models:
        return True
    return offer.gpu_model.lower() in {m.lower() for m in models}


def _risk_ok(spec: JobSpec, offer: Offer) -> bool:
    limit = spec.max_interruption_risk
    return limit is None or offer.interruption_risk <= limit


def _price_ok(spec: JobSpec, offer: Offer) -> bool:
    limit = spec.max_price_usd_per_hour
    return limit is None or offer.price_usd_per_hour <= limit


# Order matters only for the explanation: hardware first (what the job cannot run without), then
# where, then market and money. Names are what users see in "no offer fits" messages.
CONSTRAINTS: tuple[tuple[str, Predicate], ...] = (
    ("gpu_count", lambda s, o: o.gpu_count >= s.resources.gpu_count),
    ("gpu_models", _gpu_models_ok),
    ("min_vram_gib", lambda s, o: o.vram_gib >= s.resources.min_vram_gib),
    ("min_vcpus", lambda s, o: o.vcpus >= s.resources.min_vcpus),
    ("min_memory_gib", lambda s, o: o.memory_gib >= s.resources.min_memory_gib),
    ("providers", lambda s, o: s.providers.permits(o.provider)),
    ("regions", lambda s, o: s.regions.permits(o.region)),
    ("zones", lambda s, o: s.zones.permits(o.zone)),
    ("market", lambda s, o: s.market.allows(o.market)),
    ("max_price_usd_per_hour", _price_ok),
    ("max_interruption_risk", _risk_ok),
)

UNAVAILABLE = "unavailable"


@dataclass
class FilterResult:
    """Offers that passed, and per constraint name the number of offers it removed first.

    ``removed`` may also hold ``"unavailable"``: offers the controller marked as lacking capacity.
    """

    eligible: list[Offer] = field(default_factory=list)
    removed: dict[str, int] = field(default_factory=dict)
    rejected_by: dict[str, int] | None = None

    def explain(self) -> str:
        """Human summary, e.g. ``12 offers, 0 eligible: min_vram_gib removed 8, market removed
        4``; with :attr:`rejected_by` filled (see :func:`rejections`), every constraint that
        rejects offers is listed with how many it rejects on its own."""
        total = len(self.eligible) + sum(self.removed.values())
        if total == 0:
            return "the market has no offers"
        head = f"{total} offers (spot and on-demand counted apart), {len(self.eligible)} eligible"
        if self.rejected_by is not None:
            parts = [f"{name} rejects {n}" for name, n in self.rejected_by.items() if n]
        else:
            parts = [f"{name} removed {n}" for name, n in self.removed.items() if n]
        return head + (": " + ", ".join(parts) if parts else "")


def filter_offers(spec: JobSpec, offers: Iterable[Offer],
                  unavailable: frozenset[OfferKey] | set[OfferKey] = frozenset()) -> FilterResult:
    """Apply every constraint of ``spec`` to ``offers``.

    Args:
        spec: the job spec.
        offers: candidate offers.
        unavailable: offer keys that must not be used now (capacity errors, a zone just lost).

    Returns:
        A :class:`FilterResult`; ``eligible`` keeps the input order.
    """
    result = FilterResult(removed={name: 0 for name, _ in CONSTRAINTS} | {UNAVAILABLE: 0})
    for offer in offers:
        failed = next((name for name, ok in CONSTRAINTS if not ok(spec, offer)), None)
        if failed is None and offer.key in unavailable:
            failed = UNAVAILABLE
        if failed is None:
            result.eligible.append(offer)
        else:
            result.removed[failed] += 1
    return result


def rejections(spec: JobSpec, offers: Iterable[Offer],
               unavailable: frozenset[OfferKey] | set[OfferKey] = frozenset()) -> dict[str, int]:
    """Per constraint, how many of ``offers`` it rejects on its own (counts overlap), so a user
    can see every constraint to relax at once, not only the first one in order."""
    counts = {name: 0 for name, _ in CONSTRAINTS} | {UNAVAILABLE: 0}
    for offer in offers:
        for name, ok in CONSTRAINTS:
            if not ok(spec, offer):
                counts[name] += 1
        if offer.key in unavailable:
            counts[UNAVAILABLE] += 1
    return counts
