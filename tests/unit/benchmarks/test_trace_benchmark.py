"""The trace benchmark's driver and claims: batching the deadlines changes no run, the starts
are what its report says, and each claim fails when its numbers say so."""

import math

import numpy as np
import pytest

from tests.fixtures.shared_data import shared_file

shared_file("traces", "cbl_spot_traces", "preemption", "1-node", "aws-04-22-2023",
            "us-east-1c_v100_1.json")

from benchmarks.policies import cbl_traces, report  # noqa: E402
from scheduler.simulator.runner import compare, policy_registry  # noqa: E402
from scheduler.simulator.simulate import SimJob  # noqa: E402


def test_all_deadlines_in_one_call_equal_one_call_per_deadline():
    # two zones, so migrations and the correlation state are exercised too
    _, market, starts = cbl_traces._market_and_starts(
        "cbl-gpu-preemption/us-east-1c+f_v100_1", 12, 7)
    names = ("arbiter", "greedy", "uniform-progress")
    batched = cbl_traces.simulate_deadlines(market, starts, (52, 80), names, policy_registry())
    for i, deadline in enumerate((52, 80)):
        one = compare(market, SimJob(48.0, float(deadline), 0.2), starts, list(names),
                      cbl_traces.LIMIT_TICKS, with_optimum=False)
        for name in names:
            np.testing.assert_array_equal(batched[name][i].cost_usd, one.results[name].cost_usd)
            np.testing.assert_array_equal(batched[name][i].finish_h, one.results[name].finish_h)
            np.testing.assert_array_equal(batched[name][i].met_deadline,
                                          one.results[name].met_deadline)


def test_starts_are_distinct_and_leave_80_h_or_are_all_there_are():
    setting = next(s for s in cbl_traces.trace_sets.settings() if s.trace_set == "bamboo")
    _, ticks = cbl_traces.build_market(setting)
    every = cbl_traces.start_ticks(setting, ticks, 300, 1)
    # 88.8 h of trace leave 53 start ticks with 80 h after them: all of them, once
    assert list(every) == list(range(ticks - cbl_traces.LIMIT_TICKS + 1))
    some = cbl_traces.start_ticks(setting, ticks, 20, 1)
    assert len(set(some)) == 20 and some.max() + cbl_traces.LIMIT_TICKS <= ticks


def _rows(**over):
    """One setting, one deadline: ours and every baseline, with ``over[policy]`` changes."""
    base = {"cost_mean": 0.6, "cost_p95": 0.9, "gap_to_optimum": 0.10, "misses": 0,
            "runs": 10}
    rows = []
    for policy in (report.OURS, *report.BASELINES):
        r = {"set": "s", "mode": "single", "setting": "z", "deadline_h": 52,
             "policy": policy, **base, "norm": [0.6] * 10}
        r |= over.get(policy, {})
        rows.append(r)
    return rows


def test_claims_hold_and_fail_on_their_numbers():
    ok = _rows(**{report.OURS: {"cost_mean": 0.55, "gap_to_optimum": 0.04},
                  report.UP: {"gap_to_optimum": 0.10}})
    (c,) = report.setting_claims(ok)
    assert (c["gap"], c["cost"], c["p95"], c["misses"]) == (True, True, True, True)
    assert c["ratio"] == pytest.approx(0.4)

    # half of UP's gap is the bound; a cheaper baseline that misses is no rival
    bad = _rows(**{report.OURS: {"cost_mean": 0.55, "gap_to_optimum": 0.06,
                                 "cost_p95": 1.006, "misses": 1},
                   "skypilot-failover": {"cost_mean": 0.3, "misses": 4},
                   "greedy": {"cost_mean": 0.54}})
    (c,) = report.setting_claims(bad)
    assert (c["gap"], c["cost"], c["p95"], c["misses"]) == (False, False, False, False)
    assert [b for b, _ in c["cheaper"]] == ["greedy"]
    assert [b for b, _, _ in c["cheaper_by_missing"]] == ["skypilot-failover"]
    assert report.claim_counts(bad)["s"]["all"] == (0, 1)


def test_a_tie_is_no_loss_and_up_at_the_optimum_gives_no_ratio():
    rows = _rows(**{report.OURS: {"cost_mean": 0.6004, "gap_to_optimum": 0.0},
                    report.UP: {"gap_to_optimum": 0.0}})
    (c,) = report.setting_claims(rows)
    assert c["cost"] and c["gap"] and math.isnan(c["ratio"])


def test_knob_neighbours_are_the_knobs_the_policy_reads():
    from policies.decisions import PolicyConfig

    variants, notes = cbl_traces.knob_variants((0.5, 1.5))
    knobs = {k for over in variants.values() for k in over}
    assert {"reserve_factor", "on_demand_band_h", "migration_margin"} <= knobs
    base = PolicyConfig()
    for over in variants.values():
        ((knob, value),) = over.items()
        assert value in (getattr(base, knob) * 0.5, getattr(base, knob) * 1.5)
    # booleans are switches, not numeric knobs with neighbours
    assert "same_zone_strict" not in knobs
