"""Constraint filters: which offers a job spec admits, and why the others were refused.

Each constraint is a named predicate over (spec, offer). :func:`filter_offers` applies them in a
fixed order and counts, per constraint, how many offers it was the *first* to remove, so that a
"nothing fits" answer can say which constraint to relax. :func:`explain_no_fit` is that answer,
with the figures the rejected offers report (VRAM per GPU model, the cheapest rejected price, ...)
and the names of the spec that no provider ever listed (:func:`unknown_names`).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from core.models import JobSpec, Offer, OfferKey

Predicate = Callable[[JobSpec, Offer], bool]


def _gpu_models_ok(spec: JobSpec, offer: Offer) -> bool:
    models = spec.resources.gpu_models
    if not models:
        return True
    return offer.gpu_model.lower() in {m.lower() for m in models}


def _risk_ok(spec: JobSpec, offer: Offer) -> bool:
    limit = spec.max_interruption_risk
    return limit is None or offer.interruption_risk <= limit


def _capacity_ok(spec: JobSpec, offer: Offer) -> bool:
    # A gang needs room for all its nodes at once; one instance is checked at launch.
    nodes = spec.resources.nodes
    return nodes <= 1 or offer.capacity is None or offer.capacity >= nodes


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
    ("nodes", _capacity_ok),
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
    details: dict[str, str] = field(default_factory=dict)

    def explain(self) -> str:
        """Human summary, e.g. ``12 offers, 0 eligible: min_vram_gib removed 8, market removed
        4``; with :attr:`rejected_by` filled (see :func:`rejections`), every constraint that
        rejects offers is listed with how many it rejects on its own (``;``-separated), with
        its :attr:`details` when there are some (``min_vram_gib rejects 3 offers under 24 GiB
        per GPU: A10G 22.35 GiB ...``, see :func:`rejection_details`)."""
        total = len(self.eligible) + sum(self.removed.values())
        if total == 0:
            return "the market has no offers"
        head = f"{total} offers (spot and on-demand counted apart), {len(self.eligible)} eligible"
        if self.rejected_by is not None:
            parts = [self.details.get(name) or f"{name} rejects {n}"
                     for name, n in self.rejected_by.items() if n]
            return head + (": " + "; ".join(parts) if parts else "")
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


# At most this many figures per constraint in a "nothing fits" answer.
_MAX_FIGURES = 6
_MIB_PER_GIB = 1024.0


def _num(value: float) -> str:
    return f"{value:,.2f}".rstrip("0").rstrip(".")


def _vram(offers: list[Offer]) -> str:
    """Per GPU model the VRAM sizes the offers report, largest first: ``A10G 22.35 GiB =
    22,888 MiB as aws reports it``. A size that is a whole number of MiB but not of GiB came
    from MiB (EC2 reports MiB): saying so shows why "24 GB" cards fail ``min_vram_gib: 24``."""
    sizes: dict[tuple[str, float], set[str]] = {}
    for o in offers:
        sizes.setdefault((o.gpu_model, o.vram_gib), set()).add(o.provider)
    parts = []
    for (model, gib), providers in sorted(sizes.items(), key=lambda kv: (-kv[0][1], kv[0][0])):
        text = f"{model} {_num(gib)} GiB"
        mib = gib * _MIB_PER_GIB
        if gib != round(gib) and abs(mib - round(mib)) < 1e-6:
            who = ", ".join(sorted(providers))
            text += f" = {round(mib):,} MiB as {who} report{'s' if len(providers) == 1 else ''} it"
        parts.append(text)
    more = " …" if len(parts) > _MAX_FIGURES else ""
    return ", ".join(parts[:_MAX_FIGURES]) + more


def rejection_details(spec: JobSpec, offers: Iterable[Offer]) -> dict[str, str]:
    """Per numeric constraint that rejects some of ``offers``: how many it rejects on its own,
    its limit, and what those offers report, e.g. ``{"min_vram_gib": "min_vram_gib rejects 30
    offers under 24 GiB per GPU: A10G 22.35 GiB = 22,888 MiB as aws reports it, T4 16 GiB"}``;
    for ``max_price_usd_per_hour`` the cheapest rejected price, for ``max_interruption_risk``
    the lowest rejected risk, for ``gpu_count``/``min_vcpus``/``min_memory_gib`` the largest
    rejected figure, for ``nodes`` (a gang) the largest rejected capacity
    (``nodes rejects 2 offers: 4 nodes wanted; offer has capacity 3``). Pure."""
    checks = dict(CONSTRAINTS)
    rejected: dict[str, list[Offer]] = {}
    for offer in offers:
        for name in ("gpu_count", "min_vram_gib", "min_vcpus", "min_memory_gib", "nodes",
                     "max_price_usd_per_hour", "max_interruption_risk"):
            if not checks[name](spec, offer):
                rejected.setdefault(name, []).append(offer)
    res = spec.resources
    out = {}
    for name, bad in rejected.items():
        head = f"{name} rejects {len(bad)} offer{'s' if len(bad) != 1 else ''}"
        if name == "min_vram_gib":
            out[name] = f"{head} under {_num(res.min_vram_gib)} GiB per GPU: {_vram(bad)}"
        elif name == "gpu_count":
            out[name] = f"{head} under {res.gpu_count} GPUs: the largest has " \
                        f"{max(o.gpu_count for o in bad)}"
        elif name == "min_vcpus":
            out[name] = f"{head} under {res.min_vcpus} vCPUs: the largest has " \
                        f"{max(o.vcpus for o in bad)}"
        elif name == "min_memory_gib":
            out[name] = f"{head} under {_num(res.min_memory_gib)} GiB of memory: the largest " \
                        f"has {_num(max(o.memory_gib for o in bad))} GiB"
        elif name == "nodes":
            most = max(o.capacity or 0 for o in bad)
            out[name] = f"{head}: {res.nodes} nodes wanted; offer has capacity {most}" \
                if len(bad) == 1 else \
                f"{head}: {res.nodes} nodes wanted; the largest offer has capacity {most}"
        elif name == "max_price_usd_per_hour":
            cheapest = min(bad, key=lambda o: o.price_usd_per_hour)
            out[name] = (f"{head} above ${spec.max_price_usd_per_hour:.4f}/h: the cheapest of "
                         f"them is ${cheapest.price_usd_per_hour:.4f}/h ({cheapest.provider}/"
                         f"{cheapest.zone} {cheapest.instance_type} {cheapest.market.value})")
        else:
            low = min(o.interruption_risk for o in bad)
            out[name] = (f"{head} above {_num(spec.max_interruption_risk)}: the lowest of "
                         f"them is {_num(low)}")
    return out


# Spec fields that name things offers carry, and the offer attribute each is matched against.
NAME_FIELDS: tuple[tuple[str, str], ...] = (
    ("providers.allow", "provider"), ("providers.deny", "provider"),
    ("regions.allow", "region"), ("regions.deny", "region"),
    ("zones.allow", "zone"), ("zones.deny", "zone"),
    ("resources.gpu_models", "gpu_model"),
)


def _spec_names(spec: JobSpec, path: str) -> list[str]:
    if path == "resources.gpu_models":
        return list(spec.resources.gpu_models or [])
    group, side = path.split(".")
    return list(getattr(getattr(spec, group), side))


def unknown_names(spec: JobSpec, known: Mapping[str, Iterable[str] | None]) -> list[str]:
    """Names in the spec's allow/deny lists and ``gpu_models`` that match no name in ``known``.

    Args:
        known: per offer attribute (``provider``, ``region``, ``zone``, ``gpu_model``) every
            name the configured providers ever listed; ``None`` (or missing) for an attribute
            whose names are not known (nothing listed yet, or too many to keep): its names are
            not checked.

    Returns:
        One message per unknown name, with the closest known names (``difflib``), e.g.
        ``regions.allow: 'us-west2' matches no region any provider has listed (closest:
        us-west-2)``. GPU models match case-insensitively, as placement does. Pure.
    """
    out = []
    for path, attr in NAME_FIELDS:
        names = known.get(attr)
        if not names:
            continue
        names = sorted(set(names))
        fold = attr == "gpu_model"
        index = {n.lower(): n for n in names} if fold else {n: n for n in names}
        for name in _spec_names(spec, path):
            if (name.lower() if fold else name) in index:
                continue
            close = difflib.get_close_matches(name.lower() if fold else name, list(index), n=3,
                                              cutoff=0.6)
            hint = f" (closest: {', '.join(index[c] for c in close)})" if close else ""
            label = attr.replace("_", " ")
            out.append(f"{path}: {name!r} matches no {label} any configured provider has "
                       f"listed{hint}")
    return out


def explain_no_fit(spec: JobSpec, offers: Iterable[Offer],
                   unavailable: frozenset[OfferKey] | set[OfferKey] = frozenset(),
                   known: Mapping[str, Iterable[str] | None] | None = None) -> str:
    """Why no offer fits ``spec``: ``"no offer fits: "`` + every constraint that rejects
    offers, with how many and (numeric ones) what the offers report, then the spec's names
    no provider ever listed when ``known`` is given (:func:`unknown_names`). Pure."""
    offers = list(offers)
    if spec.providers.allow:
        # A job pinned to some providers: what the others lack says nothing to its user.
        allowed = [o for o in offers if spec.providers.permits(o.provider)]
        if not allowed:
            unknown = unknown_names(spec, known or {})
            return (f"no offer fits: the allowed providers ({', '.join(spec.providers.allow)}) "
                    "list no offer now (an SSH fleet lists none while its hosts are full, "
                    "drained or unreachable)" + ("; " + "; ".join(unknown) if unknown else ""))
        offers = allowed
    filtered = filter_offers(spec, offers, unavailable)
    filtered.rejected_by = rejections(spec, offers, unavailable)
    filtered.details = rejection_details(spec, offers)
    text = "no offer fits: " + filtered.explain()
    unknown = unknown_names(spec, known or {})
    return text + ("; " + "; ".join(unknown) if unknown else "")
