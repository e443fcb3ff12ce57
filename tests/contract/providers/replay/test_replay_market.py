"""The market loader against the real catalog and traces in the shared data folder, and the
example markets' promised timing."""

from __future__ import annotations

import csv
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from providers.catalog.reader import parse_catalog, vram_gib
from providers.replay.market import MarketError, load_market
from providers.replay.timeline import load_trace
from core.config import examples_dir
from core.models import Market

CATALOG = "catalogs/aws_skypilot_v7_gpu/vms_gpu_rows_partial.csv"
TRACES = "traces/cbl_spot_traces"
AVAIL_2022 = f"{TRACES}/availability/1-node/aws-10-26-2022"
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _kept(read, instance_types=(), zones=(), regions=()):
    return [e for e in read.entries if (not instance_types or e.instance_type in instance_types)
            and (not zones or e.zone in zones) and (not regions or e.region in regions)]


def test_catalog_rows_and_vram(data_dir: Path) -> None:
    # The replayed market reads catalogs with the catalog provider's reader: one vms.csv reader.
    path = data_dir / CATALOG
    with path.open(newline="") as handle:
        raw = list(csv.DictReader(handle))
    priced = [r for r in raw if r["AcceleratorName"] and (r["Price"] or r["SpotPrice"])]
    read = parse_catalog(path.read_text(), str(path))
    assert len(raw) == read.rows == 1209
    assert len(priced) == 1206
    # the 5 p4de.24xlarge rows repeated without a spot price merge into their first
    assert read.skipped == {"no price": 3, "merged duplicates": 5}
    assert len(read.entries) == 1206 - 5

    p3 = _kept(read, instance_types=["p3.2xlarge"], regions=["us-west-2"])
    assert {r.zone for r in p3} == {"usw2-az1", "usw2-az2", "usw2-az3", "usw2-az4"}
    az1 = next(r for r in p3 if r.zone == "usw2-az1")
    assert (az1.gpu_model, az1.gpu_count, az1.vram_gib, az1.vcpus, az1.memory_gib) == (
        "V100", 1, 16.0, 8, 61.0)
    assert az1.on_demand_price_usd_per_hour == 3.06
    assert az1.spot_price_usd_per_hour == pytest.approx(1.01)
    # usw2-az4 has no spot price in the catalog: on-demand only
    assert next(r for r in p3 if r.zone == "usw2-az4").spot_price_usd_per_hour is None

    g5 = _kept(read, instance_types=["g5.xlarge"], zones=["use1-az1"])
    assert len(g5) == 1 and g5[0].vram_gib == pytest.approx(22888 / 1024, abs=1e-3)
    p4de = _kept(read, instance_types=["p4de.24xlarge"], zones=["use1-az4"])
    assert [(e.on_demand_price_usd_per_hour, e.spot_price_usd_per_hour) for e in p4de] == [
        (40.96575, 7.8074)]


def test_vram_from_gpu_info_else_the_table() -> None:
    assert vram_gib("{'Gpus': [{'MemoryInfo': {'SizeInMiB': 81920}}]}", "A100") == 80.0
    # no memory in the literal: the hardware table's figure, or none for an unknown model
    assert vram_gib("{'Gpus': []}", "A100") == 40.0
    assert vram_gib("{'Gpus': []}", "NO-SUCH-GPU") is None


def test_market_catalog_errors_name_the_field(tmp_path: Path) -> None:
    market_file = tmp_path / "m.yaml"
    market_file.write_text("name: m\ncatalogs:\n  - {path: nope.csv, provider: aws}\n")
    with pytest.raises(MarketError, match=r"catalogs\[0\]\.path: .*nope.csv: cannot open catalog"):
        load_market(market_file)
    (tmp_path / "cpu.csv").write_text("InstanceType,AcceleratorName,AcceleratorCount,Price,Region\n"
                                      "m5.large,,0,0.1,us-east-1\n")
    market_file.write_text("name: m\ncatalogs:\n  - {path: cpu.csv, provider: aws}\n")
    with pytest.raises(MarketError, match=r"catalogs\[0\]: the filters keep no GPU row"):
        load_market(market_file)


def test_every_real_trace_loads(data_dir: Path) -> None:
    files = sorted((data_dir / TRACES).rglob("*.json"))
    assert len(files) >= 15
    for path in files:
        trace = load_trace(path)
        assert trace.gap_seconds > 0 and len(trace.data) > 100
        assert set(trace.data) <= {0, 1}, path


def test_real_trace_polarity(data_dir: Path) -> None:
    # The source README: 1 = available. us-west-2a_v100_1 starts [1, 0, 0, 1, ...].
    trace = load_trace(data_dir / AVAIL_2022 / "us-west-2a_v100_1.json")
    assert trace.gap_seconds == 600 and len(trace.data) == 3895
    assert trace.data[:4] == (1, 0, 0, 1)
    assert trace.is_available(0) and not trace.is_available(600) and trace.is_available(1800)
    assert trace.drop_count() == 126
    assert trace.interruption_risk() == 1.0  # 126 drops in 27 days: capped


def test_market_from_real_catalog_and_traces(tmp_path: Path, data_dir: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GA_DATA_DIR", str(data_dir))
    market_file = tmp_path / "m.yaml"
    market_file.write_text(f"""
name: real
time_scale: 600
catalogs:
  - path: ${{GA_DATA_DIR}}/{CATALOG}
    provider: aws
    regions: [us-west-2]
traces:
  - instance_type: p3.2xlarge
    zone: usw2-az1
    path: ${{GA_DATA_DIR}}/{AVAIL_2022}/us-west-2a_v100_1.json
""")
    market = load_market(market_file)
    assert market.provider_names == {"aws"}
    traced = [o for o in market.offers if o.trace is not None]
    assert [(o.instance_type, o.zone) for o in traced] == [("p3.2xlarge", "usw2-az1")]
    offer = traced[0]
    # tick 1 of the trace is 0: spot is left out of the offers then, on-demand stays
    at_tick_1 = {o.key for o in market.offers_at(600, NOW)}
    assert offer.key(Market.SPOT) not in at_tick_1 and offer.key(Market.ON_DEMAND) in at_tick_1
    assert offer.key(Market.SPOT) in {o.key for o in market.offers_at(0, NOW)}
    spot = offer.to_offer(Market.SPOT, 0, NOW)
    assert spot.vram_gib == 16.0 and spot.interruption_risk == 1.0
    assert spot.on_demand_price_usd_per_hour == 3.06


def _cheapest_eligible_spot(market, wall_s: float, min_vram_gib: float = 16):
    market_s = market.start_market_s + wall_s * market.time_scale
    eligible = [o for o in market.offers_at(market_s, NOW)
                if o.market is Market.SPOT and o.gpu_count >= 1 and o.vram_gib >= min_vram_gib]
    return min(eligible, key=lambda o: o.price_usd_per_hour)


def test_demo_market_reclaims_the_cheapest_once() -> None:
    market = load_market(examples_dir() / "market.yaml")
    assert market.provider_names == {"aws", "gcp"} and market.notice_seconds == 10
    first = _cheapest_eligible_spot(market, 0)
    assert (first.zone, first.instance_type) == ("us-east-1a", "g4dn.xlarge")
    for wall_s in (0, 5, 10, 20, 24.9):
        assert _cheapest_eligible_spot(market, wall_s).key == first.key
    second = _cheapest_eligible_spot(market, 25)
    assert (second.zone, second.instance_type) == ("us-east-1b", "g4dn.xlarge")
    # after the reclaim, the second stays the cheapest and nothing comes back for 8 minutes
    for wall_s in range(25, 480, 5):
        assert _cheapest_eligible_spot(market, wall_s).key == second.key, wall_s


def test_aws_real_market_timing(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GA_DATA_DIR", str(data_dir))
    market = load_market(examples_dir() / "markets" / "aws-real.yaml")
    first = _cheapest_eligible_spot(market, 0)
    assert (first.instance_type, first.zone) == ("p3.2xlarge", "usw2-az2")
    assert _cheapest_eligible_spot(market, 21).key == first.key
    for wall_s in range(23, 100, 4):
        assert _cheapest_eligible_spot(market, wall_s).zone == "usw2-az3", wall_s


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "market.yaml"
    path.write_text(text)
    return path


OFFER = """
  - region: r
    zone: z
    instance_type: t
    gpu_model: T4
    gpu_count: 1
    vram_gib: 16
    vcpus: 4
    memory_gib: 16
"""


@pytest.mark.parametrize("extra, field", [
    ("    on_demand_price_usd_per_hour: 1\n    spot_prise_usd_per_hour: 1\n",
     "offers[0].spot_prise_usd_per_hour"),
    ("    vcpus_typo: 1\n", "offers[0]"),
    ("    on_demand_price_usd_per_hour: 1\n    availability_trace: t.json\n", "offers[0]"),
    ("    spot_price_usd_per_hour: 1\n    availability_trace: missing.json\n",
     "offers[0].availability_trace"),
])
def test_bad_market_names_file_and_field(tmp_path: Path, extra: str, field: str) -> None:
    path = _write(tmp_path, "name: bad\noffers:" + OFFER + extra)
    with pytest.raises(MarketError) as info:
        load_market(path)
    assert str(path) in str(info.value) and field in str(info.value)


def test_duplicate_offer_and_unmatched_trace_are_errors(tmp_path: Path) -> None:
    twice = "name: d\noffers:" + OFFER + "    spot_price_usd_per_hour: 1\n"
    with pytest.raises(MarketError, match="defined twice"):
        load_market(_write(tmp_path, twice + twice.split("offers:")[1]))
    (tmp_path / "t.json").write_text(json.dumps({"metadata": {"gap_seconds": 1}, "data": [1]}))
    unmatched = twice + "traces:\n  - {instance_type: t, zone: other, path: t.json}\n"
    with pytest.raises(MarketError, match=r"traces\[0\]"):
        load_market(_write(tmp_path, unmatched))
