"""Inputs for the Azure contract tests, read from ``shared/data/api_examples/azure`` (never
copied; see its README for which files are exact and which were assembled from a schema).

- :func:`skus`: the assembled GPU SKUs (NC4as_T4_v3 unrestricted, NC24ads_A100_v4 restricted
  in every zone of eastus, ND96isr_H100_v5 restricted in the location) and the spec example's
  two non-GPU sizes (westus), plus one disk SKU (another resource type the list also holds).
- :func:`retail_items`: the assembled eastus page (T4, A100, H100 NC and ND, pay-as-you-go
  and Spot) and the three docs items (DevTest, reservation, EUR), plus rows derived here from
  the assembled T4 rows to exercise what must be left out (each says how it was derived):
  a Windows product, a low-priority meter, a DevTest copy, a non-primary meter.
"""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from functools import cache
from typing import Any

from core.config import shared_data_dir
from tests.fixtures.shared_data import shared_file

EXAMPLES = shared_data_dir() / "api_examples" / "azure"
SUBSCRIPTION = "00000000-0000-0000-0000-000000000000"
RESOURCE_GROUP = "gpu-arbiter-test"
LOCATION = "eastus"
T0 = datetime(2026, 12, 1, 12, tzinfo=UTC)
SUBNET = (f"/subscriptions/{SUBSCRIPTION}/resourceGroups/net/providers/Microsoft.Network/"
          "virtualNetworks/vnet/subnets/default")
SSH_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeKeyForTestsOnly0000000000000000000 test@ga"


@cache
def example(name: str) -> Any:
    return json.loads(shared_file("api_examples", "azure", name).read_text())


def skus() -> list[dict[str, Any]]:
    gpu = example("compute_resource_skus_gpu_assembled.json")["value"]
    spec = example("compute_resource_skus_list_example.json")["responses"]["200"]["body"]["value"]
    disk = {"resourceType": "disks", "name": "Premium_LRS", "tier": "Premium", "size": "P1",
            "locations": [LOCATION], "locationInfo": [{"location": LOCATION, "zones": []}],
            "capabilities": [], "restrictions": []}
    return copy.deepcopy([*gpu, *spec, disk])


def _derived(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {**copy.deepcopy(base), **changes}


def retail_items() -> list[dict[str, Any]]:
    page = example("retail_prices_page_gpu_eastus_assembled.json")["Items"]
    docs = [example(f"retail_prices_item_{n}_docs.json")
            for n in ("spot_devtest", "reservation", "spot_consumption_eur")]
    t4 = next(i for i in page if i["skuName"] == "NC4as T4 v3")
    t4_spot = next(i for i in page if i["skuName"] == "NC4as T4 v3 Spot")
    derived = [
        # the same size as a Windows product: dearer, never a Linux price
        _derived(t4, productName="Virtual Machines NCasT4 v3 Series Windows", retailPrice=0.702,
                 unitPrice=0.702),
        # a low-priority meter (Batch's): cheaper, not a Spot price
        _derived(t4_spot, skuName="NC4as T4 v3 Low Priority",
                 meterName="NC4as T4 v3 Low Priority", retailPrice=0.105, unitPrice=0.105),
        # a DevTest copy (what the docs' F16s item is): another price list
        _derived(t4, type="DevTestConsumption", retailPrice=0.3, unitPrice=0.3),
        # a non-primary meter duplicate at another price
        _derived(t4_spot, isPrimaryMeterRegion=False, retailPrice=0.1, unitPrice=0.1),
    ]
    return copy.deepcopy([*page, *docs, *derived])


def price_of(sku_name: str) -> float:
    """The assembled eastus page's ``retailPrice`` of ``sku_name`` (e.g. ``"NC4as T4 v3"``)."""
    page = example("retail_prices_page_gpu_eastus_assembled.json")["Items"]
    return next(i["retailPrice"] for i in page if i["skuName"] == sku_name)
