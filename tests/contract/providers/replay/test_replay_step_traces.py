"""Instance-count traces: Bamboo's CSV step traces (real files from ``bamboo_aws_2020-11`` and
hand-written ones), their resampling, their errors, and the capacity bounds a market file
gives an offer (``instances``, a trace's count)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from core.models import Market
from providers.replay.market import MarketError, load_market
from providers.replay.timeline import DEFAULT_CSV_GAP_S, TraceError, load_trace

BAMBOO = "traces/bamboo_aws_2020-11"
G4DN_1C = "aws-spot-instances-g4dn-xlarge-us-east-1c-2020-11-20-1930-to-2020-11-21-2200"
P2_16 = "aws-spot-instances-p2-xlarge-2020-11-20-to-2020-11-23.csv"
NOW = datetime(2026, 3, 1, tzinfo=UTC)
MACHINE = "gpu_model: T4, gpu_count: 1, vram_gib: 16, vcpus: 4, memory_gib: 16"


def test_bamboo_counts_at_given_times(data_dir: Path) -> None:
    # The raw file counts seconds; rows 21529,4 / 21556,12 / 21637,5 / 21725,12 / 21849,10.
    trace = load_trace(data_dir / BAMBOO / f"{G4DN_1C}.csv", time_unit="seconds")
    assert trace.gap_seconds == DEFAULT_CSV_GAP_S == 60
    # Each tick holds the count in force at its start.
    assert [trace.count_at(s) for s in (0, 21480, 21540, 21600, 21659, 21660, 21720, 21780,
                                        21900)] == [0, 0, 4, 12, 12, 5, 5, 12, 10]
    assert max(trace.data) == 12 and len(trace.data) == 1470  # ceil(88194 s / 60 s)
    assert not trace.is_available(21539) and trace.is_available(21540)


def test_bamboo_scaled_copy_in_hours_gives_the_same_counts(data_dir: Path) -> None:
    seconds = load_trace(data_dir / BAMBOO / f"{G4DN_1C}.csv", time_unit="seconds")
    hours = load_trace(data_dir / BAMBOO / f"{G4DN_1C}_scaled.csv")  # hours: the default
    assert hours.data == seconds.data


def test_bamboo_sixteen_instance_trace(data_dir: Path) -> None:
    # Rows in hours: 0.030,9 / 0.059,2 / 0.083,0 / 0.181,16 (651.6 s) / 0.225,8 (810 s).
    trace = load_trace(data_dir / BAMBOO / P2_16)
    assert [trace.count_at(s) for s in (0, 120, 240, 600, 660, 780, 840)] == [
        0, 9, 2, 0, 16, 16, 8]
    assert max(trace.data) == 16
    fine = load_trace(data_dir / BAMBOO / P2_16, gap_seconds=10)
    # 9 instances from 108 s: a 60 s tick starting at 60 s misses them, a 10 s one does not.
    assert trace.count_at(110) == 0
    assert fine.gap_seconds == 10 and fine.count_at(110) == 9 and fine.count_at(100) == 0


def test_hand_written_csv_with_header_crlf_and_vertical_steps(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("time_seconds,running_spot_instances\r\n0,2\r\n30,2\r\n30,5\r\n"
                    "90,5\r\n90,0\r\n\r\n")
    trace = load_trace(path, gap_seconds=30)
    assert trace.data == (2, 5, 5)  # ceil(90 / 30) ticks; the 0 at the very end has no tick
    assert trace.count_at(95) == 2  # loops
    one_row = tmp_path / "one.csv"
    one_row.write_text("0,8")
    assert load_trace(one_row).data == (8,)


@pytest.mark.parametrize("text, line, problem", [
    ("0,1\n5,x\n", 2, "running_spot_instances: got 'x'"),
    ("0,1\n5,-1\n", 2, "running_spot_instances: got '-1'"),
    ("0,1\n5,1.5\n", 2, "running_spot_instances: got '1.5'"),
    ("0,1\n\nabc,1\n", 3, "time: got 'abc'"),
    ("0,1\n2,1\n1,1\n", 3, "time '1' is before the previous row"),
    ("1,1\n", 1, "the first row must be at time 0"),
    ("0,1,2\n", 1, "expected 'time,running_spot_instances'"),
    ("0,1\nnan,1\n", 2, "time: got 'nan'; must be a finite number"),
    ("time_hours,running\n0,1\n", 1, "header 'time_hours' disagrees with time_unit"),
])
def test_bad_csv_names_the_file_and_line(tmp_path: Path, text: str, line: int,
                                         problem: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(text)
    unit = "seconds" if text.startswith("time_hours") else None
    with pytest.raises(TraceError, match=re.escape(f"{path}:{line}: {problem}")):
        load_trace(path, time_unit=unit)


def test_empty_csv_and_csv_options_on_json_are_errors(tmp_path: Path) -> None:
    empty = tmp_path / "empty.csv"
    empty.write_text("\n")
    with pytest.raises(TraceError, match=re.escape(f"{empty}: no rows")):
        load_trace(empty)
    js = tmp_path / "t.json"
    js.write_text(json.dumps({"metadata": {"gap_seconds": 60}, "data": [1]}))
    with pytest.raises(TraceError, match="CSV step traces only"):
        load_trace(js, gap_seconds=30)
    with pytest.raises(TraceError, match="time_unit: got 'days'"):
        load_trace(empty, time_unit="days")


def _market(tmp_path: Path, offers: str, traces: str = "") -> Path:
    (tmp_path / "steps.csv").write_text("0,4\n1,4\n1,2\n2,2\n")  # hours
    path = tmp_path / "m.yaml"
    path.write_text(f"name: n\noffers:\n{offers}{traces}")
    return path


def test_a_market_reads_csv_traces_and_gives_each_offer_its_capacity(tmp_path: Path) -> None:
    offers = (f"  - {{region: r, zone: a, instance_type: t, {MACHINE}, "
              "spot_price_usd_per_hour: 0.1, on_demand_price_usd_per_hour: 0.3, instances: 3,\n"
              "     availability_trace: {path: steps.csv, gap_seconds: 1800}}\n"
              f"  - {{region: r, zone: b, instance_type: t, {MACHINE}, "
              "spot_price_usd_per_hour: 0.1, boot_failures: 2}\n")
    traces = "traces:\n  - {instance_type: t, zone: b, path: steps.csv, time_unit: hours}\n"
    market = load_market(_market(tmp_path, offers, traces))
    a, b = market.offers
    assert a.trace.gap_seconds == 1800 and a.trace.data == (4, 4, 2, 2)
    assert b.trace.gap_seconds == 60 and b.boot_failures == 2 and a.boot_failures == 0
    # Spot: the smaller of the trace's count and the pool; on-demand: the pool.
    assert a.capacity_limit(Market.SPOT, 0) == 3 and a.capacity_limit(Market.SPOT, 3600) == 2
    assert a.capacity_limit(Market.ON_DEMAND, 3600) == 3
    assert b.capacity_limit(Market.SPOT, 0) == 4
    listed = {(o.zone, o.market): o.capacity
              for o in market.offers_at(3600, NOW, {b.key(Market.SPOT): 5,
                                                    a.key(Market.ON_DEMAND): 1})}
    assert listed == {("a", Market.ON_DEMAND): 2, ("a", Market.SPOT): 2,
                      ("b", Market.SPOT): 0}  # never below 0


@pytest.mark.parametrize("field, value", [("instances", -1), ("boot_failures", -1)])
def test_bad_capacity_fields_name_the_field(tmp_path: Path, field: str, value: int) -> None:
    offers = (f"  - {{region: r, zone: a, instance_type: t, {MACHINE}, "
              f"on_demand_price_usd_per_hour: 0.3, {field}: {value}}}\n")
    with pytest.raises(MarketError, match=re.escape(f"offers[0].{field}: got {value}")):
        load_market(_market(tmp_path, offers))


def test_a_bad_csv_in_a_market_names_the_market_field_and_line(tmp_path: Path) -> None:
    (tmp_path / "bad.csv").write_text("0,1\n1,many\n")
    offers = (f"  - {{region: r, zone: a, instance_type: t, {MACHINE}, "
              "spot_price_usd_per_hour: 0.1, availability_trace: bad.csv}\n")
    with pytest.raises(MarketError, match=r"offers\[0\]\.availability_trace: .*bad\.csv:2: "):
        load_market(_market(tmp_path, offers))
