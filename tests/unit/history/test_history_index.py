"""The series index's pure parts: the fields of a series key, the SADDs queued for new series,
and the scan a query falls back to while the index is being built."""

from __future__ import annotations

from scheduler.store import keys
from scheduler.store.history import _scan
from scheduler.store.history_index import add_commands, fields_of

NAMES = ["aws/us-east-1/us-east-1a/p3.2xlarge/spot", "AWS/us-east-1/us-east-1b/g5.xlarge/spot",
         "gcp/europe-west4/europe-west4-a/a2-highgpu-1g/on-demand", "not/a/series"]


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[str, ...]]] = []

    def sadd(self, key: str, *members: str) -> None:
        self.calls.append((key, members))


def test_fields_of_a_series_are_lower_case_and_other_keys_have_none():
    assert fields_of(NAMES[1]) == {"provider": "aws", "region": "us-east-1", "zone": "us-east-1b",
                                   "instance_type": "g5.xlarge", "market": "spot"}
    assert fields_of(NAMES[3]) is None


def test_new_series_are_added_once_per_field_value_and_to_the_series_index():
    pipe = Recorder()
    add_commands(pipe, NAMES, "real")
    added = dict(pipe.calls)
    assert added[keys.history_index("real", "provider", "aws")] == tuple(NAMES[:2])
    assert added[keys.history_index("real", "market", "on-demand")] == (NAMES[2],)
    assert added[keys.series_index("real")] == tuple(NAMES)  # every name, indexable or not
    assert len(pipe.calls) == 1 + len({(f, v) for n in NAMES[:3] for f, v in fields_of(n).items()})


def test_every_index_key_of_a_source_shares_one_hash_tag():
    tags = {k.split("{", 1)[1].split("}", 1)[0] for k in (
        keys.history_index("replay:demo", "region", "x"), keys.history_index_built("replay:demo"),
        keys.history_index_lock("replay:demo"))}
    assert tags == {"replay:demo"}


def test_the_scan_matches_like_the_index():
    assert _scan(NAMES, {"provider": "AWS", "region": "us-east-1"}, None) == sorted(NAMES[:2])
    assert _scan(NAMES, {}, [("aws", "P3.2XLARGE")]) == [NAMES[0]]
    assert _scan(NAMES, {"market": "spot"}, []) == []
