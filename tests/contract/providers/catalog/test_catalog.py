"""The catalog provider against the real SkyPilot-format catalogs of five clouds, and its URL
fetch against a real local HTTP server (cache, revalidation, stale copy on failure)."""

from __future__ import annotations

import csv
import threading
from datetime import UTC, datetime
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from providers.base import Checked, Compute, Provider, Renames
from providers.catalog.fetch import CatalogFetcher, redacted
from providers.catalog.provider import CatalogConfig, CatalogProvider
from providers.catalog.reader import CatalogFormatError, parse_catalog
from providers.errors import NotFoundError, ProviderError, TransientError
from core.config import shared_data_dir
from scheduler.observability.logs import NOISY_LOGGERS
from scheduler.provider_setup import ProviderConfigError, build_providers

CATALOGS = {
    "aws": "catalogs/aws_skypilot_v7_gpu/vms_gpu_rows_partial.csv",
    "gcp": "catalogs/anycloud_2026-05-20/gcp/vms.csv",
    "azure": "catalogs/anycloud_2026-05-20/azure/vms.csv",
    "lambda": "catalogs/anycloud_2026-05-20/lambda/vms.csv",
    "vast": "catalogs/anycloud_2026-05-20/vast/vms.csv",
}
SMALL = ("InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region\n"
         "gpu_1x_a10,A10,1,30,200,,0.75,,us-east-1\n")


@pytest.fixture(scope="module")
def data_dir() -> Path:
    path = shared_data_dir()
    if not (path / CATALOGS["gcp"]).is_file():
        pytest.skip(f"real catalogs not found under {path} (set GA_DATA_DIR)")
    return path


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.mark.parametrize("cloud", sorted(CATALOGS))
def test_every_gpu_row_becomes_an_entry(data_dir, cloud):
    rows = _rows(data_dir / CATALOGS[cloud])
    read = parse_catalog((data_dir / CATALOGS[cloud]).read_text(), cloud)
    gpu = [r for r in rows if (r["AcceleratorName"] or "").strip()
           and not r["AcceleratorName"].startswith("tpu")]
    whole = [r for r in gpu if float(r["AcceleratorCount"]) == int(float(r["AcceleratorCount"]))]
    priced = [r for r in whole if (r["Price"] or "").strip() or float(r.get("SpotPrice") or 0)]
    keys = {(r["InstanceType"] or f"{r['AcceleratorName']}:{int(float(r['AcceleratorCount']))}",
             r["Region"], r.get("AvailabilityZone") or r["Region"]) for r in priced}
    assert read.rows == len(rows)
    assert len(read.entries) == len(keys)
    assert read.skipped.get("CPU VMs", 0) == sum(1 for r in rows if not (r["AcceleratorName"] or "").strip())
    assert all(e.vram_gib > 0 and e.gpu_count >= 1 and "/" not in e.region + e.zone + e.instance_type
               for e in read.entries)


def test_cloud_specific_shapes(data_dir):
    gcp = parse_catalog((data_dir / CATALOGS["gcp"]).read_text())
    a100 = next(e for e in gcp.entries if e.instance_type == "A100:1")
    assert (a100.vram_gib, a100.vcpus, a100.zone.startswith(a100.region)) == (40.0, 0, True)
    assert gcp.skipped["TPUs"] > 0
    azure = parse_catalog((data_dir / CATALOGS["azure"]).read_text())
    nc = next(e for e in azure.entries if e.instance_type == "Standard_NC12s_v3")
    assert (nc.gpu_model, nc.gpu_count, nc.vram_gib, nc.zone) == ("V100", 2, 16.0, nc.region)
    assert azure.skipped["fractional GPUs"] > 0
    vast = parse_catalog((data_dir / CATALOGS["vast"]).read_text())
    assert {e.region for e in vast.entries} >= {"denmark-dk-eu", "ca-na"}
    assert all(e.spot_price_usd_per_hour is None for e in vast.entries)  # 0.00 means none
    aws = parse_catalog((data_dir / CATALOGS["aws"]).read_text())
    assert aws.skipped["merged duplicates"] > 0  # p4de.24xlarge rows repeat
    with pytest.raises(CatalogFormatError, match="missing column"):
        parse_catalog("a,b\n1,2\n", "x.csv")


def test_provider_offers_and_no_launch(data_dir, tmp_path):
    config = CatalogConfig(kind="catalog", catalogs=[
        {"provider": c, "path": data_dir / p} for c, p in CATALOGS.items()])
    provider = CatalogProvider(config, tmp_path)
    offers = provider.list_offers()
    assert {o.provider for o in offers} == set(CATALOGS) == provider.provider_names
    spot = [o for o in offers if o.market.value == "spot"]
    # unrated: the scheduler's prior for unrated spot offers applies (poller.with_observed_risk)
    assert spot and all(o.interruption_risk is None for o in spot)
    rated = CatalogProvider(config.model_copy(update={"default_spot_risk": 0.2}), tmp_path)
    assert {o.interruption_risk for o in rated.list_offers() if o.market.value == "spot"} == {0.2}
    assert len(provider.poll_prices()) == len(offers)
    assert provider.poll_prices(since=datetime.now(UTC)) == []
    # display and planning only: a source of offers that the scheduler never launches on
    assert isinstance(provider, Provider) and not isinstance(provider, Compute)
    assert isinstance(provider, Checked) and isinstance(provider, Renames)
    assert not hasattr(provider, "launch")
    checks = provider.check()
    assert all(c.ok and "h old" in c.detail for c in checks) and len(checks) == 5


def test_config_kind_catalog(tmp_path, data_dir):
    entry = {"kind": "catalog", "catalogs": [{"provider": "gcp", "path": "${GA_DATA_DIR}/" + CATALOGS["gcp"]}]}
    [provider] = build_providers([entry], tmp_path, tmp_path)
    assert provider.provider_names == {"gcp"}
    with pytest.raises(ProviderConfigError, match="exactly one of 'path' or 'url'"):
        build_providers([{"kind": "catalog", "catalogs": [{"provider": "x"}]}], tmp_path, tmp_path)
    with pytest.raises(ProviderConfigError, match="is not a file"):
        build_providers([{"kind": "catalog", "catalogs": [{"provider": "x", "path": "nope.csv"}]}],
                        tmp_path, tmp_path)


class _Counting(SimpleHTTPRequestHandler):
    hits: list[tuple[str, str | None]] = []

    def do_GET(self):
        self.hits.append((self.path, self.headers.get("If-Modified-Since")))
        super().do_GET()

    def log_message(self, *args):
        pass


@pytest.fixture
def http_server(tmp_path):
    root = tmp_path / "www"
    root.mkdir()
    (root / "vms.csv").write_text(SMALL)
    _Counting.hits = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Counting, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", server
    server.shutdown()
    server.server_close()


def test_url_is_cached_revalidated_and_kept_when_the_host_fails(http_server, tmp_path):
    base, server = http_server
    cache = tmp_path / "cache"
    fetcher = CatalogFetcher(cache, max_age_s=3600)
    first = fetcher.fetch(f"{base}/vms.csv")
    assert (first.text, first.from_cache) == (SMALL, False)
    assert fetcher.fetch(f"{base}/vms.csv").from_cache and len(_Counting.hits) == 1
    stale = CatalogFetcher(cache, max_age_s=0)
    again = stale.fetch(f"{base}/vms.csv")
    assert again.from_cache and _Counting.hits[-1][1] is not None  # conditional GET → 304
    assert again.fetched_at == first.fetched_at
    with pytest.raises(NotFoundError):
        stale.fetch(f"{base}/missing.csv")
    server.shutdown()
    server.server_close()
    kept = stale.fetch(f"{base}/vms.csv")
    assert kept.text == SMALL and kept.stale_error and kept.age_s() >= 0
    with pytest.raises(TransientError, match="no cached copy"):
        CatalogFetcher(tmp_path / "empty", max_age_s=0).fetch(f"{base}/vms.csv")
    config = CatalogConfig(kind="catalog", catalogs=[{"provider": "lambda", "url": f"{base}/vms.csv"}])
    provider = CatalogProvider(config, cache, fetcher=stale)
    [offer] = provider.list_offers()
    assert (offer.provider, offer.gpu_model, offer.vram_gib, offer.zone) == ("lambda", "A10", 24.0, "us-east-1")
    assert "refresh failed" in provider.check()[0].detail


def test_an_unreachable_catalog_does_not_hide_the_others(http_server, tmp_path):
    """One URL that cannot be fetched (and was never cached) is skipped with a warning; the
    other catalogs still list. Once read, a catalog keeps its last read while its host fails;
    only when no catalog can be read at all does the provider raise."""
    url, server = http_server
    local = tmp_path / "gcp.csv"
    local.write_text(SMALL)
    config = CatalogConfig(kind="catalog", max_age_s=0, catalogs=[
        {"provider": "gcp", "path": local},
        {"provider": "lambda", "url": "http://127.0.0.1:1/lambda/vms.csv"},
        {"provider": "vast", "url": f"{url}/vms.csv"}])
    provider = CatalogProvider(config, tmp_path / "cache")
    assert {o.provider for o in provider.list_offers()} == {"gcp", "vast"}
    server.shutdown()
    server.server_close()
    for cached in (tmp_path / "cache").rglob("*"):
        if cached.is_file():
            cached.unlink()
    # The vast host is gone and its cached copy too: its last read is kept.
    offers = provider.list_offers()
    assert {o.provider for o in offers} == {"gcp", "vast"}
    alone = CatalogProvider(CatalogConfig(kind="catalog", catalogs=[
        {"provider": "lambda", "url": "http://127.0.0.1:1/lambda/vms.csv"}]), tmp_path / "c2")
    with pytest.raises(ProviderError):
        alone.list_offers()


SECRETS = ("S3cretPassw0rd", "T0kenValue99", "user:")


def test_a_location_is_shown_with_its_credentials_masked():
    assert redacted("https://user:S3cretPassw0rd@127.0.0.1:9/vms.csv?token=T0kenValue99&x") == (
        "https://***@127.0.0.1:9/vms.csv?token=***&***")
    assert redacted("https://example.org/vms.csv") == "https://example.org/vms.csv"
    assert redacted("/data/gcp/vms.csv") == "/data/gcp/vms.csv"


def test_a_catalog_url_with_credentials_is_never_shown_or_logged(http_server, tmp_path, caplog):
    """Logs, errors, check rows and the cache's metadata name the URL masked; the real URL is
    what is fetched."""
    base, server = http_server
    secret_url = base.replace("http://", "http://user:S3cretPassw0rd@") + "/vms.csv?token=T0kenValue99"
    config = CatalogConfig(kind="catalog", max_age_s=0, catalogs=[
        {"provider": "lambda", "url": secret_url},
        {"provider": "vast", "url": "https://user:S3cretPassw0rd@127.0.0.1:9/vms.csv?token=T0kenValue99"}])
    provider = CatalogProvider(config, tmp_path / "cache")
    shown: list[str] = []
    with caplog.at_level("INFO"):
        assert {o.provider for o in provider.list_offers()} == {"lambda"}
        shown += [f"{c.check} {c.detail}" for c in provider.check()]
        server.shutdown()
        server.server_close()
        provider.list_offers()  # lambda: the cached copy, its refresh failed
        shown += [f"{c.check} {c.detail}" for c in provider.check()]
        alone = CatalogProvider(config.model_copy(update={"catalogs": config.catalogs[1:]}),
                                tmp_path / "c2")
        with pytest.raises(ProviderError) as caught:
            alone.list_offers()
    # httpx's own INFO request lines are never emitted: the daemon keeps it at WARNING.
    shown += [r.getMessage() for r in caplog.records
              if r.name.split(".")[0] not in NOISY_LOGGERS] + [str(caught.value)]
    shown += [p.read_text() for p in (tmp_path / "cache").rglob("*.json")]
    assert any("catalog http://***@127.0.0.1:" in s and "vms.csv?token=***" in s for s in shown)
    assert any("refresh failed" in s for s in shown) and any("skipped" in s for s in shown)
    leaks = [s for s in shown if any(secret in s for secret in SECRETS)]
    assert leaks == []


def test_a_url_refused_by_the_config_is_not_echoed(tmp_path):
    entry = {"kind": "catalog", "catalogs": [
        {"provider": "lambda", "url": "ftp://user:S3cretPassw0rd@h/vms.csv?token=T0kenValue99"}]}
    with pytest.raises(ProviderConfigError, match="http:// or https://") as caught:
        build_providers([entry], tmp_path, tmp_path)
    assert not any(secret in str(caught.value) for secret in SECRETS)
