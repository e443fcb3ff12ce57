"""Pure translation of AWS API dicts to offers and prices: no I/O, no clock (instances are
:mod:`.instances`).

Sources of each input (all boto3 response shapes, or the documented file formats):

- ``InstanceTypeInfo`` (``ec2.describe_instance_types``): GPUs from ``GpuInfo.Gpus[]``
  (``Name``, ``Manufacturer``, ``Count``, ``MemoryInfo.SizeInMiB`` per GPU), vCPUs from
  ``VCpuInfo.DefaultVCpus``, host memory from ``MemoryInfo.SizeInMiB``. VRAM is kept as AWS
  reports it (A10G: 22,888 MiB = 22.35 GiB, not the marketed 24 GB).
- ``InstanceTypeOffering`` (``describe_instance_type_offerings``, availability-zone).
- ``SpotPrice`` (``describe_spot_price_history``): ``SpotPrice`` is a decimal string in USD per
  hour, ``Timestamp`` a datetime (or ISO-8601 string in recorded dumps).
- Price List product documents (``pricing.get_products`` ``PriceList[]`` JSON strings):
  ``product.attributes.instanceType`` and
  ``terms.OnDemand.<offer>.priceDimensions.<rate>.pricePerUnit.USD`` with ``unit`` ``Hrs``.
- The Spot Instance Advisor file: ``spot_advisor[region][os][type] = {"s": savings %, "r":
  bucket}`` (the shared README calls the top key ``spot_data``; both are accepted).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from core.models import Market, Offer, PriceObservation
from providers.regional_api import GpuType, aware_utc, parse_each, price_number, series

PROVIDER = "aws"
MIB_PER_GIB = 1024.0
SPOT_PRODUCT_DESCRIPTION = "Linux/UNIX"
ADVISOR_OS = "Linux"
# Spot Advisor bucket r → monthly interruption frequency (Offer.interruption_risk): the midpoint
# of each bucket's label (<5 %, 5-10 %, 10-15 %, 15-20 %), and 25 % for ">20 %" (open-ended; a
# representative value, not a bound).
RISK_BY_BUCKET: dict[int, float] = {0: 0.025, 1: 0.075, 2: 0.125, 3: 0.175, 4: 0.25}

# ----- instance types ------------------------------------------------------------------------
@dataclass(frozen=True)
class GpuInstanceType(GpuType):
    """One GPU instance type; ``usage_classes`` says whether AWS sells it ``on-demand`` and/or
    ``spot``."""

    gpu_manufacturer: str = ""
    usage_classes: frozenset[str] = field(default_factory=lambda: frozenset({"on-demand", "spot"}))


def gpu_instance_type(info: dict[str, Any]) -> GpuInstanceType | None:
    """``InstanceTypeInfo`` → :class:`GpuInstanceType`, or None when the type has no GPU.

    A type with several GPU entries is described by the first (AWS lists one per type today);
    ``gpu_count`` is their sum. Raises ``ValueError`` naming the field when a GPU type lacks
    ``VCpuInfo.DefaultVCpus`` or ``MemoryInfo.SizeInMiB``.
    """
    gpus = (info.get("GpuInfo") or {}).get("Gpus") or []
    count = sum(int(g.get("Count") or 0) for g in gpus)
    if count <= 0:
        return None
    name = str(info.get("InstanceType") or "")
    first = gpus[0]
    try:
        vcpus = int(info["VCpuInfo"]["DefaultVCpus"])
        memory_mib = float(info["MemoryInfo"]["SizeInMiB"])
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"instance type {name!r}: VCpuInfo.DefaultVCpus or "
                         "MemoryInfo.SizeInMiB missing") from None
    vram_mib = float((first.get("MemoryInfo") or {}).get("SizeInMiB") or 0)
    usage = frozenset(info.get("SupportedUsageClasses") or ("on-demand", "spot"))
    return GpuInstanceType(
        instance_type=name, gpu_model=str(first.get("Name") or "unknown"),
        gpu_manufacturer=str(first.get("Manufacturer") or ""), gpu_count=count,
        vram_gib=vram_mib / MIB_PER_GIB, vcpus=vcpus, memory_gib=memory_mib / MIB_PER_GIB,
        usage_classes=usage,
    )


def gpu_instance_types(infos: Iterable[dict[str, Any]]) -> dict[str, GpuInstanceType]:
    """instance type → :class:`GpuInstanceType` for the GPU types among ``infos`` (consumed
    lazily, so a paginated iterator is never held in memory whole). Malformed GPU entries are
    skipped (see :func:`gpu_instance_type`)."""
    gpus, _ = parse_each(infos, gpu_instance_type)
    return {gpu.instance_type: gpu for gpu in gpus}


def zones_by_type(offerings: Iterable[dict[str, Any]]) -> dict[str, tuple[str, ...]]:
    """``InstanceTypeOffering`` dicts → instance type → sorted availability zone names."""
    zones: dict[str, set[str]] = {}
    for item in offerings:
        zones.setdefault(item["InstanceType"], set()).add(item["Location"])
    return {t: tuple(sorted(z)) for t, z in zones.items()}


# ----- spot prices ---------------------------------------------------------------------------
@dataclass(frozen=True)
class SpotPrice:
    """One ``describe_spot_price_history`` record: price in USD/hour since ``at`` (aware UTC)."""

    zone: str
    instance_type: str
    price_usd_per_hour: float
    at: datetime


def spot_price(record: dict[str, Any], region: str) -> SpotPrice:
    """One ``SpotPrice`` record → :class:`SpotPrice`. Raises ``ValueError`` naming the field
    when the record is not a Linux/UNIX price of a zone of ``region`` with a finite price ≥ 0."""
    try:
        zone, itype = record["AvailabilityZone"], record["InstanceType"]
        price = price_number(record["SpotPrice"], "SpotPrice")
        at = aware_utc(record["Timestamp"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"spot price record missing or bad field: {exc}") from None
    if record.get("ProductDescription", SPOT_PRODUCT_DESCRIPTION) != SPOT_PRODUCT_DESCRIPTION:
        raise ValueError(f"ProductDescription {record['ProductDescription']!r} is not "
                         f"{SPOT_PRODUCT_DESCRIPTION!r}")
    if not zone.startswith(region):
        raise ValueError(f"AvailabilityZone {zone!r} is not in region {region}")
    return SpotPrice(zone=zone, instance_type=itype, price_usd_per_hour=price, at=at)


def spot_prices(records: Iterable[dict[str, Any]], region: str) -> tuple[list[SpotPrice], int]:
    """Parse every record (lazily consumed); returns (prices, number of records skipped as
    malformed, see :func:`spot_price`)."""
    return parse_each(records, lambda record: spot_price(record, region))


def spot_observations(prices: Iterable[SpotPrice], region: str) -> list[PriceObservation]:
    """One :class:`PriceObservation` per spot price record (observed_at = the record's
    ``Timestamp``, when the price took effect), duplicates removed, oldest first."""
    unique = {(p.zone, p.instance_type, p.at, p.price_usd_per_hour): p for p in prices}
    return [
        PriceObservation(series=series(PROVIDER, region, p.zone, p.instance_type, Market.SPOT),
                         observed_at=p.at, price_usd_per_hour=p.price_usd_per_hour)
        for p in sorted(unique.values(), key=lambda p: (p.at, p.zone, p.instance_type))
    ]


# ----- on-demand prices (Price List API) ------------------------------------------------------
_EXPECTED_ATTRIBUTES = {"operatingSystem": "Linux", "tenancy": "Shared",
                        "preInstalledSw": "NA", "capacitystatus": "Used"}


def on_demand_price(item: str | dict[str, Any]) -> tuple[str, float] | None:
    """One Price List product document → (instance type, USD per hour), or None when it is not
    a shared-tenancy, Linux, no-software, ``capacitystatus=Used`` on-demand instance-hour
    product (other attribute values, no ``instanceType``, a ``usagetype`` without
    ``BoxUsage``, or no positive hourly USD price).

    Raises ``ValueError`` naming the part that is missing when the document is not in the
    documented shape (``product.attributes``, ``terms.OnDemand``).
    """
    try:
        doc = json.loads(item) if isinstance(item, (str, bytes)) else item
        attributes = doc["product"]["attributes"]
        on_demand = doc["terms"].get("OnDemand") or {}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"price list item lacks product.attributes or terms: {exc!r}") from None
    itype = attributes.get("instanceType")
    if not itype:
        return None
    if any(attributes.get(k, v) != v for k, v in _EXPECTED_ATTRIBUTES.items()):
        return None
    if "BoxUsage" not in attributes.get("usagetype", "BoxUsage"):
        return None
    for term in on_demand.values():
        for dimension in (term.get("priceDimensions") or {}).values():
            if str(dimension.get("unit", "")).lower() not in ("hrs", "hours", "hour"):
                continue
            try:
                usd = float((dimension.get("pricePerUnit") or {})["USD"])
            except (KeyError, TypeError, ValueError):
                continue
            if math.isfinite(usd) and usd > 0:
                return itype, usd
    return None


def on_demand_prices(items: Iterable[str | dict[str, Any]],
                     instance_types: Iterable[str] | None = None) -> tuple[dict[str, float], int]:
    """instance type → on-demand USD/hour from Price List documents (lazily consumed), only for
    ``instance_types`` when given. When a type appears twice the lower price is kept. Returns
    (prices, number of documents skipped as malformed)."""
    wanted = set(instance_types) if instance_types is not None else None
    found, skipped = parse_each(items, on_demand_price)
    prices: dict[str, float] = {}
    for itype, usd in found:
        if wanted is None or itype in wanted:
            prices[itype] = min(usd, prices.get(itype, usd))
    return prices, skipped


# ----- interruption risk (Spot Instance Advisor) ----------------------------------------------
def advisor_risks(data: dict[str, Any], os_name: str = ADVISOR_OS) -> dict[str, dict[str, float]]:
    """The Spot Advisor JSON → region → instance type → interruption risk for ``os_name``.
    Entries with a bucket not in :data:`RISK_BY_BUCKET` are left out. Raises ``ValueError``
    when neither ``spot_advisor`` nor ``spot_data`` is a mapping."""
    regions = data.get("spot_advisor") if isinstance(data, dict) else None
    if not isinstance(regions, dict):
        regions = data.get("spot_data") if isinstance(data, dict) else None
    if not isinstance(regions, dict):
        raise ValueError("spot advisor data has no 'spot_advisor' (or 'spot_data') mapping")
    out: dict[str, dict[str, float]] = {}
    for region, by_os in regions.items():
        types = (by_os or {}).get(os_name) or {}
        risks: dict[str, float] = {}
        for itype, entry in types.items():
            try:
                risks[itype] = RISK_BY_BUCKET[int(entry["r"])]
            except (ValueError, KeyError, TypeError):
                continue
        out[region] = risks
    return out


# ----- offers --------------------------------------------------------------------------------
def build_offers(region: str, types: dict[str, GpuInstanceType],
                 zones: dict[str, tuple[str, ...]], on_demand: dict[str, float],
                 spot: dict[tuple[str, str], SpotPrice], risks: dict[str, float], *,
                 markets: Iterable[Market], observed_at: datetime) -> list[Offer]:
    """The offers of one region: per GPU type and zone, an on-demand offer when the type has a
    list price and is sold on-demand, and a spot offer when the zone has a spot price.

    - **zones**: type → zones offering it; zones with a spot price count as offering it too.
    - **on_demand**: type → USD/hour (region-wide); **spot**: (zone, type) → latest price.
    - **risks**: type → advisor risk; types absent are unrated (None). On-demand offers 0.
    - **observed_at**: when these were fetched (aware UTC).
    """
    wanted = set(markets)
    spot_zones: dict[str, set[str]] = {}
    for zone, itype in spot:
        spot_zones.setdefault(itype, set()).add(zone)
    offers: list[Offer] = []
    for itype in sorted(types):
        gpu = types[itype]
        od = on_demand.get(itype)
        for zone in sorted(set(zones.get(itype, ())) | spot_zones.get(itype, set())):
            if Market.ON_DEMAND in wanted and od is not None and "on-demand" in gpu.usage_classes:
                offers.append(gpu.offer(PROVIDER, region, zone, Market.ON_DEMAND, od, od, 0.0,
                                        observed_at))
            price = spot.get((zone, itype))
            if Market.SPOT in wanted and price is not None and "spot" in gpu.usage_classes:
                offers.append(gpu.offer(PROVIDER, region, zone, Market.SPOT,
                                        price.price_usd_per_hour, od, risks.get(itype),
                                        observed_at))
    return offers
