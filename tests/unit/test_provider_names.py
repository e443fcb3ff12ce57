"""Every provider name is served by one adapter, real sources first: a replayed market that
imitates a cloud yields that cloud's name to a public catalog or to the cloud's own adapter
(``gcp-replay``); a catalog yields to the cloud's adapter (``aws-catalog``); two cloud adapters
under one name are refused with both entries named. Adapter names (poller leases) are unique."""

from __future__ import annotations

import logging

import pytest

from providers.replay.provider import ReplayProvider
from core.config import examples_dir
from scheduler.controller.context import ProviderRegistry
from scheduler.provider_setup import ProviderConfigError, build_providers, default_entries

# A SkyPilot-format vms.csv (as the real public catalogs are): one T4 VM in one zone.
GCP_CSV = ("InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,"
           "SpotPrice,Region,AvailabilityZone\n"
           "n1-standard-4,T4,1,4,15,,0.54,0.18,us-central1,us-central1-a\n")
MARKET = str(examples_dir() / "market.yaml")


def _catalog(tmp_path, *names: str) -> dict:
    (tmp_path / "vms.csv").write_text(GCP_CSV)
    return {"kind": "catalog", "catalogs": [{"provider": n, "path": "vms.csv"} for n in names]}


@pytest.fixture
def cloud_dirs(tmp_path):
    yield
    for state in tmp_path.glob("replay*"):
        ReplayProvider(MARKET, state).shutdown_cloud()


def test_a_gcp_catalog_next_to_the_default_market_keeps_gcp(tmp_path, caplog, cloud_dirs):
    caplog.set_level(logging.INFO, logger="scheduler.provider_setup")
    entries = default_entries() + [_catalog(tmp_path, "gcp", "lambda")]
    replay, catalog = build_providers(entries, tmp_path, tmp_path)
    registry = ProviderRegistry([replay, catalog])  # raised "served by two adapters" before
    assert catalog.provider_names == {"gcp", "lambda"}
    assert replay.provider_names == {"aws", "gcp-replay"}
    assert registry.get("gcp") is catalog and registry.get("gcp-replay") is replay
    # A job placed on the replayed gcp before the catalog was configured is still ended by
    # the adapter that launched it (it looped on "catalog cannot launch" before).
    assert registry.compute("gcp") is replay and registry.compute("gcp-replay") is replay
    with pytest.raises(KeyError, match="only lists offers"):
        registry.compute("lambda")
    assert {o.provider for o in catalog.list_offers()} == {"gcp", "lambda"}
    assert "provider 'gcp' is also served by another entry" in caplog.text
    assert "listed as 'gcp-replay'" in caplog.text

    # The replayed market translates the name both ways: offers, prices, launch, describe.
    offers = replay.list_offers()
    assert {o.provider for o in offers} == {"aws", "gcp-replay"}
    assert {o.provider for o in replay.offers_now()} == {"aws", "gcp-replay"}
    assert {p.series.split("/")[0] for p in replay.poll_prices()} == {"aws", "gcp-replay"}
    from providers.base import LaunchRequest
    gcp = next(o for o in offers if o.provider == "gcp-replay" and o.market.value == "on-demand")
    instance = replay.launch(LaunchRequest(offer=gcp, client_token="t-1", tags={"ga-test": "1"},
                                           agent_env={}))
    assert instance.offer == gcp.key and instance.provider == "gcp-replay"
    (described,) = replay.describe({"ga-test": "1"})
    assert described.offer == gcp.key
    replay.terminate(instance.id)


def test_a_catalog_next_to_its_clouds_adapter_yields(tmp_path):
    # Two catalog entries stand in for "a cloud's adapter and a catalog" as far as names go:
    # the later one yields, and the adapters get distinct names (one poller lease each).
    first, second = build_providers([_catalog(tmp_path, "gcp"), _catalog(tmp_path, "gcp")],
                                    tmp_path, tmp_path)
    ProviderRegistry([first, second])
    assert first.provider_names == {"gcp"} and second.provider_names == {"gcp-catalog"}
    assert {o.provider for o in second.list_offers()} == {"gcp-catalog"}
    assert (first.name, second.name) == ("catalog", "catalog-2")


def test_a_catalog_alone_keeps_its_names(tmp_path):
    (catalog,) = build_providers([_catalog(tmp_path, "gcp")], tmp_path, tmp_path)
    assert catalog.provider_names == {"gcp"}


def test_two_markets_imitating_one_cloud_get_apart(tmp_path, cloud_dirs):
    first, second = build_providers([{"kind": "replay", "market": MARKET},
                                     {"kind": "replay", "market": MARKET}], tmp_path, tmp_path)
    ProviderRegistry([first, second])
    assert first.provider_names == {"aws", "gcp"}
    assert second.provider_names == {"aws-replay", "gcp-replay"}
    assert (first.name, second.name) == ("replay", "replay-2")


def test_two_cloud_adapters_of_one_name_are_refused_naming_both(tmp_path):
    aws = {"kind": "aws", "regions": ["us-east-1"], "max_attempts": 1}
    with pytest.raises(ProviderConfigError,
                       match=r"providers\[2\] \(aws\) and providers\[0\] \(aws\) both serve "
                             r"provider 'aws'"):
        build_providers([aws, {"kind": "replay", "market": MARKET}, aws], tmp_path, tmp_path)
