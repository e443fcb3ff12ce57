"""Pure translation of Cloud Billing Catalog SKUs into whole-instance prices. No I/O.

Source: ``services.skus.list`` of the Compute Engine service (``services/6F81-5844-456A``),
asked in USD. Per SKU (REST JSON):

- ``category.resourceFamily`` ``Compute``; ``category.resourceGroup`` ``GPU``, ``CPU``,
  ``RAM`` or ``N1Standard`` (N1's cores and memory); ``category.usageType`` ``OnDemand``
  (on-demand) or ``Preemptible`` (Spot); commitments (``Commit1Yr``…) are left out.
- ``description``: which GPU or series it prices: ``Nvidia L4 GPU running in Iowa``,
  ``Nvidia L4 GPU attached to Spot Preemptible VMs running in Iowa``, ``G2 Instance Core
  running in Americas``, ``Spot Preemptible N1 Predefined Instance Ram running in …``.
  Custom, sole-tenant, premium and reserved SKUs do not match and are left out.
- ``serviceRegions``: the regions it applies to (not the description's place name).
- ``pricingInfo[0].pricingExpression``: ``usageUnit`` ``h`` (per GPU or vCPU hour) or
  ``GiBy.h`` (per GiB-hour), ``tieredRates[].unitPrice{currencyCode, units, nanos}``; the
  price is ``units + nanos / 1e9`` of the first tier (``startUsageAmount`` 0).

A shape's USD/hour is ``vCPUs × core + memory GiB × RAM + GPUs × GPU`` of its series and GPU
model in its region and market (:func:`shape_price`): Compute Engine bills accelerator-
optimized machines and attached GPUs that way (GPU SKUs beside the series' core and RAM SKUs).
A shape missing any of the three has no price there and is not offered.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from core.models import Market, Offer
from providers.gcp.machines import GcpShape
from providers.regional_api import parse_each, price_number

COMPUTE_ENGINE_SERVICE = "services/6F81-5844-456A"
USAGE_TYPES = {"OnDemand": Market.ON_DEMAND, "Preemptible": Market.SPOT}
UNITS = {"GPU": "h", "CORE": "h", "RAM": "GiBy.h"}
_MACHINE_GROUPS = frozenset({"CPU", "RAM", "N1Standard"})
_SERIES_RE = re.compile(r"^(?:Spot Preemptible )?(?P<series>[A-Z][A-Za-z0-9]*(?: Predefined)?) "
                        r"Instance (?P<part>Core|Ram) running in ")
_GPU_RE = re.compile(r"^Nvidia (?:Tesla )?(?P<name>.+?) GPU (?:attached to Spot Preemptible "
                     r"VMs )?running in ")
# The GPU part of a GPU SKU's description → the project's model name, where the two differ.
SKU_GPU_MODELS = {"A100 80GB": "A100-80GB", "H100 80GB": "H100", "H100 80GB Mega": "H100-MEGA",
                  "H100 Mega 80GB": "H100-MEGA", "H100 80GB Plus": "H100-MEGA",
                  "H200 141GB": "H200"}


@dataclass(frozen=True)
class SkuPrice:
    """One SKU's price: ``kind`` ``GPU`` (``name`` a GPU model), ``CORE`` or ``RAM`` (``name``
    a series), per ``UNITS[kind]``, in ``market`` in each of ``regions``."""

    kind: str
    name: str
    market: Market
    regions: tuple[str, ...]
    usd: float


def priced_here(category: dict[str, Any]) -> bool:
    """Whether a SKU of this ``category`` can price one of our shapes (the rest of the
    catalog, storage, network, licences, commitments, is never read further)."""
    return (category.get("resourceFamily") == "Compute"
            and category.get("usageType") in USAGE_TYPES
            and category.get("resourceGroup") in _MACHINE_GROUPS | {"GPU"})


def _subject(sku: dict[str, Any]) -> tuple[str, str] | None:
    """(kind, name) that ``sku`` prices, or None when it is none of ours."""
    category = sku.get("category") or {}
    group, description = category.get("resourceGroup"), str(sku.get("description") or "")
    if group == "GPU":
        match = _GPU_RE.match(description)
        if not match or "Virtual Workstation" in description:
            return None
        name = match.group("name")
        return "GPU", SKU_GPU_MODELS.get(name, name.upper())
    if group in _MACHINE_GROUPS:
        match = _SERIES_RE.match(description)
        if match:
            return ("CORE" if match.group("part") == "Core" else "RAM"), match.group("series")
    return None


def unit_price_usd(sku: dict[str, Any]) -> tuple[str, float]:
    """(``usageUnit``, USD per unit) of the first tier of ``pricingInfo[0]``. Raises
    ``ValueError`` naming the field when it is missing or not in USD."""
    try:
        expression = sku["pricingInfo"][0]["pricingExpression"]
        tiers = sorted(expression["tieredRates"],
                       key=lambda t: float(t.get("startUsageAmount") or 0))
        price = tiers[0]["unitPrice"]
    except (KeyError, IndexError, TypeError, ValueError):
        raise ValueError(f"SKU {sku.get('skuId')!r}: pricingInfo[0].pricingExpression."
                         "tieredRates[0].unitPrice missing") from None
    if price.get("currencyCode") != "USD":
        raise ValueError(f"SKU {sku.get('skuId')!r}: currencyCode {price.get('currencyCode')!r}"
                         " (asked for USD)")
    units = price_number(price.get("units") or 0, "unitPrice.units")
    nanos = price_number(price.get("nanos") or 0, "unitPrice.nanos")
    return str(expression.get("usageUnit") or ""), units + nanos / 1e9


def sku_price(sku: dict[str, Any]) -> SkuPrice | None:
    """One SKU → :class:`SkuPrice`, or None when it prices nothing we offer (see the module
    docstring). Raises ``ValueError`` naming the field for a SKU of ours in another shape."""
    category = sku.get("category") or {}
    if not priced_here(category):
        return None
    market = USAGE_TYPES[str(category.get("usageType"))]
    subject = _subject(sku)
    if subject is None:
        return None
    kind, name = subject
    unit, usd = unit_price_usd(sku)
    if unit != UNITS[kind]:
        raise ValueError(f"SKU {sku.get('skuId')!r}: usageUnit {unit!r}, expected {UNITS[kind]!r}")
    regions = tuple(str(r) for r in sku.get("serviceRegions") or ())
    return SkuPrice(kind, name, market, regions, usd)


class PriceBook:
    """USD per unit by (kind, name, market, region), from the SKUs of :func:`sku_prices`.
    Immutable once built; safe to share between threads."""

    def __init__(self, prices: Iterable[SkuPrice]) -> None:
        self._usd: dict[tuple[str, str, Market, str], float] = {}
        for p in prices:
            for region in p.regions:
                key = (p.kind, p.name, p.market, region)
                # Two SKUs for one key (e.g. a renamed one kept alive): the lower price holds.
                self._usd[key] = min(p.usd, self._usd.get(key, p.usd))

    def __len__(self) -> int:
        return len(self._usd)

    def get(self, kind: str, name: str, market: Market, region: str) -> float | None:
        return self._usd.get((kind, name, market, region))


def sku_prices(skus: Iterable[dict[str, Any]]) -> tuple[PriceBook, int]:
    """A :class:`PriceBook` of ``skus`` (lazily consumed: pages are never held whole) and the
    number of SKUs of ours skipped as malformed."""
    prices, skipped = parse_each(skus, sku_price)
    return PriceBook(prices), skipped


def shape_price(book: PriceBook, shape: GcpShape, region: str, market: Market) -> float | None:
    """The whole instance's USD/hour (see the module docstring), None when a part is unpriced."""
    core = book.get("CORE", shape.series, market, region)
    ram = book.get("RAM", shape.series, market, region)
    gpu = book.get("GPU", shape.gpu_model, market, region)
    if core is None or ram is None or gpu is None:
        return None
    return shape.vcpus * core + shape.memory_gib * ram + shape.gpu_count * gpu


# GCP sends ACPI G3 Mechanical Off 30 s after a Spot VM's preemption notice.
SPOT_NOTICE_S = 30.0


def zone_offers(region: str, zone: str, shapes: dict[str, GcpShape], book: PriceBook,
                markets: Iterable[Market], observed_at: datetime) -> list[Offer]:
    """The offers of one zone: per shape, an on-demand offer (risk 0) and a spot offer (risk
    None: Google rates none; notice 30 s; with the on-demand price beside it) wherever
    :func:`shape_price` prices the shape in ``region``. ``observed_at`` is aware UTC."""
    wanted = set(markets)
    out: list[Offer] = []
    for name in sorted(shapes):
        shape = shapes[name]
        on_demand = shape_price(book, shape, region, Market.ON_DEMAND)
        if Market.ON_DEMAND in wanted and on_demand is not None:
            out.append(shape.offer("gcp", region, zone, Market.ON_DEMAND, on_demand, on_demand,
                                   0.0, observed_at))
        spot = shape_price(book, shape, region, Market.SPOT)
        if Market.SPOT in wanted and spot is not None:
            offer = shape.offer("gcp", region, zone, Market.SPOT, spot, on_demand, None,
                                observed_at)
            out.append(offer.model_copy(update={"interruption_notice_s": SPOT_NOTICE_S}))
    return out
