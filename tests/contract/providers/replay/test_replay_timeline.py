"""Market clock, availability traces, price series and price observations (no I/O but small
hand-written files)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from providers.replay.market import expand_path, load_market
from providers.replay.timeline import (
    AvailabilityTrace,
    MarketClock,
    PriceSeries,
    TraceError,
    load_trace,
)
from core.config import shared_data_dir

EPOCH = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def test_clock_maps_wall_to_market_and_back() -> None:
    clock = MarketClock(EPOCH, start_market_s=7200, time_scale=600)
    assert clock.market_s(EPOCH) == 7200
    assert clock.market_s(EPOCH + timedelta(seconds=3)) == 7200 + 1800
    assert clock.wall_at(7200 + 1800) == EPOCH + timedelta(seconds=3)
    naive = (EPOCH + timedelta(seconds=1)).replace(tzinfo=None)
    assert clock.market_s(naive) == 7800


def test_hand_written_trace_polarity(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"metadata": {"gap_seconds": 60}, "data": [1, 1, 0]}))
    trace = load_trace(path)
    # 1 = available, 0 = preempted/unavailable
    assert [trace.is_available(t) for t in (0, 59, 60, 119, 120, 179)] == [
        True, True, True, True, False, False]
    # the trace loops past its end
    assert trace.is_available(180) and not trace.is_available(300)
    assert trace.duration_s == 180


def test_counts_above_one_are_available() -> None:
    trace = AvailabilityTrace(data=(8, 0, 3), gap_seconds=10)
    assert trace.is_available(0) and not trace.is_available(10) and trace.is_available(25)


def test_derived_interruption_risk() -> None:
    # one drop (1→0) plus the wrap-around edge (0 at the end, 1 at the start: not a drop)
    day = AvailabilityTrace(data=tuple([1] * 143 + [0]), gap_seconds=600)  # one day
    assert day.drop_count() == 1
    assert day.interruption_risk() == 1.0  # 30 drops per 30 days: capped
    month = AvailabilityTrace(data=tuple([1] * 3 + [0] + [1] * 4316), gap_seconds=600)  # 30 days
    assert month.interruption_risk() == pytest.approx(1 / 1)
    sixty = AvailabilityTrace(data=tuple([1, 0] + [1] * 8638), gap_seconds=600)  # 60 days
    assert sixty.interruption_risk() == pytest.approx(0.5)
    assert AvailabilityTrace(data=(1, 1), gap_seconds=1).interruption_risk() == 0.0
    # the wrap edge counts when the trace ends available and starts reclaimed
    assert AvailabilityTrace(data=(0, 1, 1), gap_seconds=1).drop_count() == 1


@pytest.mark.parametrize("payload, problem", [
    ({"data": [1]}, "metadata"),
    ({"metadata": {"gap_seconds": 0}, "data": [1]}, "gap_seconds"),
    ({"metadata": {"gap_seconds": 60}, "data": []}, "data"),
    ({"metadata": {"gap_seconds": 60}, "data": [1, -1]}, r"data\[1\]"),
    ({"metadata": {"gap_seconds": 60}, "data": [1, True]}, r"data\[1\]"),
])
def test_malformed_traces(tmp_path: Path, payload: dict, problem: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(payload))
    with pytest.raises(TraceError, match=problem):
        load_trace(path)
    with pytest.raises(TraceError, match="not found"):
        load_trace(tmp_path / "missing.json")


def test_price_series_steps() -> None:
    series = PriceSeries(1.0, ((7200.0, 3.0), (3600.0, 2.0)))  # unsorted on purpose
    assert [series.price_at(t) for t in (0, 3599, 3600, 7199, 7200, 10**9)] == [
        1.0, 1.0, 2.0, 2.0, 3.0, 3.0]
    assert series.steps_between(0, 3600) == [(3600.0, 2.0)]
    assert series.steps_between(3600, 7200) == [(7200.0, 3.0)]
    assert series.steps_between(7200, 10**9) == []


def test_expand_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GA_DATA_DIR", raising=False)
    assert expand_path("${GA_DATA_DIR}/x.csv", tmp_path) == shared_data_dir() / "x.csv"
    monkeypatch.setenv("GA_DATA_DIR", "/data")
    assert expand_path("$GA_DATA_DIR/x.csv", tmp_path) == Path("/data/x.csv")
    assert expand_path("sub/t.json", tmp_path) == tmp_path / "sub" / "t.json"
    assert expand_path("${NO_SUCH_VAR_GA}/t", tmp_path) == tmp_path / "${NO_SUCH_VAR_GA}" / "t"


def test_price_observations_window(tmp_path: Path) -> None:
    (tmp_path / "m.yaml").write_text("""
name: p
time_scale: 3600          # one wall second = one market hour
start_offset_hours: 1
offers:
  - {region: r, zone: z, instance_type: t, gpu_model: T4, gpu_count: 1, vram_gib: 16,
     vcpus: 4, memory_gib: 16, on_demand_price_usd_per_hour: 0.5,
     spot_price_usd_per_hour: 0.2,
     spot_price_series: [{at_hours: 0.5, price: 0.21}, {at_hours: 2, price: 0.25},
                         {at_hours: 4, price: 0.3}]}
""")
    market = load_market(tmp_path / "m.yaml")
    clock = market.clock(EPOCH)
    at = lambda s: EPOCH + timedelta(seconds=s)
    everything = market.price_observations(clock, None, at(2))
    spot = "replay/r/z/t/spot"
    # opening prices at the epoch (market hour 1: the 0.5 h step already in force), then the
    # step at market hour 2 = wall second 1; the hour-4 step is still in the future
    assert [(o.series, o.observed_at, o.price_usd_per_hour) for o in everything] == [
        ("replay/r/z/t/on-demand", EPOCH, 0.5), (spot, EPOCH, 0.21), (spot, at(1), 0.25)]
    assert market.price_observations(clock, at(1), at(2)) == []
    later = market.price_observations(clock, at(2), at(10))
    assert [(o.observed_at, o.price_usd_per_hour) for o in later] == [(at(3), 0.3)]
