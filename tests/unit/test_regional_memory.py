"""The region-cloud base remembers where instances are for a bounded number of them."""

from __future__ import annotations

import threading
from collections import OrderedDict
from types import SimpleNamespace

from providers import regional


def test_regions_are_remembered_for_the_most_recently_seen_instances(monkeypatch):
    monkeypatch.setattr(regional, "REMEMBERED_REGIONS", 3)
    base = SimpleNamespace(_lock=threading.Lock(), _region_of=OrderedDict())
    remember = regional.RegionalCompute._remember_regions
    remember(base, {"i-1": "r1", "i-2": "r1", "i-3": "r2"})
    remember(base, {"i-1": "r1"})            # seen again: the most recent now
    remember(base, {"i-4": "r2", "i-5": "r3"})
    assert dict(base._region_of) == {"i-1": "r1", "i-4": "r2", "i-5": "r3"}
