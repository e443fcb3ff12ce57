"""The fleet's pure parts: nvidia-smi CSV, GPU names, slot types, offers, the host script's
output."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from providers.fleet.gpus import normalize_model, parse_gpus
from providers.fleet.remote import parse_inventory
from providers.fleet.settings import HostSettings
from providers.fleet.slots import (
    host_of,
    instance_id,
    parse_slot_type,
    slot_offers,
    slot_type,
)


@pytest.mark.parametrize(("reported", "model"), [
    ("NVIDIA GeForce RTX 4090", "RTX4090"), ("NVIDIA A100-SXM4-80GB", "A100-80GB"),
    ("NVIDIA A100-SXM4-40GB", "A100"), ("NVIDIA A100 80GB PCIe", "A100-80GB"),
    ("Tesla V100-SXM2-16GB", "V100"), ("Tesla V100-SXM2-32GB", "V100-32GB"),
    ("NVIDIA H100 80GB HBM3", "H100"), ("NVIDIA H100 NVL", "H100-NVL"),
    ("NVIDIA RTX 6000 Ada Generation", "RTX6000-ADA"), ("NVIDIA RTX A6000", "RTXA6000"),
    ("Quadro RTX 6000", "RTX6000"), ("Tesla T4", "T4"), ("NVIDIA L4", "L4"),
    ("NVIDIA A10G", "A10G"), ("NVIDIA GeForce GTX 1080 Ti", "GTX1080TI"),
])
def test_driver_names_become_the_projects_gpu_models(reported, model) -> None:
    assert normalize_model(reported) == model


CSV = ("0, GPU-aaaa, NVIDIA GeForce RTX 4090, 24564, 1, 0\n"
       "1, GPU-bbbb, NVIDIA GeForce RTX 4090, 24564, 20000, 97\n"
       "2, GPU-cccc, NVIDIA GeForce RTX 4090, 24564, 3, [N/A]\n")


def test_busy_gpus_are_foreign_unless_ours() -> None:
    gpus = parse_gpus(CSV, "GPU-cccc, 4242, 2048 MiB\n")
    assert [(g.index, g.foreign) for g in gpus] == [(0, False), (1, True), (2, True)]
    assert gpus[2].utilization_pct is None and gpus[1].memory_used_mib == 20000
    assert [g.foreign for g in parse_gpus(CSV, "GPU-cccc, 4242, 2048 MiB\n", {1, 2})] == [
        False, False, False]


def test_a_malformed_gpu_line_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="want 6 fields"):
        parse_gpus("0, GPU-aaaa, RTX 4090\n", "")


def test_slot_types_and_instance_ids_round_trip() -> None:
    assert slot_type("box1", 2, "RTX4090") == "box1.2xRTX4090"
    assert parse_slot_type("box1.2xRTX4090") == ("box1", 2, "RTX4090")
    assert parse_slot_type("gpu-a.12xA100-80GB") == ("gpu-a", 12, "A100-80GB")
    for bad in ("p3-2xlarge", "box1.0xT4", "box1/2xT4", "box1.2x", "box1.2xA100.80GB"):
        with pytest.raises(ValueError, match="not a fleet slot"):
            parse_slot_type(bad)
    assert host_of(instance_id("box1", "job.7-1")) == "box1"


def test_offers_count_only_free_gpus_and_price_by_gpu() -> None:
    host = HostSettings(name="box1", address="10.0.0.5", user="ml", use_agent=True,
                        cost_per_gpu_hour_usd=0.2, labels={"site": "lab"})
    gpus = parse_gpus(CSV, "")
    at = datetime(2026, 5, 1, tzinfo=UTC)
    offers = slot_offers("fleet", host, gpus, {0}, vcpus=32, memory_gib=128.0, at=at)
    assert [(o.instance_type, o.price_usd_per_hour) for o in offers] == [("box1.1xRTX4090", 0.2)]
    [one] = offers
    assert (one.region, one.zone, one.vcpus, one.memory_gib) == ("lab", "box1", 10, 42.7)
    assert slot_offers("fleet", host, gpus, {0, 2}, 32, 128.0, at) == []


def test_inventory_output_cut_short_is_refused() -> None:
    with pytest.raises(ValueError, match="cut short"):
        parse_inventory("@vcpus\n8\n@mem_kib\n", set())
    inv = parse_inventory("@vcpus\n8\n@mem_kib\n16777216\n@gpus\n@no-nvidia-smi\n@apps\n"
                          "@instances\nrunning\t42\t\t\t1\t{\"instance_id\": \"b.t-1\", \"gpus\": [1]}\n"
                          "ended\t\t1700000000\tterminated\t\tnot json\n@end\n", set())
    assert (inv.vcpus, inv.memory_gib, inv.gpus) == (8, 16.0, None)
    assert list(inv.instances) == ["b.t-1"] and inv.held_gpus() == {1}
    assert inv.instances["b.t-1"].noticed and inv.instances["b.t-1"].pid == 42
