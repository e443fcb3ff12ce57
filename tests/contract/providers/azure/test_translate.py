"""Pure translation of Resource SKUs and Retail Prices rows (the shared examples) to GPU
sizes, prices and offers."""

from __future__ import annotations

import pytest

from core.models import Market
from providers.azure import families, translate
from tests.contract.providers.azure.data import (
    LOCATION,
    T0,
    example,
    price_of,
    retail_items,
    skus,
)


def _sizes(location: str = LOCATION) -> dict[str, translate.GpuSize]:
    sizes, skipped = translate.gpu_sizes(skus(), location)
    assert skipped == 0
    return sizes


def test_gpu_sizes_from_the_sku_example_leave_out_restricted_and_non_gpu_sizes() -> None:
    sizes = _sizes()
    # NC24ads_A100_v4 is restricted in every eastus zone, ND96isr_H100_v5 in all of eastus
    # (NotAvailableForSubscription); the A0/A1 and the disk SKU have no GPUs.
    assert list(sizes) == ["Standard_NC4as_T4_v3"]
    t4 = sizes["Standard_NC4as_T4_v3"]
    assert (t4.gpu_model, t4.gpu_count, t4.vram_gib, t4.vcpus, t4.memory_gib) == (
        "T4", 1, 16.0, 4, 28.0)
    assert t4.zones == ("1", "2", "3") and t4.spot_capable
    assert translate.offer_zones(LOCATION, t4) == ["eastus-1", "eastus-2", "eastus-3"]
    assert translate.gpu_sizes(skus(), "westus")[0] == {}


def test_a_zone_restriction_removes_only_its_zones() -> None:
    a100 = next(s for s in skus() if s["name"] == "Standard_NC24ads_A100_v4")
    a100["restrictions"][0]["restrictionInfo"]["zones"] = ["2"]
    size = translate.gpu_size(a100, LOCATION)
    assert size is not None and size.zones == ("1", "3")
    assert (size.gpu_model, size.vram_gib, size.gpu_count) == ("A100-80GB", 80.0, 1)
    a100["restrictions"] = []
    a100["locationInfo"][0]["zones"] = []  # a location without zones: one regional offer
    regional = translate.gpu_size(a100, LOCATION)
    assert regional is not None and translate.offer_zones(LOCATION, regional) == [LOCATION]


def test_location_restriction_and_spot_capability() -> None:
    h100 = next(s for s in skus() if s["name"] == "Standard_ND96isr_H100_v5")
    assert translate.gpu_size(h100, LOCATION) is None
    h100["restrictions"] = []
    size = translate.gpu_size(h100, LOCATION)
    assert size is not None and (size.gpu_model, size.gpu_count, size.vram_gib) == ("H100", 8, 80)
    h100["capabilities"] = [c if c["name"] != "LowPriorityCapable" else
                            {"name": "LowPriorityCapable", "value": "False"}
                            for c in h100["capabilities"]]
    assert not translate.gpu_size(h100, LOCATION).spot_capable


def test_family_table_is_case_insensitive_and_knows_vram() -> None:
    assert families.gpu_model("standardNDSH100v5Family") == "H100"
    assert families.gpu_model("StandardNCadsH100v5Family") == "H100-NVL"
    assert families.vram_gib("Standard_NC40ads_H100_v5", "H100-NVL") == 94
    assert families.vram_gib("Standard_NV6ads_A10_v5", "A10") == 4.0
    assert families.gpu_model("standardA0_A7Family") is None
    for model in set(families.GPU_BY_FAMILY.values()):
        assert families.vram_gib("any", model), model


def test_malformed_gpu_sku_is_counted_not_fatal() -> None:
    broken = next(s for s in skus() if s["name"] == "Standard_NC4as_T4_v3")
    broken["capabilities"] = [{"name": "GPUs", "value": "1"}]
    sizes, skipped = translate.gpu_sizes([broken, *skus()], LOCATION)
    assert skipped == 1 and list(sizes) == ["Standard_NC4as_T4_v3"]


def test_retail_rows_keep_linux_pay_as_you_go_and_spot_only() -> None:
    sizes = ["Standard_NC4as_T4_v3", "Standard_NC24ads_A100_v4", "Standard_F16s"]
    prices, skipped = translate.retail_prices(retail_items(), LOCATION, sizes)
    assert prices[Market.ON_DEMAND] == {"Standard_NC4as_T4_v3": price_of("NC4as T4 v3"),
                                        "Standard_NC24ads_A100_v4": price_of("NC24ads A100 v4")}
    # the Windows, low-priority, DevTest and non-primary rows are left out
    assert prices[Market.SPOT] == {"Standard_NC4as_T4_v3": price_of("NC4as T4 v3 Spot"),
                                   "Standard_NC24ads_A100_v4": price_of("NC24ads A100 v4 Spot")}
    assert skipped == 0


@pytest.mark.parametrize("name, location", [
    ("retail_prices_item_spot_devtest_docs.json", "westeurope"),
    ("retail_prices_item_reservation_docs.json", "southcentralus"),
])
def test_docs_items_that_are_not_prices_we_use(name: str, location: str) -> None:
    assert translate.retail_price(example(name), location) is None


def test_a_price_in_another_currency_is_malformed() -> None:
    item = {**example("retail_prices_item_spot_consumption_eur_docs.json"),
            "productName": "Virtual Machines FS Series"}
    with pytest.raises(ValueError, match="currencyCode 'EUR'"):
        translate.retail_price(item, "westeurope")
    with pytest.raises(ValueError, match="retailPrice"):
        translate.retail_price({**item, "retailPrice": "n/a"}, "westeurope")


def test_offers_for_both_markets() -> None:
    sizes = _sizes()
    prices, _ = translate.retail_prices(retail_items(), LOCATION, sizes)
    offers = translate.build_offers(LOCATION, sizes, prices,
                                    markets=[Market.SPOT, Market.ON_DEMAND], observed_at=T0)
    assert len(offers) == 6  # 3 zones × 2 markets
    spot = [o for o in offers if o.market is Market.SPOT]
    assert {o.zone for o in spot} == {"eastus-1", "eastus-2", "eastus-3"}
    assert all(o.interruption_notice_s == 30 and o.interruption_risk is None
               and o.on_demand_price_usd_per_hour == price_of("NC4as T4 v3")
               and o.price_usd_per_hour == price_of("NC4as T4 v3 Spot") for o in spot)
    on_demand = [o for o in offers if o.market is Market.ON_DEMAND]
    assert all(o.interruption_risk == 0 and o.interruption_notice_s is None for o in on_demand)
    only_spot = translate.build_offers(LOCATION, sizes, prices, markets=[Market.SPOT],
                                       observed_at=T0)
    assert {o.market for o in only_spot} == {Market.SPOT}
    observations = translate.spot_observations(LOCATION, sizes, prices[Market.SPOT], T0)
    assert [o.series for o in observations] == [
        f"azure/eastus/eastus-{z}/Standard_NC4as_T4_v3/spot" for z in (1, 2, 3)]
