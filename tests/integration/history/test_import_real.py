"""Importing the real AWS spot dumps (2019-12 → 2020-03, p2/p3, 9 regions): counts, a query's
statistics and ``offers --at``, each checked against figures computed here, independently,
straight from the JSON files (plain Python, no code of the scheduler)."""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

import pytest

from scheduler.services import history as history_service
from scheduler.services.history_import import import_path
from tests.integration.history.conftest import DUMPS, TSV

SERIES = "aws/us-east-1/us-east-1b/p3.2xlarge/spot"


def _ms(stamp: str) -> int:
    return int(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1000)


def read_files(folder: Path):
    """records, distinct (zone, type, ms, price) and the per-region newest ms, from the files."""
    records, distinct, newest = 0, set(), defaultdict(int)
    for file in sorted(folder.rglob("*.json")):
        for rec in json.loads(file.read_text())["SpotPriceHistory"]:
            records += 1
            zone, ms = rec["AvailabilityZone"], _ms(rec["Timestamp"])
            distinct.add((zone, rec["InstanceType"], ms, float(rec["SpotPrice"])))
            newest[zone[:-1]] = max(newest[zone[:-1]], ms)
    return records, distinct, newest


def changes_by_series(distinct) -> dict[tuple[str, str], list[tuple[int, float]]]:
    """Per (zone, type): the price changes (first point, then every differing price)."""
    by = defaultdict(list)
    for zone, itype, ms, price in sorted(distinct, key=lambda r: (r[0], r[1], r[2])):
        points = by[(zone, itype)]
        if not points or points[-1][1] != price:
            points.append((ms, price))
    return by


def step_stats(points, start, end):
    """Time-weighted min/p50/p90/max/mean/last of a step function over [start, end]."""
    weights = defaultdict(int)
    before = [p for ms, p in points if ms <= start]
    price, t = (before[-1] if before else None), start
    for ms, p in points:
        if start < ms <= end:
            if price is not None:
                weights[price] += ms - t
            price, t = p, ms
    weights[price] += end - t
    total = sum(weights.values())

    def quantile(q):
        run = 0
        for value in sorted(weights):
            run += weights[value]
            if run >= q * total:
                return value

    mean = sum(v * w for v, w in weights.items()) / total
    return {"min": min(weights), "max": max(weights), "p50": quantile(0.5), "p90": quantile(0.9),
            "mean": mean, "last": price}


@pytest.fixture(scope="module")
def expected(data_dir):
    return read_files(data_dir / DUMPS)


def test_import_counts_series_observations_and_duplicates(store, data_dir, expected):
    records, distinct, _ = expected
    report = import_path(store, data_dir / DUMPS)
    changes = changes_by_series(distinct)
    assert report.files == 270
    assert report.records == report.observations == records == 16_973
    assert report.unique == len(distinct) == 16_560  # 413 records repeat across overlapping dumps
    assert report.series == len(changes) == 98
    assert report.appended.stored == sum(len(v) for v in changes.values())
    # each distinct one: change or repeat
    assert report.appended.stored + report.appended.unchanged == len(distinct)
    assert sorted(s for s in store.offers.series()) == sorted(
        f"aws/{z[:-1]}/{z}/{t}/spot" for z, t in changes)
    again = import_path(store, data_dir / DUMPS)
    assert again.appended.stored == 0 and again.appended.late > 0  # idempotent; rolled-up points are not redone


def test_query_min_p50_max_equal_the_files_raw_tier(store, data_dir, expected):
    store.offers.history.configure(raw_days=400)  # keep every point raw: exact quantiles
    import_path(store, data_dir / DUMPS)
    _, distinct, newest = expected
    points = changes_by_series(distinct)[("us-east-1b", "p3.2xlarge")]
    start, end = _ms("2020-01-01T00:00:00Z"), newest["us-east-1"]
    want = step_stats(points, start, end)
    result = history_service.query(store, provider="aws", zone="us-east-1b",
                                   instance_type="p3.2xlarge", since="2020-01-01",
                                   until="2020-04-01")
    [row] = result["rows"]
    assert row["series_key"] == SERIES and row["gpu_model"] == "V100"
    for k in ("min", "p50", "p90", "max", "last"):
        assert row[k] == want[k], k
    assert row["mean"] == pytest.approx(want["mean"], rel=1e-9)
    assert row["changes"] == sum(1 for ms, _ in points if start < ms <= end)


def test_rolled_up_history_keeps_min_max_mean_last_and_changes(store, data_dir, expected):
    import_path(store, data_dir / DUMPS)  # default: 30 days raw, older hours rolled up
    _, distinct, newest = expected
    points = changes_by_series(distinct)[("us-east-1b", "p3.2xlarge")]
    meta = store.offers.history.metas([SERIES])[SERIES]
    assert meta.rolled_until_ms is not None and meta.rolled_until_ms > meta.first_ms
    start, end = points[0][0], newest["us-east-1"]
    want = step_stats(points, start, end)
    result = history_service.query(store, provider="aws", zone="us-east-1b",
                                   instance_type="p3.2xlarge", since="2019-01-01",
                                   until="2020-04-01")
    [row] = result["rows"]
    for k in ("min", "max", "last"):
        assert row[k] == want[k], k
    assert row["mean"] == pytest.approx(want["mean"], rel=1e-6)
    assert row["changes"] == len(points) - 1
    prices = sorted({p for _, p in points})
    assert prices[0] <= row["p50"] <= row["p90"] <= prices[-1]


@pytest.mark.parametrize("at", ["2020-03-10T12:00:00Z", "2020-01-15T06:30:00Z"])
def test_offers_at_returns_the_price_in_force(store, data_dir, expected, at):
    store.offers.history.configure(raw_days=400)
    import_path(store, data_dir / DUMPS)
    _, distinct, newest = expected
    at_ms = _ms(at)
    want = {}
    for (zone, itype), points in changes_by_series(distinct).items():
        before = [(ms, p) for ms, p in points if ms <= at_ms]
        if before and newest[zone[:-1]] >= at_ms:
            want[(zone, itype)] = before[-1]
    rows = history_service.offers_at(store, at)
    got = {(r["zone"], r["instance_type"]): r for r in rows}
    assert set(got) == set(want)
    for key, (ms, price) in want.items():
        assert got[key]["spot_usd_per_hour"] == price
        assert got[key]["observed_at"] == datetime.fromtimestamp(ms / 1000, UTC).isoformat()
    v100 = history_service.offers_at(store, at, gpu="V100", market="spot")
    assert v100 and all(r["gpu_model"] == "V100" for r in v100)
    assert [r["spot_usd_per_hour"] for r in v100] == sorted(r["spot_usd_per_hour"] for r in v100)


def test_archive_tsv_keeps_linux_prices_by_zone_id(store, data_dir):
    report = import_path(store, data_dir / TSV)
    lines = [ln.split("\t") for ln in (data_dir / TSV).read_text().splitlines() if ln.strip()]
    linux = [ln for ln in lines if ln[2] == "Linux/UNIX"]
    assert report.records == len(lines)
    assert report.observations == len(linux)
    assert report.series == len({(ln[0], ln[1]) for ln in linux})
    assert "aws/eu-west-3/euw3-az2/g4dn.4xlarge/spot" in store.offers.series()


def test_catalog_snapshot_import_dates_prices_and_learns_hardware(store, data_dir, tmp_path):
    from scheduler.services.history_import import HistoryImportError

    report = import_path(store, data_dir / "catalogs/anycloud_2026-05-20/gcp")
    assert report.first == report.last == "2026-05-20T00:00:00+00:00" and report.hardware > 0
    rows = history_service.query(store, gpu="A100", provider="gcp", since="2026-05-01",
                                 until="2026-06-01")["rows"]
    assert rows and all(r["gpu_model"] == "A100" and r["vram_gib"] == 40 for r in rows)
    undated = tmp_path / "vms.csv"
    undated.write_text((data_dir / "catalogs/anycloud_2026-05-20/vast/vms.csv").read_text())
    with pytest.raises(HistoryImportError, match="--provider"):
        import_path(store, undated)
    with pytest.raises(HistoryImportError, match="--at"):
        import_path(store, undated, provider="vast")
    assert import_path(store, undated, provider="vast",
                       at=datetime(2026, 5, 1, tzinfo=UTC)).series > 0
