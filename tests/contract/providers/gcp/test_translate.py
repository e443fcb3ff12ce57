"""Pure GCP translation fed from ``shared/data/api_examples/gcp``: machine and accelerator
types → shapes, Billing Catalog SKUs → prices (checked against the catalog snapshot),
instances → :class:`Instance`, failed operations → our errors."""

from __future__ import annotations

import csv
from datetime import UTC, datetime

import pytest

from core.models import InstanceState, Market
from providers.errors import CapacityError, ProviderError, QuotaError, TransientError
from providers.gcp.client import error_for, operation_error
from providers.gcp.instances import instance_from_api, preempted_names, stopping_notice
from providers.gcp.machines import gpu_model, split_name, zone_shapes
from providers.gcp.pricing import sku_price, sku_prices, zone_offers
from tests.contract.providers.gcp.data import (
    accelerator_types,
    example,
    machine_types,
    skus,
)
from tests.fixtures.shared_data import shared_file

T0 = datetime(2026, 12, 1, 12, tzinfo=UTC)
ZONE = "us-central1-a"


def test_gpu_models_are_named_as_the_project_names_them() -> None:
    names = {"nvidia-tesla-t4": "T4", "nvidia-tesla-k80": "K80", "nvidia-l4": "L4",
             "nvidia-tesla-a100": "A100", "nvidia-a100-80gb": "A100-80GB",
             "nvidia-h100-80gb": "H100", "nvidia-h100-mega-80gb": "H100-MEGA",
             "nvidia-h200-141gb": "H200", "nvidia-tesla-v100": "V100"}
    assert {k: gpu_model(k) for k in names} == names
    assert gpu_model("nvidia-tesla-t4-vws") is None and gpu_model("ct5lp") is None


def test_shapes_from_the_machine_type_and_accelerator_examples() -> None:
    shapes = zone_shapes(machine_types(ZONE), accelerator_types(ZONE))
    assert sorted(shapes) == [
        "a2-highgpu-1g", "a3-highgpu-8g", "g2-standard-4",
        "n1-standard-16+nvidia-tesla-k80:2", "n1-standard-16+nvidia-tesla-t4:2",
        "n1-standard-32+nvidia-tesla-k80:4", "n1-standard-32+nvidia-tesla-t4:4",
        "n1-standard-64+nvidia-tesla-k80:8", "n1-standard-8+nvidia-tesla-k80:1",
        "n1-standard-8+nvidia-tesla-t4:1"]  # no T4×8 (maximumCardsPerInstance 4), no vws
    g2, a3, t4 = shapes["g2-standard-4"], shapes["a3-highgpu-8g"], shapes[
        "n1-standard-16+nvidia-tesla-t4:2"]
    assert (g2.gpu_model, g2.gpu_count, g2.vram_gib, g2.vcpus, g2.memory_gib) == (
        "L4", 1, 24.0, 4, 16.0)
    assert (a3.gpu_model, a3.gpu_count, a3.vram_gib, a3.vcpus, a3.memory_gib) == (
        "H100", 8, 80.0, 208, 1872.0)
    assert (t4.machine_type, t4.accelerator_type, t4.attached, t4.memory_gib) == (
        "n1-standard-16", "nvidia-tesla-t4", True, 60.0)
    assert split_name(t4.instance_type) == ("n1-standard-16", "nvidia-tesla-t4", 2)
    assert split_name("g2-standard-4") == ("g2-standard-4", None, 0)
    with pytest.raises(ValueError, match="MACHINE"):
        split_name("n1-standard-8+nvidia-tesla-t4")
    narrowed = zone_shapes(machine_types(ZONE), accelerator_types(ZONE),
                           wants_type=lambda t: t.startswith("n1-"),
                           wants_accelerator=lambda a: a == "nvidia-tesla-t4")
    assert sorted(narrowed) == ["n1-standard-16+nvidia-tesla-t4:2",
                                "n1-standard-32+nvidia-tesla-t4:4",
                                "n1-standard-8+nvidia-tesla-t4:1"]


def test_the_l4_sku_examples_are_units_plus_nanos_per_hour() -> None:
    on_demand, spot = (sku_price(s) for s in example("billing_skus_list_gpu_assembled.json")[
        "skus"])
    assert (on_demand.kind, on_demand.name, on_demand.market, on_demand.regions) == (
        "GPU", "L4", Market.ON_DEMAND, ("us-central1",))
    assert on_demand.usd == pytest.approx(0.56004) and spot.usd == pytest.approx(0.2343)
    assert spot.market is Market.SPOT


def test_odd_skus_are_left_out_or_counted_as_malformed() -> None:
    sku = example("billing_skus_list_gpu_assembled.json")["skus"][0]
    rate = sku["pricingInfo"][0]["pricingExpression"]["tieredRates"][0]["unitPrice"]
    rate.update(units="1", nanos=500000000)
    assert sku_price(sku).usd == 1.5
    rate["currencyCode"] = "EUR"
    _, skipped = sku_prices([sku])
    assert skipped == 1
    rate["currencyCode"] = "USD"
    sku["pricingInfo"][0]["pricingExpression"]["usageUnit"] = "mo"
    assert sku_prices([sku])[1] == 1
    book, skipped = sku_prices(skus())
    assert skipped == 0  # the commitment, the custom type and the licence are not ours
    assert book.get("GPU", "L4", Market.ON_DEMAND, "europe-west4") == pytest.approx(0.61)
    assert book.get("CORE", "N2 Custom", Market.ON_DEMAND, "us-central1") is None


def _snapshot_prices() -> dict[tuple[str, str], tuple[float, float]]:
    """(machine type or GPU:count, region) → (Price, SpotPrice) of the catalog snapshot."""
    path = shared_file("catalogs", "anycloud_2026-05-20", "gcp", "vms.csv")
    out = {}
    with path.open() as f:
        for row in csv.DictReader(f):
            if row["AvailabilityZone"] != ZONE or not row["Price"] or not row["SpotPrice"]:
                continue
            name = row["InstanceType"] or f"{row['AcceleratorName']}:{row['AcceleratorCount']}"
            out[name] = (float(row["Price"]), float(row["SpotPrice"]))
    return out


def test_whole_instance_prices_agree_with_the_catalog_snapshot() -> None:
    shapes = zone_shapes(machine_types(ZONE), accelerator_types(ZONE))
    book, _ = sku_prices(skus())
    offers = {(o.instance_type, o.market): o
              for o in zone_offers("us-central1", ZONE, shapes, book, list(Market), T0)}
    snapshot = _snapshot_prices()
    for itype, gpus in (("g2-standard-4", "L4:1"), ("a2-highgpu-1g", "A100:1"),
                        ("a3-highgpu-8g", "H100:8"), ("n1-standard-8", "T4:1")):
        name = itype if not itype.startswith("n1-") else f"{itype}+nvidia-tesla-t4:1"
        for market, column in ((Market.ON_DEMAND, 0), (Market.SPOT, 1)):
            expected = snapshot[itype][column] + snapshot[gpus][column]
            assert offers[(name, market)].price_usd_per_hour == pytest.approx(expected, rel=1e-4)
    spot, on_demand = offers[("g2-standard-4", Market.SPOT)], offers[("g2-standard-4",
                                                                       Market.ON_DEMAND)]
    assert (spot.interruption_risk, spot.interruption_notice_s) == (None, 30.0)
    assert spot.on_demand_price_usd_per_hour == on_demand.price_usd_per_hour
    assert (on_demand.interruption_risk, on_demand.interruption_notice_s) == (0.0, None)
    assert {o.zone for o in offers.values()} == {ZONE}
    only_spot = zone_offers("us-central1", ZONE, shapes, book, [Market.SPOT], T0)
    assert {o.market for o in only_spot} == {Market.SPOT}
    assert zone_offers("europe-west4", "europe-west4-a", shapes, book, list(Market), T0) == []


def test_a_preempted_spot_vm_is_terminated_preempted() -> None:
    running = instance_from_api(example("instance_get_spot_running_assembled.json"))
    assert (running.id, running.state, running.offer.market, running.offer.instance_type) == (
        "spot-gpu-1", InstanceState.RUNNING, Market.SPOT, "g2-standard-4")
    assert (running.offer.region, running.offer.zone) == ("us-central1", ZONE)
    assert running.launched_at == datetime(2026, 5, 20, 17, tzinfo=UTC)
    stopped = instance_from_api(example("instance_get_spot_terminated_assembled.json"))
    assert (stopped.state, stopped.terminated_reason) == (InstanceState.TERMINATED, "preempted")
    on_demand = instance_from_api(example("instance_get_running_libcloud.json"))
    assert (on_demand.offer.market, on_demand.offer.instance_type, on_demand.tags,
            on_demand.client_token) == (Market.ON_DEMAND, "n1-standard-1", {}, "")


def test_a_stopping_spot_vm_carries_a_30_s_notice() -> None:
    raw = example("instance_get_spot_running_assembled.json") | {"status": "STOPPING"}
    notice = stopping_notice(raw, T0)
    assert (notice.action, notice.action_at, notice.received_at) == (
        "stop", datetime(2026, 12, 1, 12, 0, 30, tzinfo=UTC), T0)
    assert stopping_notice(example("instance_get_spot_running_assembled.json"), T0) is None
    ops = [{"operationType": "compute.instances.preempted",
            "targetLink": "https://www.googleapis.com/compute/v1/projects/p/zones/z/instances/a"},
           example("operation_instances_insert_pending_libcloud.json")]
    assert preempted_names(ops) == {"a"}


def test_a_bad_instance_names_its_field() -> None:
    raw = example("instance_get_spot_running_assembled.json") | {"status": "EXPLODED"}
    with pytest.raises(ValueError, match="status"):
        instance_from_api(raw)
    with pytest.raises(ValueError, match="creationTimestamp"):
        instance_from_api({"name": "x", "status": "RUNNING", "zone": ZONE})


@pytest.mark.parametrize(("name", "cls", "code"), [
    ("operation_zone_resource_pool_exhausted_assembled.json", CapacityError,
     "ZONE_RESOURCE_POOL_EXHAUSTED"),
    ("operation_quota_exceeded_assembled.json", QuotaError, "QUOTA_EXCEEDED"),
    ("operation_error_resource_not_ready_libcloud.json", TransientError, "RESOURCE_NOT_READY"),
])
def test_failed_operations_map_to_our_errors(name: str, cls: type, code: str) -> None:
    error = operation_error(example(name), "gcp insert")
    assert type(error) is cls and error.code == code and error.provider == "gcp"
    assert example(name)["error"]["errors"][0]["message"][:40] in str(error)


def test_a_successful_operation_is_no_error_and_unknown_codes_fall_back_to_http() -> None:
    assert operation_error(example("operation_instances_insert_pending_libcloud.json"), "x") is None
    assert type(error_for("SOMETHING_NEW", 503, "x")) is TransientError
    assert type(error_for("SOMETHING_NEW", 400, "x")) is ProviderError
    assert type(error_for("", 403, "x")).__name__ == "AuthError"
