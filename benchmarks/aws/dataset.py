"""The market a benchmark poll reads: per region, what AWS would answer.

- Instance types and zone offerings: moto's copies of AWS's own ``describe_instance_types`` and
  ``describe_instance_type_offerings`` data (``moto/ec2/resources``, 30 regions, 1,263 types of
  which ~65 have GPUs): real shapes, real counts, real zones.
- Price List: one product document per instance type offered in the region (every type, not
  only GPU ones: the adapter's query filters on region, OS, tenancy, software and capacity
  status, which every instance type matches), in the documented shape with one Reserved term.
  Real documents carry about a dozen Reserved terms, so real pages are ~3× larger.
- Spot price history: per GPU type and offered zone, a price change every 6 hours over the last
  48 hours (the 2022-05-31 all-regions dump in shared data shows GPU spot prices changing a few
  times a day per series). Prices are synthetic: the benchmark measures volume, not values.
"""

from __future__ import annotations

import gzip
import json
import os
from datetime import datetime, timedelta
from typing import Any

import moto

from tests.contract.providers.aws.data import price_list_document

_MOTO_EC2 = os.path.join(os.path.dirname(moto.__file__), "ec2", "resources")
SPOT_CHANGE_EVERY_H = 6
SPOT_HISTORY_H = 48


def moto_regions() -> list[str]:
    """The 30 regions moto has offering data for, us-east-1 first."""
    folder = os.path.join(_MOTO_EC2, "instance_type_offerings", "availability-zone")
    regions = sorted(name[: -len(".json.gz")] for name in os.listdir(folder))
    return ["us-east-1"] + [r for r in regions if r != "us-east-1"]


def _load(path: str) -> Any:
    with gzip.open(os.path.join(_MOTO_EC2, path)) as handle:
        return json.load(handle)


def build(regions: list[str], now: datetime) -> dict[str, Any]:
    """Keyword arguments for ``FakeAws``: ``instance_types``, ``offerings``, ``spot_records``
    and ``price_list`` for ``regions``."""
    all_types: dict[str, dict[str, Any]] = _load("instance_types.json.gz")
    out: dict[str, Any] = {"instance_types": {}, "offerings": {}, "spot_records": {},
                           "price_list": []}
    for region in regions:
        offerings = _load(f"instance_type_offerings/availability-zone/{region}.json.gz")
        offered = sorted({o["InstanceType"] for o in offerings if o["InstanceType"] in all_types})
        out["instance_types"][region] = [all_types[t] for t in offered]
        out["offerings"][region] = [{"InstanceType": o["InstanceType"], "Location": o["Location"]}
                                    for o in offerings]
        records = []
        for o in offerings:
            info = all_types.get(o["InstanceType"], {})
            gpus = sum(g.get("Count", 0) for g in (info.get("GpuInfo") or {}).get("Gpus", []))
            if not gpus:
                continue
            for step in range(SPOT_HISTORY_H // SPOT_CHANGE_EVERY_H + 1):
                at = now - timedelta(hours=step * SPOT_CHANGE_EVERY_H, minutes=7)
                records.append({"AvailabilityZone": o["Location"], "InstanceType": o["InstanceType"],
                                "ProductDescription": "Linux/UNIX",
                                "SpotPrice": f"{0.3 * gpus + 0.01 * step:.6f}",
                                "Timestamp": at.strftime("%Y-%m-%dT%H:%M:%S.000Z")})
        out["spot_records"][region] = records
        for itype in offered:
            vcpus = all_types[itype].get("VCpuInfo", {}).get("DefaultVCpus", 2)
            out["price_list"].append(price_list_document(itype, region, 0.05 * vcpus))
    return out
