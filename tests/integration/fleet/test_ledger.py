"""The slot ledger on a real Redis: atomic claims, also across processes racing."""

from __future__ import annotations

import multiprocessing
import uuid
from datetime import UTC, datetime, timedelta

import pytest
import redis

from scheduler.store.fleet import FleetLedger


@pytest.fixture
def ledger(redis_server) -> FleetLedger:
    return FleetLedger(redis_server.client(), f"ledger-{uuid.uuid4().hex[:8]}")


def test_claims_never_give_one_gpu_twice_and_release_is_idempotent(ledger: FleetLedger) -> None:
    assert ledger.claim("a", [0, 1, 2, 3], 2, "a.job1-1", {"offer": "x"}) == [0, 1]
    # The caller's view of free GPUs may be stale: claimed ones are skipped.
    assert ledger.claim("a", [0, 1, 2, 3], 2, "a.job2-1") == [2, 3]
    assert ledger.claim("a", [0, 1, 2, 3], 1, "a.job3-1") is None
    assert ledger.claim("b", [0], 1, "b.job3-1") == [0]  # another host's GPU 0
    assert ledger.allocations() == {"a": {0: "a.job1-1", 1: "a.job1-1", 2: "a.job2-1",
                                          3: "a.job2-1"}, "b": {0: "b.job3-1"}}
    # The same instance claiming again gets its own GPUs, nothing more.
    assert ledger.claim("a", [2, 3], 2, "a.job1-1") == [0, 1]
    with pytest.raises(ValueError, match="holds GPUs of host a"):
        ledger.claim("b", [1], 1, "a.job1-1")
    assert ledger.claims()["a.job1-1"].detail == {"offer": "x"}

    assert ledger.release("a.job1-1") == [0, 1]
    assert ledger.release("a.job1-1") == []
    assert ledger.claim("a", [0, 1, 2, 3], 2, "a.job4-1") == [0, 1]
    with pytest.raises(ValueError, match="count"):
        ledger.claim("a", [0], 0, "a.job5-1")


def test_release_of_a_claim_seen_earlier_leaves_a_newer_claim(ledger: FleetLedger) -> None:
    old = datetime(2026, 1, 1, tzinfo=UTC)
    ledger.claim("a", [0], 1, "a.t-1", at=old)
    seen = ledger.claims()["a.t-1"]
    ledger.release("a.t-1")
    ledger.claim("a", [0], 1, "a.t-1", at=old + timedelta(seconds=5))
    assert ledger.release("a.t-1", seen.claimed_at) == []  # not the claim it saw
    assert ledger.allocations() == {"a": {0: "a.t-1"}}
    assert ledger.release("a.t-1", ledger.claims()["a.t-1"].claimed_at) == [0]


def test_drain_refuses_claims_and_keeps_its_first_time(ledger: FleetLedger) -> None:
    first = datetime(2026, 3, 1, 12, tzinfo=UTC)
    ledger.drain("a", at=first)
    ledger.drain("a", at=first + timedelta(minutes=5))
    assert ledger.drained() == {"a": first}
    assert ledger.claim("a", [0], 1, "a.x-1") is None
    ledger.undrain("a")
    ledger.undrain("a")
    assert ledger.drained() == {}
    assert ledger.claim("a", [0], 1, "a.x-1") == [0]


def test_last_seen_keeps_the_latest_and_ending_marks_once(ledger: FleetLedger) -> None:
    t = datetime(2026, 3, 1, 12, tzinfo=UTC)
    ledger.mark_seen("a", t)
    ledger.mark_seen("a", t - timedelta(seconds=30))  # a replica reporting late
    assert ledger.last_seen() == {"a": t}
    assert ledger.mark_ending("a.none-1") is False
    ledger.claim("a", [0], 1, "a.y-1")
    assert ledger.mark_ending("a.y-1", t) is True
    assert ledger.mark_ending("a.y-1", t + timedelta(seconds=9)) is True
    claim = ledger.claims()["a.y-1"]
    assert claim.ending_at == t and claim.gpus == (0,)  # the GPU stays claimed


def _race(port: int, fleet: str, me: str, start, out) -> None:
    ledger = FleetLedger(redis.Redis(port=port, decode_responses=True), fleet)
    start.wait()
    out.put((me, ledger.claim("a", [0, 1, 2], 1, me)))


def test_processes_racing_for_the_last_gpu_one_wins(redis_server, ledger: FleetLedger) -> None:
    ledger.claim("a", [0, 1], 2, "a.first-1")
    ctx = multiprocessing.get_context("spawn")
    start, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_race, args=(redis_server.port, ledger.fleet, f"a.r{i}-1",
                                             start, out)) for i in range(6)]
    for p in procs:
        p.start()
    start.set()
    results = dict(out.get(timeout=30) for _ in procs)
    for p in procs:
        p.join(10)
    winners = {me: got for me, got in results.items() if got is not None}
    assert list(winners.values()) == [[2]], results
    assert ledger.allocations()["a"] == {0: "a.first-1", 1: "a.first-1", 2: next(iter(winners))}
