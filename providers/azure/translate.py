"""Pure translation of Azure answers to offers and prices: no I/O, no clock (VMs are
:mod:`.instances`).

Sources of each input:

- Resource SKUs (``GET /subscriptions/{id}/providers/Microsoft.Compute/skus``, api-version
  2021-07-01, ``$filter=location eq '<location>'``; shape of
  ``shared/data/api_examples/azure/compute_resource_skus_*``): ``resourceType``
  ``virtualMachines``; ``name`` (the VM size); ``family`` → GPU model (:mod:`.families`);
  ``capabilities[]`` ``GPUs`` (count), ``vCPUs``, ``MemoryGB`` (host memory, GiB),
  ``LowPriorityCapable`` (``False``: no Spot); ``locationInfo[].zones`` (availability zones);
  ``restrictions[]`` with ``reasonCode`` (``NotAvailableForSubscription``…): ``type``
  ``Location`` (not offered in ``restrictionInfo.locations``) or ``Zone`` (not offered in
  ``restrictionInfo.zones``).
- Retail Prices items (``https://prices.azure.com/api/retail/prices``, ``Items[]``):
  ``armSkuName``, ``armRegionName``, ``skuName`` (Spot rows end in ``" Spot"``, low-priority
  rows in ``" Low Priority"``), ``productName`` (Windows products contain ``" Windows"`` or
  ``" Win"``), ``type`` (``Consumption``; ``DevTestConsumption`` and ``Reservation`` rows are
  other prices), ``reservationTerm``, ``unitOfMeasure`` ``1 Hour``, ``retailPrice`` in
  ``currencyCode``, ``isPrimaryMeterRegion``.

An offer's zone is ``<location>-<zone>`` (``eastus-2``) for a size with availability zones,
else the location itself.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from core.models import Market, Offer, PriceObservation
from providers.azure import families
from providers.regional_api import GpuType, parse_each, price_number, series

PROVIDER = "azure"
# Scheduled Events publishes a Preempt event at least 30 s before a Spot VM is evicted.
SPOT_NOTICE_S = 30.0
_WINDOWS_MARKS = (" Windows", " Win")


@dataclass(frozen=True)
class GpuSize(GpuType):
    """One GPU VM size in one location: ``zones`` where it may be created (restricted zones
    left out; ``()`` for a location without zones) and whether it can be a Spot VM."""

    zones: tuple[str, ...] = ()
    spot_capable: bool = True


def _capabilities(sku: Mapping[str, Any]) -> dict[str, str]:
    return {str(c.get("name")): str(c.get("value")) for c in sku.get("capabilities") or []}


def _restricted(sku: Mapping[str, Any], location: str) -> tuple[bool, set[str]]:
    """(whether the whole location is restricted, the restricted zones) for ``sku``."""
    whole, zones = False, set()
    for r in sku.get("restrictions") or []:
        info = r.get("restrictionInfo") or {}
        places = {str(v).lower() for v in (info.get("locations") or r.get("values") or [])}
        if location not in places:
            continue
        if r.get("type") == "Location":
            whole = True
        elif r.get("type") == "Zone":
            zones |= {str(z) for z in info.get("zones") or []}
    return whole, zones


def gpu_size(sku: Mapping[str, Any], location: str) -> GpuSize | None:
    """A Resource SKU → :class:`GpuSize` in ``location``, or None when it is not a VM size
    with GPUs of a known family, is not in ``location``, or is restricted there (all of the
    location, or every zone of a zonal size).

    Raises ``ValueError`` naming the field when a GPU size lacks ``vCPUs`` or ``MemoryGB`` or
    has a count that is not a number.
    """
    if sku.get("resourceType") != "virtualMachines":
        return None
    name = str(sku.get("name") or "")
    model = families.gpu_model(str(sku.get("family") or ""))
    caps = _capabilities(sku)
    if model is None:
        return None
    try:
        count = int(caps.get("GPUs") or families.GPU_COUNT_BY_SIZE.get(name) or 0)
        vcpus = int(caps["vCPUs"])
        memory_gib = float(caps["MemoryGB"])
    except (KeyError, ValueError):
        raise ValueError(f"VM size {name!r}: capabilities GPUs, vCPUs or MemoryGB missing or "
                         "not a number") from None
    vram = families.vram_gib(name, model)
    if count <= 0 or vram is None:
        return None
    infos = [i for i in sku.get("locationInfo") or []
             if str(i.get("location", "")).lower() == location]
    if not infos:
        return None
    whole, restricted_zones = _restricted(sku, location)
    all_zones = sorted({str(z) for i in infos for z in i.get("zones") or []})
    zones = tuple(z for z in all_zones if z not in restricted_zones)
    if whole or (all_zones and not zones):
        return None
    return GpuSize(instance_type=name, gpu_model=model, gpu_count=count, vcpus=vcpus,
                   memory_gib=memory_gib, vram_gib=vram, zones=zones,
                   spot_capable=caps.get("LowPriorityCapable", "True").lower() == "true")


def gpu_sizes(skus: Iterable[Mapping[str, Any]], location: str,
              wanted: Callable[[str], bool] | None = None) -> tuple[dict[str, GpuSize], int]:
    """VM size → :class:`GpuSize` of the GPU sizes among ``skus`` (lazily consumed) offered in
    ``location``, only those ``wanted(name)`` selects when given; and the number of SKUs
    skipped as malformed."""
    def parse(sku: Mapping[str, Any]) -> GpuSize | None:
        size = gpu_size(sku, location)
        return size if size is not None and (wanted is None or wanted(size.instance_type)) \
            else None
    sizes, skipped = parse_each(skus, parse)
    return {s.instance_type: s for s in sizes}, skipped


def offer_zones(location: str, size: GpuSize) -> list[str]:
    """The offer zones of ``size``: ``<location>-<zone>`` per availability zone, or the
    location for a size without zones."""
    return [f"{location}-{z}" for z in size.zones] or [location]


# ----- retail prices -----------------------------------------------------------------------
@dataclass(frozen=True)
class RetailPrice:
    """One usable Retail Prices row: ``price_usd_per_hour`` of ``size`` in ``market``."""

    size: str
    market: Market
    price_usd_per_hour: float


def retail_price(item: Mapping[str, Any], location: str) -> RetailPrice | None:
    """One Retail Prices item → :class:`RetailPrice`, or None when it is another price than
    the Linux pay-as-you-go or Spot hour of a VM in ``location`` (DevTest, reservation,
    savings plan, low priority, Windows, another location, a non-primary meter, a price of 0).

    Raises ``ValueError`` naming the field when ``armSkuName``, ``skuName`` or
    ``retailPrice`` is missing or not a price, or the price is not in USD.
    """
    try:
        size, sku_name = str(item["armSkuName"]), str(item["skuName"])
        price = price_number(item["retailPrice"], "retailPrice")
    except KeyError as exc:
        raise ValueError(f"retail price item lacks {exc}") from None
    if (item.get("type") != "Consumption" or item.get("reservationTerm")
            or item.get("savingsPlan") or item.get("isPrimaryMeterRegion") is False
            or str(item.get("armRegionName", "")).lower() != location
            or item.get("unitOfMeasure", "1 Hour") != "1 Hour"
            or sku_name.endswith(" Low Priority")
            or any(mark in str(item.get("productName", "")) for mark in _WINDOWS_MARKS)
            or not size or price <= 0 or not math.isfinite(price)):
        return None
    if item.get("currencyCode", "USD") != "USD":
        raise ValueError(f"currencyCode {item.get('currencyCode')!r} is not USD")
    market = Market.SPOT if sku_name.endswith(" Spot") else Market.ON_DEMAND
    return RetailPrice(size=size, market=market, price_usd_per_hour=price)


def retail_prices(items: Iterable[Mapping[str, Any]], location: str, sizes: Iterable[str]
                  ) -> tuple[dict[Market, dict[str, float]], int]:
    """market → VM size → USD/hour for ``sizes`` in ``location`` from Retail Prices items
    (lazily consumed: a long paged answer is never held whole); when a size has two rows of
    one market, the lower price. Returns (prices, items skipped as malformed)."""
    wanted = set(sizes)
    found, skipped = parse_each(items, lambda item: retail_price(item, location))
    prices: dict[Market, dict[str, float]] = {Market.SPOT: {}, Market.ON_DEMAND: {}}
    for p in found:
        if p.size in wanted:
            by_size = prices[p.market]
            by_size[p.size] = min(p.price_usd_per_hour, by_size.get(p.size, math.inf))
    return prices, skipped


# ----- offers and observations --------------------------------------------------------------
def build_offers(location: str, sizes: Mapping[str, GpuSize],
                 prices: Mapping[Market, Mapping[str, float]], *, markets: Iterable[Market],
                 observed_at: datetime) -> list[Offer]:
    """Per GPU size and offer zone, an on-demand offer when the size has a pay-as-you-go price
    and a Spot offer when it is Spot-capable and has a Spot price. Spot offers are unrated
    (``interruption_risk`` None: Azure publishes no eviction rate per size) and carry
    ``interruption_notice_s`` 30; on-demand offers risk 0."""
    wanted = set(markets)
    offers: list[Offer] = []
    for name in sorted(sizes):
        size = sizes[name]
        on_demand = prices.get(Market.ON_DEMAND, {}).get(name)
        spot = prices.get(Market.SPOT, {}).get(name) if size.spot_capable else None
        for zone in offer_zones(location, size):
            if Market.ON_DEMAND in wanted and on_demand is not None:
                offers.append(size.offer(PROVIDER, location, zone, Market.ON_DEMAND, on_demand,
                                         on_demand, 0.0, observed_at))
            if Market.SPOT in wanted and spot is not None:
                offers.append(size.offer(PROVIDER, location, zone, Market.SPOT, spot, on_demand,
                                         None, observed_at).model_copy(
                    update={"interruption_notice_s": SPOT_NOTICE_S}))
    return offers


def spot_observations(location: str, sizes: Mapping[str, GpuSize], spot: Mapping[str, float],
                      fetched_at: datetime) -> list[PriceObservation]:
    """One Spot observation per (offer zone, Spot-capable size) with a price in ``spot``,
    stamped ``fetched_at`` (the Retail Prices API says what a price is now, not since when)."""
    return [PriceObservation(series=series(PROVIDER, location, zone, name, Market.SPOT),
                             observed_at=fetched_at, price_usd_per_hour=spot[name])
            for name in sorted(spot) if name in sizes and sizes[name].spot_capable
            for zone in offer_zones(location, sizes[name])]
