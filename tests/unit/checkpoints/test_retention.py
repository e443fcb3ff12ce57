"""Retention rule: which checkpoint ids survive, worked out by hand."""

from __future__ import annotations

import pytest

from scheduler.checkpoints.retention import Candidate, retained_ids


def ids(*seqs: int) -> list[Candidate]:
    return [Candidate(f"c{s:02d}", s) for s in seqs]


def test_keep_last_only() -> None:
    # 10 checkpoints, keep_last 3: the three newest.
    assert retained_ids(ids(*range(1, 11)), keep_last=3) == {"c08", "c09", "c10"}


def test_keep_last_plus_every_kth() -> None:
    # keep_every 4 keeps sequences 1, 5, 9; keep_last 3 keeps 8, 9, 10.
    assert retained_ids(ids(*range(1, 11)), keep_last=3, keep_every=4) == {
        "c01", "c05", "c08", "c09", "c10"}


def test_every_kth_counts_sequences_not_positions_after_pruning() -> None:
    # After an earlier prune only 1, 5, 8, 9, 10, 11 are left; with keep_last 2, keep_every 4
    # the survivors are 1, 5, 9 (by sequence) and 10, 11: 8 goes, 9 stays.
    assert retained_ids(ids(1, 5, 8, 9, 10, 11), keep_last=2, keep_every=4) == {
        "c01", "c05", "c09", "c10", "c11"}


def test_every_kth_without_sequences_counts_by_position() -> None:
    old = [Candidate(f"c{i}") for i in range(1, 8)]  # manifests from before sequences
    # positions 1..7; keep_every 3 -> 1, 4, 7; keep_last 1 -> 7.
    assert retained_ids(old, keep_last=1, keep_every=3) == {"c1", "c4", "c7"}


def test_protected_ids_are_kept_and_unknown_ones_ignored() -> None:
    assert retained_ids(ids(1, 2, 3, 4), keep_last=1, protect={"c02", "gone"}) == {"c02", "c04"}


def test_newest_complete_is_kept_when_newer_ones_are_incomplete() -> None:
    cands = [Candidate("c1", 1), Candidate("c2", 2), Candidate("c3", 3, complete=False)]
    # keep_last 1 keeps c3, whose blobs are missing; a restart would restore c2: kept too.
    assert retained_ids(cands, keep_last=1) == {"c2", "c3"}


def test_order_of_candidates_does_not_matter() -> None:
    assert retained_ids(list(reversed(ids(1, 2, 3, 4, 5))), keep_last=2) == {"c04", "c05"}


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        retained_ids(ids(1), keep_last=0)
    with pytest.raises(ValueError):
        retained_ids(ids(1), keep_last=1, keep_every=-1)
