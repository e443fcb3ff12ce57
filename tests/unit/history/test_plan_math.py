"""Plan arithmetic, time parsing and AWS zone ids (pure)."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pytest

from providers.catalog.dumps import parse_spot_tsv, region_of_zone_id
from scheduler.services.history import QueryError, parse_when
from scheduler.services.plans import (
    estimate,
    interruption_rate_per_hour,
    poisson_quantile,
)
from tests.factories.offers import offer

NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)
FLAT = {"p10": 1.0, "mean": 1.0, "p90": 1.0, "hours": 10.0}


@pytest.mark.parametrize("text,want", [
    ("30d", datetime(2026, 10, 31, 12, tzinfo=UTC)),
    ("12h", datetime(2026, 11, 30, 0, tzinfo=UTC)),
    ("2020-03-01", datetime(2020, 3, 1, tzinfo=UTC)),
    ("2020-03-01T12:00Z", datetime(2020, 3, 1, 12, tzinfo=UTC)),
    ("2020-03-01T14:00+02:00", datetime(2020, 3, 1, 12, tzinfo=UTC)),
    ("now", NOW),
])
def test_parse_when(text, want):
    assert parse_when(text, "since", NOW) == want


def test_parse_when_names_the_field():
    assert parse_when(None, "since") is None
    with pytest.raises(QueryError, match="until: got 'yesterday'"):
        parse_when("yesterday", "until", NOW)


def test_rate_and_poisson_quantile():
    assert interruption_rate_per_hour(0) == 0
    assert interruption_rate_per_hour(1) == math.inf
    assert interruption_rate_per_hour(0.2) == pytest.approx(-math.log(0.8) / 730)
    assert poisson_quantile(0) == 0
    assert poisson_quantile(1.0) == 2  # P(N<=1)=0.736, P(N<=2)=0.920
    assert poisson_quantile(10.0) == 14


def test_on_demand_has_no_rework_and_spot_pays_for_interruptions():
    od = estimate(offer(market="on-demand", interruption_risk=0), FLAT, 100, 600)
    assert od["duration_hours"] == {"low": 100, "expected": 100, "high": 100}
    assert od["cost_usd"]["expected"] == 100
    spot = estimate(offer(interruption_risk=0.5), FLAT, 100, 600)
    lost = 300 / 3600 + 0.1
    rate = -math.log(0.5) / 730
    assert spot["duration_hours"]["expected"] == pytest.approx(100 / (1 - rate * lost))
    assert spot["rework_hours"] > 0 and spot["duration_hours"]["high"] >= spot["duration_hours"]["expected"]


def test_a_job_that_can_never_finish_says_so():
    est = estimate(offer(interruption_risk=0.999999), FLAT, 10, 86400, restart_overhead_h=50)
    assert est["cost_usd"] is None and est["duration_hours"] is None


def test_zone_ids_and_tsv():
    assert region_of_zone_id("use1-az4") == "us-east-1"
    assert region_of_zone_id("apne2-az1") == "ap-northeast-2"
    assert region_of_zone_id("usgw1-az1") == "us-gov-west-1"
    with pytest.raises(ValueError):
        region_of_zone_id("us-east-1a")
    read = parse_spot_tsv("euw3-az2\tg4dn.xlarge\tLinux/UNIX\t0.1\t2022-05-31T18:20:41+00:00\n"
                          "euw3-az2\tg4dn.xlarge\tWindows\t0.3\t2022-05-31T18:20:41+00:00\n")
    assert [o.series for o in read.observations] == ["aws/eu-west-3/euw3-az2/g4dn.xlarge/spot"]
    assert read.skipped == {"not Linux/UNIX": 1}
    with pytest.raises(ValueError, match="t.tsv:1"):
        parse_spot_tsv("only\ttwo", "t.tsv")
