"""Offers and price observations: what can be rented, and what it cost when.

An **offer** is one rentable configuration at one moment. Its ``key`` (provider, region, zone,
instance type, market) is also the **series key** of its price history.
"""

from __future__ import annotations

from datetime import datetime
from enum import Enum

from pydantic import Field, field_validator

from core.models.base import ValueModel, ensure_utc


class Market(str, Enum):
    """How an instance is bought: ``spot`` (cheap, can be reclaimed) or ``on-demand``."""

    SPOT = "spot"
    ON_DEMAND = "on-demand"


class OfferKey(ValueModel):
    """Identity of an offer and of its price series: provider/region/zone/instance type/market."""

    provider: str = Field(min_length=1)
    region: str = Field(min_length=1)
    zone: str = Field(min_length=1)
    instance_type: str = Field(min_length=1)
    market: Market

    def series(self) -> str:
        """Stable string form, e.g. ``replay/us-west-2/us-west-2a/p3.2xlarge/spot``."""
        return "/".join(
            [self.provider, self.region, self.zone, self.instance_type, self.market.value]
        )

    @classmethod
    def from_series(cls, series: str) -> OfferKey:
        """Inverse of :meth:`series`. Raises ``ValueError`` on a malformed string."""
        parts = series.split("/")
        if len(parts) != 5:
            raise ValueError(f"series key must have 5 '/'-separated parts, got {series!r}")
        provider, region, zone, instance_type, market = parts
        return cls(
            provider=provider, region=region, zone=zone,
            instance_type=instance_type, market=Market(market),
        )


class Offer(ValueModel):
    """One rentable configuration at one moment.

    Prices are USD per hour for the whole instance. ``interruption_risk`` is the monthly
    interruption frequency as a fraction in [0, 1] (the AWS Spot Advisor notion: share of spot
    instances reclaimed over a trailing month); on-demand offers carry 0; ``None`` when the
    source rates none (an adapter leaves it so; the service gives it the policies' prior,
    :data:`policies.priors.UNKNOWN_SPOT_RISK`, before the offer is stored).
    ``interruption_notice_s`` is the warning a spot instance of this market gets before it is
    reclaimed, in seconds, as its provider documents it (AWS 120, Alibaba 300, Azure and GCP
    30); ``0`` for a market that reclaims without notice (a Vast.ai interruptible instance that
    is outbid just stops), ``None`` when unknown. ``observed_at`` is aware UTC, when the
    provider reported the offer. ``capacity`` is how many instances of the offer can be
    launched now, where the source counts them (a replayed market following an instance-count
    trace, the fleet's free slots); ``None`` when unknown (a cloud's own limit decides at
    launch). A gang of N nodes is placed only on an offer whose capacity is unknown or ≥ N.
    """

    provider: str = Field(min_length=1)
    region: str = Field(min_length=1)
    zone: str = Field(min_length=1)
    instance_type: str = Field(min_length=1)
    market: Market
    gpu_model: str = Field(min_length=1)
    gpu_count: int = Field(ge=0)
    vram_gib: float = Field(ge=0, description="GPU memory per GPU, GiB")
    vcpus: int = Field(ge=0)
    memory_gib: float = Field(ge=0, description="host memory, GiB")
    price_usd_per_hour: float = Field(ge=0)
    on_demand_price_usd_per_hour: float | None = Field(
        default=None, ge=0, description="the same instance type's on-demand price, for savings"
    )
    interruption_risk: float | None = Field(default=0.0, ge=0, le=1)
    interruption_notice_s: float | None = Field(default=None, ge=0)
    observed_at: datetime
    capacity: int | None = Field(default=None, ge=0,
                                 description="instances launchable now; None: unknown")

    _validate_observed_at = field_validator("observed_at")(ensure_utc)

    @property
    def key(self) -> OfferKey:
        return OfferKey(
            provider=self.provider, region=self.region, zone=self.zone,
            instance_type=self.instance_type, market=self.market,
        )


class PriceObservation(ValueModel):
    """One observed price: ``(series key, observed_at, price_usd_per_hour)``."""

    series: str
    observed_at: datetime
    price_usd_per_hour: float = Field(ge=0)

    _validate_observed_at = field_validator("observed_at")(ensure_utc)
