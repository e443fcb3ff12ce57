"""Every provider name is served by one adapter: a display-only catalog next to a replayed
market that imitates the same cloud is listed under its own name; two adapters that can
launch under one name are refused with both entries named."""

from __future__ import annotations

import logging

import pytest

from scheduler.config import examples_dir
from scheduler.controller.context import ProviderRegistry
from scheduler.provider_setup import ProviderConfigError, build_providers, default_entries

# A SkyPilot-format vms.csv (as the real public catalogs are): one T4 VM in one zone.
GCP_CSV = ("InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,"
           "SpotPrice,Region,AvailabilityZone\n"
           "n1-standard-4,T4,1,4,15,,0.54,0.18,us-central1,us-central1-a\n")


def _catalog(tmp_path, *names: str) -> dict:
    (tmp_path / "vms.csv").write_text(GCP_CSV)
    return {"kind": "catalog", "catalogs": [{"provider": n, "path": "vms.csv"} for n in names]}


def test_a_gcp_catalog_next_to_the_default_market_gets_its_own_name(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="scheduler.provider_setup")
    entries = default_entries() + [_catalog(tmp_path, "gcp", "lambda")]
    replay, catalog = build_providers(entries, tmp_path, tmp_path)
    registry = ProviderRegistry([replay, catalog])  # raised "served by two adapters" before
    assert replay.provider_names == {"aws", "gcp"}
    assert catalog.provider_names == {"gcp-catalog", "lambda"}
    assert registry.get("gcp") is replay and registry.get("gcp-catalog") is catalog
    assert {o.provider for o in catalog.list_offers()} == {"gcp-catalog", "lambda"}
    assert "'gcp' is also served by another provider entry" in caplog.text
    row = next(r for r in catalog.check() if r.provider == "gcp-catalog")
    assert row.ok and "listed as gcp-catalog" in row.detail


def test_a_catalog_alone_keeps_its_names(tmp_path):
    (catalog,) = build_providers([_catalog(tmp_path, "gcp")], tmp_path, tmp_path)
    assert catalog.provider_names == {"gcp"}
    assert {o.provider for o in catalog.list_offers()} == {"gcp"}


def test_two_catalog_entries_of_one_cloud_do_not_collide(tmp_path):
    first, second = build_providers([_catalog(tmp_path, "gcp"), _catalog(tmp_path, "gcp")],
                                    tmp_path, tmp_path)
    ProviderRegistry([first, second])
    assert first.provider_names == {"gcp"} and second.provider_names == {"gcp-catalog"}


def test_two_launching_adapters_of_one_name_are_refused_naming_both(tmp_path):
    market = str(examples_dir() / "market.yaml")
    with pytest.raises(ProviderConfigError,
                       match=r"providers\[1\] \(replay market .*market.yaml\) and providers\[0\] "
                             r"\(replay market .*\) both serve provider 'aws'"):
        build_providers([{"kind": "replay", "market": market},
                         {"kind": "replay", "market": market}], tmp_path, tmp_path)
