from __future__ import annotations

from datetime import UTC, datetime

from core.models import Offer

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def offer(**overrides) -> Offer:
    """A p3.2xlarge spot offer in us-west-2a unless overridden."""
    data = dict(provider="aws", region="us-west-2", zone="us-west-2a", instance_type="p3.2xlarge",
                market="spot", gpu_model="V100", gpu_count=1, vram_gib=16, vcpus=8,
                memory_gib=61, price_usd_per_hour=0.918, on_demand_price_usd_per_hour=3.06,
                interruption_risk=0.1, observed_at=T0)
    data.update(overrides)
    return Offer(**data)
