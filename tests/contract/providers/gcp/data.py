"""What the GCP fake serves, built from ``shared/data/api_examples/gcp`` (read through
``GA_DATA_DIR``) and, for the prices of the parts those examples lack, from the catalog
snapshot ``catalogs/anycloud_2026-05-20/gcp/vms.csv`` (us-central1).

- Machine types: the three of ``machinetypes_list_gpu_assembled.json`` (assembled) and the
  N1 standard series built on ``machinetype_get_n1_standard_1_libcloud.json`` (3.75 GiB per
  vCPU, as n1-standard-1's 3840 MiB).
- Accelerator types: ``acceleratortype_get_k80_libcloud.json`` as the template.
- SKUs: the two L4 SKUs of ``billing_skus_list_gpu_assembled.json`` verbatim, and the same
  shape for the rest. Core and RAM rates: N1 and A2 are Google's published Iowa rates
  ($0.031611/vCPU-h, $0.004237/GiB-h; n1-standard-1 = $0.0475 and a2-highgpu-1g = $0.73948 as
  in the snapshot), G2 its published $0.024988 / $0.0029279 (g2-standard-4 = $0.14679); the
  A3 and every Spot core/RAM split is ours (only the machine totals are in the snapshot:
  the split keeps the on-demand ratio). GPU rates are the snapshot's per-GPU prices.
"""

from __future__ import annotations

import copy
import json
from functools import cache
from typing import Any

from tests.fixtures.shared_data import shared_file

PROJECT = "test-project"
ZONES = {"us-central1": ["us-central1-a", "us-central1-b"], "europe-west4": ["europe-west4-a"]}
# (kind, name) → (on-demand, spot) USD per unit in us-central1; see the module docstring.
RATES: dict[tuple[str, str], tuple[float, float]] = {
    ("GPU", "L4"): (0.56004, 0.2343),  # the example SKUs' own prices
    ("GPU", "Tesla T4"): (0.35, 0.1654),
    ("GPU", "Tesla A100"): (2.93391, 1.4341),
    ("GPU", "H100 80GB"): (4.20076, 4.0013),
    ("Core", "N1 Predefined"): (0.031611, 0.011606),
    ("Ram", "N1 Predefined"): (0.004237, 0.0015556),
    ("Core", "A2"): (0.031611, 0.015806),
    ("Ram", "A2"): (0.004237, 0.0021185),
    ("Core", "G2"): (0.024988, 0.0105),
    ("Ram", "G2"): (0.0029279, 0.0012303),
    ("Core", "A3"): (0.021, 0.0085757),
    ("Ram", "A3"): (0.0027201, 0.0011108),
}


def example(name: str) -> Any:
    """One file of ``api_examples/gcp`` as JSON."""
    return json.loads(shared_file("api_examples", "gcp", name).read_text())


def machine_types(zone: str) -> list[dict[str, Any]]:
    assembled = example("machinetypes_list_gpu_assembled.json")["items"]
    n1 = example("machinetype_get_n1_standard_1_libcloud.json")
    out = [{**m, "zone": zone} for m in assembled]
    for vcpus in (1, 2, 4, 8, 16, 32, 64, 96):
        out.append({**n1, "name": f"n1-standard-{vcpus}", "guestCpus": vcpus,
                    "memoryMb": 3840 * vcpus, "zone": zone,
                    "description": f"{vcpus} vCPUs, {3.75 * vcpus} GB RAM"})
    out.append({**n1, "name": "e2-standard-4", "guestCpus": 4, "memoryMb": 16384, "zone": zone})
    return out


def accelerator_types(zone: str) -> list[dict[str, Any]]:
    k80 = example("acceleratortype_get_k80_libcloud.json")
    kinds = {"nvidia-tesla-k80": 8, "nvidia-tesla-t4": 4, "nvidia-tesla-t4-vws": 4,
             "nvidia-l4": 8, "nvidia-tesla-a100": 16, "nvidia-h100-80gb": 8}
    return [{**k80, "name": name, "maximumCardsPerInstance": most, "zone": zone,
             "description": name} for name, most in kinds.items()]


def _sku(template: dict[str, Any], sku_id: str, description: str, group: str, usage: str,
         usd: float, unit: str, regions: list[str]) -> dict[str, Any]:
    sku = copy.deepcopy(template)
    units = int(usd)
    sku.update(name=f"services/6F81-5844-456A/skus/{sku_id}", skuId=sku_id,
               description=description, serviceRegions=regions)
    sku["category"].update(resourceGroup=group, usageType=usage)
    sku["geoTaxonomy"]["regions"] = regions
    expression = sku["pricingInfo"][0]["pricingExpression"]
    expression["usageUnit"] = unit
    expression["tieredRates"][0]["unitPrice"].update(units=str(units),
                                                     nanos=round((usd - units) * 1e9))
    return sku


@cache
def _skus() -> tuple[str, ...]:
    page = example("billing_skus_list_gpu_assembled.json")["skus"]
    template = page[0]
    out = list(page)
    n = 0
    for (part, name), (on_demand, spot) in RATES.items():
        if (part, name) == ("GPU", "L4"):
            continue
        for usage, usd in (("OnDemand", on_demand), ("Preemptible", spot)):
            n += 1
            spot_words = usage == "Preemptible"
            if part == "GPU":
                text = (f"Nvidia {name} GPU attached to Spot Preemptible VMs running in Iowa"
                        if spot_words else f"Nvidia {name} GPU running in Iowa")
                group, unit = "GPU", "h"
            else:
                text = (f"{'Spot Preemptible ' if spot_words else ''}{name} Instance {part} "
                        "running in Americas")
                group = "N1Standard" if name.startswith("N1") else (
                    "CPU" if part == "Core" else "RAM")
                unit = "h" if part == "Core" else "GiBy.h"
            out.append(_sku(template, f"TEST-{n:04d}", text, group, usage, usd, unit,
                            ["us-central1"]))
    # Not ours: a commitment, a custom type, a license; and L4 in europe-west4.
    out.append(_sku(template, "TEST-9001", "Commitment v1: G2 Cpu in Americas for 1 Year", "CPU",
                    "Commit1Yr", 0.0157, "h", ["us-central1"]))
    out.append(_sku(template, "TEST-9002", "N2 Custom Instance Ram running in Americas", "RAM",
                    "OnDemand", 0.0045, "GiBy.h", ["us-central1"]))
    license_sku = _sku(template, "TEST-9003", "Licensing Fee for Windows", "GPU", "OnDemand",
                       0.04, "h", ["us-central1"])
    license_sku["category"]["resourceFamily"] = "License"
    out.append(license_sku)
    out.append(_sku(template, "TEST-9004", "Nvidia L4 GPU running in Netherlands", "GPU",
                    "OnDemand", 0.61, "h", ["europe-west4"]))
    return tuple(json.dumps(s) for s in out)


def skus() -> list[dict[str, Any]]:
    """Every SKU the fake serves (fresh copies)."""
    return [json.loads(s) for s in _skus()]


def fake_kwargs() -> dict[str, Any]:
    """:class:`tests.contract.providers.gcp.fake_gcp.FakeGcp` arguments for this catalog."""
    every = [z for zs in ZONES.values() for z in zs]
    return {"project": PROJECT, "zones": ZONES,
            "machine_types": {z: machine_types(z) for z in every},
            "accelerator_types": {z: accelerator_types(z) for z in every}, "skus": skus()}
