"""Test data for the Alibaba Cloud adapter.

- ``EXAMPLES``: the documented ECS answers (``shared/data/api_examples/aliyun_ecs``, located
  through ``GA_DATA_DIR``); tests that read them skip with a reason when they are absent.
- :func:`catalog`: a small hand-written market for the fake endpoint, in the documented answer
  shapes: GPU types from Alibaba's GPU instance-type page (``GPUInstanceTypes.md``), stock per
  zone and market, hourly spot prices (CNY), list prices and spot advice.
"""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from core.config import shared_data_dir
from tests.contract.providers.aliyun.fake_ecs import Catalog

EXAMPLES = shared_data_dir() / "api_examples" / "aliyun_ecs"
needs_examples = pytest.mark.skipif(
    not EXAMPLES.is_dir(), reason=f"documented ECS examples not found at {EXAMPLES} "
                                  "(set GA_DATA_DIR to the shared data folder)")

REGION = "cn-hangzhou"
OTHER_REGION = "cn-beijing"
T0 = datetime(2026, 3, 2, 12, 30, tzinfo=UTC)
CNY_TO_USD = 0.1385
TEST_KEY_ID = "LTAI5tFakeFakeFake0000"
TEST_KEY_SECRET = "fake-aliyun-secret-used-only-by-tests-0000"

# The documented DescribeInstanceTypes record (a CPU type, GPUAmount 0), as the shape to copy.
_DOC_TYPE: dict[str, Any] = {
    "MemorySize": 8, "InstancePpsTx": 300000, "MaximumQueueNumberPerEni": 2,
    "EniIpv6AddressQuantity": 1, "PrimaryEniQueueNumber": 2, "CpuCoreCount": 2,
    "TotalEniQueueQuantity": 4, "EniTotalQuantity": 2, "EniTrunkSupported": False,
    "InstanceTypeFamily": "ecs.g6", "InstancePpsRx": 300000, "EniQuantity": 2,
    "InstanceBandwidthRx": 1024000, "GPUAmount": 0, "InstanceBandwidthTx": 1024000,
    "SecondaryEniQueueNumber": 2, "DiskQuantity": 17, "LocalStorageCategory": "",
    "GPUSpec": "", "InstanceFamilyLevel": "EnterpriseLevel", "InstanceTypeId": "ecs.g6.large",
    "EniPrivateIpAddressQuantity": 6,
}


def example(name: str) -> dict[str, Any]:
    """One documented answer, e.g. ``example("DescribeSpotPriceHistory")``."""
    return json.loads((EXAMPLES / f"{name}_response_example.json").read_text())


def instance_type(type_id: str, family: str, vcpus: int, memory_gib: float, gpus: int,
                  spec: str, vram_gib: float | None) -> dict[str, Any]:
    """A DescribeInstanceTypes record in the documented shape (``GPUMemorySize`` per GPU, GiB;
    left out when ``vram_gib`` is None)."""
    record = copy.deepcopy(_DOC_TYPE)
    record.update(InstanceTypeId=type_id, InstanceTypeFamily=family, CpuCoreCount=vcpus,
                  MemorySize=memory_gib, GPUAmount=gpus, GPUSpec=spec)
    if vram_gib is not None:
        record["GPUMemorySize"] = vram_gib
    return record


# From GPUInstanceTypes.md (vCPUs, memory, GPUs × per-GPU memory).
GN6I = "ecs.gn6i-c4g1.xlarge"        # 4 vCPU, 15 GiB, NVIDIA T4 × 1, 16 GB
GN6I_2 = "ecs.gn6i-c24g1.12xlarge"   # 48 vCPU, 186 GiB, NVIDIA T4 × 2 (GPUMemorySize absent)
GN6V = "ecs.gn6v-c8g1.2xlarge"       # 8 vCPU, 32 GiB, NVIDIA V100 × 1, 16 GB
GN7 = "ecs.gn7-c12g1.3xlarge"        # 12 vCPU, 95 GiB, NVIDIA A100 × 1, 40 GB
INSTANCE_TYPES = [
    copy.deepcopy(_DOC_TYPE),
    instance_type(GN6I, "ecs.gn6i", 4, 15.0, 1, "NVIDIA T4", 16.0),
    instance_type(GN6I_2, "ecs.gn6i", 48, 186.0, 2, "NVIDIA T4", None),
    instance_type(GN6V, "ecs.gn6v", 8, 32.0, 1, "NVIDIA V100", 16.0),
    instance_type(GN7, "ecs.gn7", 12, 95.0, 1, "NVIDIA A100", 40.0),
]
# List prices, CNY per hour (hand-written, of the order of the China site's 2024 prices).
LIST_CNY = {GN6I: 11.58, GN6V: 26.46, GN7: 34.80}  # GN6I_2: no DescribePrice (PriceNotFound)
ORIGIN_CNY = {GN6I: 11.58, GN6I_2: 47.12, GN6V: 26.46}
# Spot price per (zone, type): one record an hour for the 26 hours before T0, the last one
# (at T0 - 30 min) the current price.
SPOT_CNY = {("cn-hangzhou-h", GN6I): 1.74, ("cn-hangzhou-i", GN6I): 2.05,
            ("cn-hangzhou-i", GN6V): 5.29, ("cn-hangzhou-h", GN6I_2): 6.60,
            ("cn-beijing-g", GN6I): 1.91}
HISTORY_HOURS = 26


def spot_history(region: str, now: datetime = T0) -> list[dict[str, Any]]:
    """SpotPriceType records (documented shape) of ``region``: hourly, the price 3 % lower an
    hour earlier each hour back (so the history moves), ending half an hour before ``now``."""
    records = []
    last = now.replace(minute=0, second=0, microsecond=0)
    for (zone, itype), price in SPOT_CNY.items():
        if not zone.startswith(region):
            continue
        for back in range(HISTORY_HOURS):
            at = last - timedelta(hours=back)
            records.append({"IoOptimized": "optimized", "OriginPrice": ORIGIN_CNY[itype],
                            "NetworkType": "vpc", "ZoneId": zone,
                            "Timestamp": at.strftime("%Y-%m-%dT%H:%M:%SZ"),
                            "SpotPrice": round(price * (0.97 ** back), 4),
                            "InstanceType": itype})
    return records


def catalog(now: datetime = T0) -> Catalog:
    """The fake's market: cn-hangzhou (zones h, i, j) and cn-beijing (zone g).

    Stock: on-demand GN6I in h and i, GN6V in i, GN6I_2 in h, GN7 in j but sold out
    (``ClosedWithoutStock``); spot GN6I in h (and in i ``SoldOut``), GN6V in i, GN6I_2 in h.
    Advice: GN6I in h 2.5 %, GN6V in i only ``5-10%``, GN6I_2 region-wide (no ZoneId) 12.5 %.
    """
    ok, sold_out = ("Available", "WithStock"), ("SoldOut", "WithoutStock")
    stock = {
        REGION: {
            "on-demand": {"cn-hangzhou-h": {GN6I: ok, GN6I_2: ok},
                          "cn-hangzhou-i": {GN6I: ok, GN6V: ok},
                          "cn-hangzhou-j": {GN7: ("SoldOut", "ClosedWithoutStock")}},
            "spot": {"cn-hangzhou-h": {GN6I: ok, GN6I_2: ok},
                     "cn-hangzhou-i": {GN6I: sold_out, GN6V: ok}},
        },
        OTHER_REGION: {"on-demand": {"cn-beijing-g": {GN6I: ok}},
                       "spot": {"cn-beijing-g": {GN6I: ok}}},
    }
    advice = {
        REGION: [
            {"ZoneId": "cn-hangzhou-h", "AvailableSpotResources": {"AvailableSpotResource": [
                {"InterruptRateDesc": "0-3%", "InstanceType": GN6I, "AverageSpotDiscount": "15",
                 "InterruptionRate": "2.5"}]}},
            {"ZoneId": "cn-hangzhou-i", "AvailableSpotResources": {"AvailableSpotResource": [
                {"InterruptRateDesc": "5-10%", "InstanceType": GN6V,
                 "AverageSpotDiscount": "20"}]}},
            {"AvailableSpotResources": {"AvailableSpotResource": [
                {"InterruptRateDesc": "10-100%", "InstanceType": GN6I_2,
                 "AverageSpotDiscount": "14", "InterruptionRate": "12.5"}]}},
        ],
        OTHER_REGION: [],
    }
    prices = {(region, t): {"OriginalPrice": p, "DiscountPrice": 0.0, "TradePrice": p}
              for region in (REGION, OTHER_REGION) for t, p in LIST_CNY.items()}
    return Catalog(regions=[REGION, OTHER_REGION], instance_types=INSTANCE_TYPES, stock=stock,
                   spot_history={r: spot_history(r, now) for r in (REGION, OTHER_REGION)},
                   prices=prices, advice=advice, currency="CNY")
