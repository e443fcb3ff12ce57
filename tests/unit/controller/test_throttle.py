"""The per-key gates of the reconcile loop."""

from __future__ import annotations

from collections import Counter

from scheduler.controller.throttle import Spread


def test_spread_keys_fall_due_once_per_interval_at_phases_of_their_own():
    gate = Spread()
    keys = [(f"job-{n}", 1) for n in range(1000)]
    assert not any(gate.due(k, 0.0, 30.0) for k in keys)  # first sight: not due
    per_second = Counter()
    per_key = Counter()
    for second in range(1, 61):
        for k in keys:
            if gate.due(k, float(second), 30.0):
                per_second[second] += 1
                per_key[k] += 1
    assert set(per_key.values()) == {2}  # every key twice in two intervals
    assert max(per_second.values()) < 3 * 1000 / 30  # spread, not all in one pass
    assert not gate.due(keys[0], 60.0, 30.0)  # asked again in the same slot
