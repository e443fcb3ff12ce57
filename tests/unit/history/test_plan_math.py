"""Time parsing and AWS zone ids (pure). Plan costs are the policy's (tests/integration/planning)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from providers.catalog.dumps import parse_spot_tsv, region_of_zone_id
from scheduler.services.history import QueryError, parse_when

NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)


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
