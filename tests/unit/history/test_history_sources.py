"""History sources: names that become Redis keys, selectors queries accept, and the key
layout (real keeps the layout history had before sources; each replayed market its own)."""

from __future__ import annotations

import pytest

from scheduler.store import keys
from scheduler.store.history_sources import (
    REAL,
    for_market,
    label,
    matching,
    parse_selector,
)

S = "aws/us-east-1/us-east-1c/p3.2xlarge/spot"


def test_real_history_keeps_the_old_layout_and_replay_gets_its_own():
    assert keys.history_raw(S) == keys.history_raw(S, REAL) == f"ga:hist:{{{S}}}:raw"
    assert keys.series_index(REAL) == "ga:series"
    replayed = {keys.history_raw(S, "replay:demo"), keys.history_hourly(S, "replay:demo"),
                keys.history_meta(S, "replay:demo")}
    assert replayed == {f"ga:hist:replay:demo:{{{S}}}:{t}" for t in ("raw", "hourly", "meta")}
    assert keys.series_index("replay:demo") == "ga:series:replay:demo"


@pytest.mark.parametrize("text, want", [(None, "auto"), ("", "auto"), (" real ", "real"),
                                        ("replay", "replay"), ("all", "all"),
                                        ("replay:aws-real", "replay:aws-real")])
def test_selectors(text, want):
    assert parse_selector(text) == want


@pytest.mark.parametrize("text", ["replayed", "replay:", "replay:no such", "replay:{x}", "REAL"])
def test_bad_selectors_say_what_is_allowed(text):
    with pytest.raises(ValueError, match="allowed: auto, real, replay, replay:<market name>, all"):
        parse_selector(text)


def test_market_names_are_made_key_safe():
    assert for_market("demo") == "replay:demo"
    assert for_market("my demo {1}") == "replay:my-demo--1-"
    assert for_market("  ") == "replay:unnamed"
    assert len(for_market("x" * 200)) == len("replay:") + 63


def test_matching_and_labels():
    known = {REAL, "replay:b", "replay:a"}
    assert matching("all", known) == [REAL, "replay:a", "replay:b"]
    assert matching("replay", known) == ["replay:a", "replay:b"]
    assert matching("real", known) == [REAL]
    assert label("replay:demo") == "replayed market 'demo' (not real prices)"
    assert label(REAL) == "real prices"
