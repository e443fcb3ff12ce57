"""Inputs for the AWS contract tests: the real spot price dumps and the Spot Advisor file (read
from the shared data folder, never copied), plus small hand-written API documents.

- :func:`load_spot_dumps`: ``price_history/aws_p2_p3_2019-12_2020-03/logs/aws/cost/<region>/*.json``
  (raw ``aws ec2 describe-spot-price-history`` outputs, 2019-12-20 → 2020-03-23, p2/p3).
  The weekly files overlap by a record or two; AWS's own history has each record once, so
  exact duplicates are dropped.
- :data:`INSTANCE_TYPES`: ``InstanceTypeInfo`` for the p2/p3 sizes (K80: 12,288 MiB and V100:
  16,384 MiB per GPU, as describe_instance_types reports them), g5.xlarge (A10G, 22,888 MiB:
  less than the marketed 24 GB) and one type without GPUs.
- :func:`price_list_document`: one Price List ``get_products`` item in the documented shape
  (https://docs.aws.amazon.com/awsaccountbilling/latest/aboutv2/reading-service-price-list-file-for-services.html
  and the ``get_products`` reference): ``product{productFamily, attributes, sku}``,
  ``serviceCode``, ``terms.OnDemand[offerTermCode].priceDimensions[rateCode]
  {unit: Hrs, pricePerUnit: {USD}}``, a ``Reserved`` term, ``version``, ``publicationDate``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from core.config import shared_data_dir

DUMPS_DIR = shared_data_dir() / "price_history" / "aws_p2_p3_2019-12_2020-03" / "logs" / "aws" / "cost"
ADVISOR_FILE = shared_data_dir() / "spot_advisor" / "spot-advisor-data.json"
needs_dumps = pytest.mark.skipif(not DUMPS_DIR.is_dir(),
                                 reason=f"spot price dumps not found at {DUMPS_DIR} (set GA_DATA_DIR)")
needs_advisor = pytest.mark.skipif(not ADVISOR_FILE.is_file(),
                                   reason=f"Spot Advisor file not found at {ADVISOR_FILE} (set GA_DATA_DIR)")

# us-east-1 on-demand Linux list prices (USD/hour) used in the hand-written price documents.
ON_DEMAND_USD = {"p2.xlarge": 0.9, "p2.8xlarge": 7.2, "p2.16xlarge": 14.4, "p3.2xlarge": 3.06,
                 "p3.8xlarge": 12.24, "p3.16xlarge": 24.48, "g5.xlarge": 1.006}


def _gpu_type(name: str, gpu: str, count: int, vram_mib: int, vcpus: int, memory_mib: int,
              manufacturer: str = "NVIDIA") -> dict[str, Any]:
    return {
        "InstanceType": name, "CurrentGeneration": name.startswith(("p3", "g5")),
        "SupportedUsageClasses": ["on-demand", "spot"],
        "VCpuInfo": {"DefaultVCpus": vcpus}, "MemoryInfo": {"SizeInMiB": memory_mib},
        "GpuInfo": {"Gpus": [{"Name": gpu, "Manufacturer": manufacturer, "Count": count,
                              "MemoryInfo": {"SizeInMiB": vram_mib}}],
                    "TotalGpuMemoryInMiB": vram_mib * count},
    }


INSTANCE_TYPES: list[dict[str, Any]] = [
    _gpu_type("p2.xlarge", "K80", 1, 12288, 4, 62464),
    _gpu_type("p2.8xlarge", "K80", 8, 12288, 32, 499712),
    _gpu_type("p2.16xlarge", "K80", 16, 12288, 64, 749568),
    _gpu_type("p3.2xlarge", "V100", 1, 16384, 8, 62464),
    _gpu_type("p3.8xlarge", "V100", 4, 16384, 32, 249856),
    _gpu_type("p3.16xlarge", "V100", 8, 16384, 64, 499712),
    _gpu_type("g5.xlarge", "A10G", 1, 22888, 4, 16384),
    {"InstanceType": "c5.xlarge", "CurrentGeneration": True,
     "SupportedUsageClasses": ["on-demand", "spot"], "VCpuInfo": {"DefaultVCpus": 4},
     "MemoryInfo": {"SizeInMiB": 8192}},
]


def load_spot_dumps(region: str) -> list[dict[str, Any]]:
    """Every record of the region's dump files, exact duplicates removed (Timestamp strings)."""
    seen: dict[tuple, dict[str, Any]] = {}
    for path in sorted((DUMPS_DIR / region).glob("*.json")):
        for rec in json.loads(path.read_text())["SpotPriceHistory"]:
            key = (rec["AvailabilityZone"], rec["InstanceType"], rec["ProductDescription"],
                   rec["SpotPrice"], rec["Timestamp"])
            seen.setdefault(key, rec)
    return list(seen.values())


def dump_regions() -> list[str]:
    return sorted(p.name for p in DUMPS_DIR.iterdir() if p.is_dir()) if DUMPS_DIR.is_dir() else []


def offerings_from_records(records: list[dict[str, Any]],
                           extra_zone: str | None = None) -> list[dict[str, Any]]:
    """One ``InstanceTypeOffering`` per (type, zone) seen in the records (plus ``extra_zone``
    for every type: a zone offering the type without spot prices)."""
    pairs = {(r["InstanceType"], r["AvailabilityZone"]) for r in records}
    if extra_zone:
        pairs |= {(t, extra_zone) for t, _ in pairs}
    return [{"InstanceType": t, "Location": z} for t, z in sorted(pairs)]


def price_list_document(instance_type: str, region: str, usd: float,
                        **attributes: str) -> str:
    """One Price List product document (JSON string, as in ``get_products``' ``PriceList``)
    for an on-demand Linux instance hour; ``attributes`` override the product attributes."""
    seed = json.dumps([instance_type, region, sorted(attributes.items())])
    sku = hashlib.sha256(seed.encode()).hexdigest()[:16].upper()
    attrs = {
        "servicecode": "AmazonEC2", "location": "US East (N. Virginia)",
        "locationType": "AWS Region", "regionCode": region, "instanceType": instance_type,
        "instanceFamily": "GPU instance", "operatingSystem": "Linux", "tenancy": "Shared",
        "preInstalledSw": "NA", "capacitystatus": "Used", "licenseModel": "No License required",
        "usagetype": f"BoxUsage:{instance_type}", "operation": "RunInstances",
        "marketoption": "OnDemand", "servicename": "Amazon Elastic Compute Cloud",
    }
    attrs.update(attributes)
    on_demand_term, rate = f"{sku}.JRTCKXETXF", f"{sku}.JRTCKXETXF.6YS6EN2CT7"
    doc = {
        "product": {"productFamily": "Compute Instance", "attributes": attrs, "sku": sku},
        "serviceCode": "AmazonEC2",
        "terms": {
            "OnDemand": {on_demand_term: {
                "priceDimensions": {rate: {
                    "unit": "Hrs", "endRange": "Inf", "beginRange": "0", "appliesTo": [],
                    "rateCode": rate, "pricePerUnit": {"USD": f"{usd:.10f}"},
                    "description": f"${usd} per On Demand Linux {instance_type} Instance Hour",
                }},
                "sku": sku, "effectiveDate": "2020-03-01T00:00:00Z",
                "offerTermCode": "JRTCKXETXF", "termAttributes": {},
            }},
            "Reserved": {f"{sku}.4NA7Y494T4": {
                "priceDimensions": {f"{sku}.4NA7Y494T4.6YS6EN2CT7": {
                    "unit": "Hrs", "endRange": "Inf", "beginRange": "0", "appliesTo": [],
                    "rateCode": f"{sku}.4NA7Y494T4.6YS6EN2CT7",
                    "pricePerUnit": {"USD": f"{usd * 0.6:.10f}"},
                    "description": "Linux/UNIX (Amazon VPC), 1 yr reserved, no upfront",
                }},
                "sku": sku, "effectiveDate": "2020-03-01T00:00:00Z",
                "offerTermCode": "4NA7Y494T4",
                "termAttributes": {"LeaseContractLength": "1yr", "OfferingClass": "standard",
                                   "PurchaseOption": "No Upfront"},
            }},
        },
        "version": "20200301000000", "publicationDate": "2020-03-01T00:00:00Z",
    }
    return json.dumps(doc)


def price_list(regions: list[str]) -> list[str]:
    """For every region: one document per type in :data:`ON_DEMAND_USD`, plus decoys the
    adapter must ignore (Windows, dedicated tenancy, SQL pre-installed, an unused capacity
    reservation, a non-instance product)."""
    docs = []
    for region in regions:
        for itype, usd in ON_DEMAND_USD.items():
            docs.append(price_list_document(itype, region, usd))
        docs += [
            price_list_document("p3.2xlarge", region, 99.0, operatingSystem="Windows"),
            price_list_document("p3.2xlarge", region, 99.0, tenancy="Dedicated"),
            price_list_document("p3.2xlarge", region, 99.0, preInstalledSw="SQL Std"),
            price_list_document("p3.2xlarge", region, 99.0, capacitystatus="UnusedCapacityReservation"),
            price_list_document("p3.2xlarge", region, 99.0, usagetype="DedicatedUsage:p3.2xlarge"),
        ]
    return docs


def write_json(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data))
    return path
