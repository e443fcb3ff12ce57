"""Pure translation of ECS API dicts to offers and prices: no I/O, no clock (instances are
:mod:`.instances`).

Sources of each input (ECS API 2014-05-26 JSON answers, as documented in
``shared/data/api_examples/aliyun_ecs``):

- ``InstanceType`` (``DescribeInstanceTypes``): ``GPUAmount`` (GPUs), ``GPUSpec`` (``"NVIDIA
  T4"``), ``GPUMemorySize`` (**GiB per GPU**, a float: the API reference of the current ECS
  SDK, ``alibabacloud_ecs20140526``, documents it as "The amount of GPU memory per GPU. Unit:
  GiB"; the older reference in ``source_md`` predates the field), ``CpuCoreCount`` (vCPUs),
  ``MemorySize`` (GiB). When ``GPUMemorySize`` is absent or 0 the per-GPU memory of the family
  from Alibaba's GPU instance-type page (:data:`FAMILY_VRAM_GIB`) is used.
- ``AvailableZone`` (``DescribeAvailableResource``, ``DestinationResource=InstanceType``).
- ``SpotPriceType`` (``DescribeSpotPriceHistory``): ``SpotPrice`` and ``OriginPrice`` (the
  pay-as-you-go price of the same configuration), per hour, in the answer's ``Currency``;
  ``Timestamp`` ``yyyy-MM-ddTHH:mm:ssZ``.
- ``PriceInfo.Price`` (``DescribePrice``): ``OriginalPrice`` (list price per hour, used as the
  on-demand price, like AWS's list prices), ``TradePrice`` (after the account's discounts) and
  ``Currency``.
- ``AvailableSpotZone`` (``DescribeSpotAdvice``): ``InterruptionRate``, the average release
  rate of spot instances over the last 30 days in percent, and ``InterruptRateDesc``.

Prices are converted to USD with :class:`providers.regional_api.Currencies` (``Offer`` and
``PriceObservation`` carry USD only); a :class:`providers.regional_api.NativePrice` keeps what
ECS said.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from core.models import Market, Offer, PriceObservation
from providers.regional_api import (
    Currencies,
    GpuType,
    NativePrice,
    aware_utc,
    parse_each,
    price_number,
    series,
)

PROVIDER = "aliyun"
# Per-GPU memory (GiB) by instance family, from Alibaba's "GPU-accelerated compute optimized
# instance types" page (shared/data .../GPUInstanceTypes.md): used only when an answer lacks
# GPUMemorySize. Fractional (vgn*) families are left out: their share is not derivable.
FAMILY_VRAM_GIB: dict[str, float] = {"ecs.gn7": 40.0, "ecs.gn6e": 32.0, "ecs.gn6v": 16.0,
                                     "ecs.gn6i": 16.0, "ecs.gn5": 16.0, "ecs.gn5i": 8.0}
# DescribeSpotAdvice InterruptRateDesc → interruption risk, used when InterruptionRate itself
# is missing: the bucket's midpoint, and 0.25 for the open "10-100%" bucket (a representative
# value, as the AWS adapter takes 0.25 for Spot Advisor's ">20%").
RISK_BY_RATE_DESC: dict[str, float] = {"0-3%": 0.015, "3-5%": 0.04, "5-10%": 0.075,
                                       "10-100%": 0.25}
AVAILABLE = "Available"
IN_STOCK = frozenset({"WithStock", "ClosedWithStock"})


# ----- instance types ------------------------------------------------------------------------
@dataclass(frozen=True)
class GpuInstanceType(GpuType):
    """One GPU instance type of an ECS ``family`` (``ecs.gn6i``)."""

    family: str = ""


def gpu_model_name(spec: str) -> str:
    """``"NVIDIA T4"`` → ``"T4"``, ``"NVIDIA A100"`` → ``"A100"`` (the vendor dropped, so
    models compare across clouds: AWS says ``T4``); other strings are kept trimmed."""
    text = " ".join(str(spec).split())
    for vendor in ("NVIDIA ", "Nvidia ", "AMD "):
        if text.startswith(vendor):
            return text[len(vendor):]
    return text or "unknown"


def gpu_instance_type(info: dict[str, Any]) -> GpuInstanceType | None:
    """``InstanceType`` → :class:`GpuInstanceType`, or None when it has no GPU (``GPUAmount``
    0 or absent). Raises ``ValueError`` naming the field when a GPU type lacks
    ``InstanceTypeId``, ``CpuCoreCount`` or ``MemorySize``, or its per-GPU memory is unknown
    (no ``GPUMemorySize`` and a family not in :data:`FAMILY_VRAM_GIB`)."""
    try:
        count = int(info.get("GPUAmount") or 0)
    except (TypeError, ValueError):
        raise ValueError(f"GPUAmount {info.get('GPUAmount')!r} is not a number") from None
    if count <= 0:
        return None
    name = str(info.get("InstanceTypeId") or "")
    if not name:
        raise ValueError("a GPU instance type without InstanceTypeId")
    try:
        vcpus, memory = int(info["CpuCoreCount"]), float(info["MemorySize"])
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"instance type {name!r}: CpuCoreCount or MemorySize missing") from None
    family = str(info.get("InstanceTypeFamily") or name.rsplit(".", 1)[0].split("-")[0])
    vram = float(info.get("GPUMemorySize") or 0) or FAMILY_VRAM_GIB.get(family, 0.0)
    if vram <= 0:
        raise ValueError(f"instance type {name!r}: GPUMemorySize missing and family {family!r} "
                         "has no documented GPU memory")
    return GpuInstanceType(instance_type=name, family=family,
                           gpu_model=gpu_model_name(info.get("GPUSpec") or ""), gpu_count=count,
                           vram_gib=vram, vcpus=vcpus, memory_gib=memory)


def gpu_instance_types(infos: Iterable[dict[str, Any]], wanted: Callable[[str], bool]
                       ) -> tuple[dict[str, GpuInstanceType], int]:
    """instance type → :class:`GpuInstanceType` for the GPU types among ``infos`` that
    ``wanted`` accepts. Returns (types, number skipped as malformed)."""
    gpus, skipped = parse_each(infos, gpu_instance_type)
    return {gpu.instance_type: gpu for gpu in gpus if wanted(gpu.instance_type)}, skipped


def zones_by_type(available_zones: Iterable[dict[str, Any]]) -> dict[str, tuple[str, ...]]:
    """``AvailableZone`` dicts → instance type → sorted zones where it can be bought now: the
    zone and the type ``Available`` with stock (``WithStock`` or ``ClosedWithStock``)."""
    zones: dict[str, set[str]] = {}
    for zone in available_zones:
        zone_id = zone.get("ZoneId")
        if not zone_id or zone.get("Status", AVAILABLE) != AVAILABLE:
            continue
        for resource in (zone.get("AvailableResources") or {}).get("AvailableResource") or []:
            if resource.get("Type", "InstanceType") != "InstanceType":
                continue
            for item in (resource.get("SupportedResources") or {}).get("SupportedResource") or []:
                if (item.get("Value") and item.get("Status", AVAILABLE) == AVAILABLE
                        and item.get("StatusCategory", "WithStock") in IN_STOCK):
                    zones.setdefault(str(item["Value"]), set()).add(str(zone_id))
    return {t: tuple(sorted(z)) for t, z in zones.items()}


# ----- prices --------------------------------------------------------------------------------
@dataclass(frozen=True)
class SpotPrice:
    """One ``SpotPriceType`` record: ``spot`` and ``origin`` (pay-as-you-go) per hour in
    ``currency`` since ``at`` (aware UTC), in ``zone``."""

    zone: str
    instance_type: str
    spot: float
    origin: float | None
    currency: str
    at: datetime


def spot_price(record: dict[str, Any], currency: str | None, region: str,
               currencies: Currencies) -> SpotPrice:
    """One ``SpotPriceType`` record (and its answer's ``Currency``) → :class:`SpotPrice`.
    Raises ``ValueError`` naming the field when it is missing or bad, or the zone is not in
    ``region``."""
    try:
        zone, itype = str(record["ZoneId"]), str(record["InstanceType"])
        at = aware_utc(record["Timestamp"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"spot price record missing or bad field: {exc}") from None
    if not zone.startswith(region):
        raise ValueError(f"ZoneId {zone!r} is not in region {region}")
    spot = price_number(record.get("SpotPrice"), "SpotPrice")
    origin = record.get("OriginPrice")
    return SpotPrice(zone=zone, instance_type=itype, spot=spot,
                     origin=None if origin in (None, "") else price_number(origin, "OriginPrice"),
                     currency=currencies.code(currency), at=at)


def spot_prices(records: Iterable[tuple[dict[str, Any], str | None]], region: str,
                currencies: Currencies) -> tuple[list[SpotPrice], int]:
    """Parse every (record, currency) (lazily consumed); returns (prices, number skipped as
    malformed, see :func:`spot_price`)."""
    return parse_each(records, lambda pair: spot_price(pair[0], pair[1], region, currencies))


def on_demand_price(price: dict[str, Any], currencies: Currencies) -> tuple[float, str]:
    """``PriceInfo.Price`` of ``DescribePrice`` → (list price per hour, currency code).
    ``OriginalPrice`` is the list price; ``TradePrice`` is the fallback when it is absent.
    Raises ``ValueError`` when neither is a positive number."""
    for field in ("OriginalPrice", "TradePrice"):
        value = price.get(field)
        if value not in (None, ""):
            amount = price_number(value, field)
            if amount > 0:
                return amount, currencies.code(price.get("Currency"))
    raise ValueError("DescribePrice answer has no positive OriginalPrice or TradePrice")


def price_observations(prices: Iterable[SpotPrice], region: str, currencies: Currencies,
                       markets: Iterable[Market]) -> tuple[list[PriceObservation], int]:
    """Per ``SpotPriceType`` record, a spot observation (``SpotPrice``) and an on-demand one
    (``OriginPrice``), both in USD and stamped with the record's ``Timestamp``; duplicates
    removed, oldest first. Returns (observations, records left out for want of a rate)."""
    wanted = set(markets)
    unique: dict[tuple[str, datetime], PriceObservation] = {}
    no_rate = 0
    for p in prices:
        try:
            rate = currencies.rate(p.currency)
        except ValueError:
            no_rate += 1
            continue
        pairs = [(Market.SPOT, p.spot), (Market.ON_DEMAND, p.origin)]
        for market, amount in pairs:
            if market in wanted and amount is not None:
                key = series(PROVIDER, region, p.zone, p.instance_type, market)
                unique[(key, p.at)] = PriceObservation(series=key, observed_at=p.at,
                                                       price_usd_per_hour=amount * rate)
    ordered = sorted(unique.values(), key=lambda o: (o.observed_at, o.series))
    return ordered, no_rate


# ----- interruption risk ---------------------------------------------------------------------
def risk_from_advice(resource: dict[str, Any]) -> float | None:
    """One ``AvailableSpotResource`` → interruption risk (0–1): ``InterruptionRate`` / 100
    (the 30-day average release rate, in percent: the same notion as ``Offer.interruption_risk``,
    the share of spot instances reclaimed over a trailing month), else the
    :data:`RISK_BY_RATE_DESC` value of ``InterruptRateDesc``; None when neither is readable."""
    rate = resource.get("InterruptionRate")
    if rate not in (None, ""):
        try:
            value = float(rate)
        except (TypeError, ValueError):
            value = math.nan
        if math.isfinite(value) and value >= 0:
            return min(value / 100.0, 1.0)
    return RISK_BY_RATE_DESC.get(str(resource.get("InterruptRateDesc") or "").replace(" ", ""))


def advice_risks(zones: Iterable[dict[str, Any]]) -> dict[tuple[str | None, str], float]:
    """``AvailableSpotZone`` dicts → (zone, instance type) → risk. Resources listed under an
    entry without ``ZoneId`` (as in the documented example answer) apply region-wide: their
    key's zone is None."""
    out: dict[tuple[str | None, str], float] = {}
    for zone in zones:
        zone_id = zone.get("ZoneId") or None
        for resource in (zone.get("AvailableSpotResources") or {}).get(
                "AvailableSpotResource") or []:
            risk = risk_from_advice(resource)
            if risk is not None and resource.get("InstanceType"):
                out[(zone_id, str(resource["InstanceType"]))] = risk
    return out


def risk_for(risks: Mapping[tuple[str | None, str], float], zone: str,
             instance_type: str) -> float | None:
    """The zone's own risk, else the region-wide one, else None (unrated)."""
    return risks.get((zone, instance_type), risks.get((None, instance_type)))


# ----- offers --------------------------------------------------------------------------------
def build_offers(region: str, types: Mapping[str, GpuInstanceType],
                 zones: Mapping[Market, Mapping[str, tuple[str, ...]]],
                 on_demand: Mapping[str, tuple[float, str]],
                 spot: Mapping[tuple[str, str], SpotPrice],
                 risks: Mapping[tuple[str | None, str], float], currencies: Currencies, *,
                 observed_at: datetime,
                 launchable_zones: Iterable[str] | None = None
                 ) -> tuple[list[tuple[Offer, NativePrice]], list[str]]:
    """The offers of one region, each with its :class:`NativePrice`.

    - **zones**: market → type → zones where ``DescribeAvailableResource`` has stock.
    - **on_demand**: type → (list price, currency) from ``DescribePrice``; a zone's latest
      ``OriginPrice`` stands in when the type has none.
    - **spot**: (zone, type) → latest spot record; a spot offer needs one.
    - **risks**: see :func:`advice_risks`; types without advice are unrated (None).
      On-demand offers carry 0.
    - **launchable_zones**: when given, only these zones are offered (zones with a vSwitch).

    Returns (offers with native prices, warnings for prices left out for want of a rate).
    """
    allowed = set(launchable_zones) if launchable_zones is not None else None
    offers: list[tuple[Offer, NativePrice]] = []
    warnings: set[str] = set()
    for itype in sorted(types):
        for market in (Market.ON_DEMAND, Market.SPOT):
            for zone in (zones.get(market) or {}).get(itype, ()):
                if allowed is not None and zone not in allowed:
                    continue
                try:
                    pair = _offer(market, zone, region, types[itype], on_demand.get(itype),
                                  spot.get((zone, itype)), currencies, observed_at,
                                  risk_for(risks, zone, itype))
                except ValueError as exc:
                    warnings.add(str(exc))
                    continue
                if pair is not None:
                    offers.append(pair)
    return offers, sorted(warnings)


def _offer(market: Market, zone: str, region: str, gpu: GpuType,
           list_price: tuple[float, str] | None, spot: SpotPrice | None,
           currencies: Currencies, observed_at: datetime, risk: float | None
           ) -> tuple[Offer, NativePrice] | None:
    od_native: tuple[float, str] | None = list_price
    if od_native is None and spot is not None and spot.origin is not None:
        od_native = (spot.origin, spot.currency)
    od_usd = currencies.to_usd(*od_native) if od_native else None
    if market is Market.ON_DEMAND:
        if od_native is None or od_usd is None:
            return None
        native = NativePrice(price=od_native[0], currency=od_native[1],
                             usd_per_unit=currencies.rate(od_native[1]), at=observed_at,
                             on_demand_price=od_native[0])
        return gpu.offer(PROVIDER, region, zone, market, od_usd, od_usd, 0.0, observed_at), native
    if spot is None:
        return None
    rate = currencies.rate(spot.currency)
    native = NativePrice(price=spot.spot, currency=spot.currency, usd_per_unit=rate, at=spot.at,
                         on_demand_price=od_native[0] if od_native else None)
    return gpu.offer(PROVIDER, region, zone, market, spot.spot * rate, od_usd, risk,
                     observed_at), native
