"""policies.lookahead on hand-made markets whose best choice can be worked out by hand.

Units: steps of 10 min (the table's smallest); a job of 10 h (60 steps) with a restart
overhead of 0.5 h (3 steps), spot at a third of on-demand unless said otherwise."""

from __future__ import annotations

import numpy as np
import pytest

from policies import lookahead as la
from policies.decisions import decide
from policies.views import NO_OFFER, JobView, Reason
from tests.unit.policies.views_builder import OD, SPOT, market, offers

H = 1.0 / 6.0
C, D = 10.0, 0.5
FOREVER_H = 1e6


def advice(r_h, *, running=la.WAIT, up=False, age_h=0.0, mean_up_h=2.0, mean_down_h=1.0,
           ratio=1 / 3, speed=1.0, wait_cost=la.WAIT_COST, c=C):
    one = lambda v: np.array([v], dtype=float)  # noqa: E731
    return int(la.advise(one(r_h), one(c), np.array([running]), np.array([up]), one(age_h),
                         one(mean_up_h), one(mean_down_h), one(ratio), one(D), one(speed),
                         None, wait_cost)[0])


def test_stay_probabilities_are_lomax_of_shape_two():
    # mean 1 step: λ = 1, P(one more step | age k) = ((1 + k) / (2 + k))²
    assert la.stay_probabilities(1.0)[:3] == pytest.approx([1 / 4, 4 / 9, 9 / 16])
    # older runs are likelier to last: the hazard falls with age
    assert np.all(np.diff(la.stay_probabilities(5.0)) > 0)


def test_spot_that_never_returns_waits_to_the_last_step_when_waiting_is_free():
    # slack j = r - c in steps; going on-demand needs d = 3 of it. With no cost of waiting and
    # a (vanishing) chance that spot returns, waiting wins while one more step still leaves 3:
    # wait at j = 4, on-demand at j = 3
    assert advice(C + 4 * H + 1e-9, mean_down_h=FOREVER_H, wait_cost=0.0) == la.WAIT
    assert advice(C + 3 * H + 1e-9, mean_down_h=FOREVER_H, wait_cost=0.0) == la.ON_DEMAND
    # less than d: no launch is in time on the grid, no advice (the safety net's case)
    assert advice(C + 2 * H, mean_down_h=FOREVER_H, wait_cost=0.0) == la.NO_ADVICE


def test_spot_that_never_returns_means_on_demand_at_once_when_waiting_costs():
    # the same market with a cost per step waited: it buys nothing, so on-demand now
    for slack_steps in (4, 20, 100):
        assert advice(C + slack_steps * H + 1e-9, mean_down_h=FOREVER_H) == la.ON_DEMAND


def test_spot_that_is_never_reclaimed_is_taken_and_kept():
    forever = dict(up=True, mean_up_h=FOREVER_H, age_h=5.0)
    # idle: launch it (3 steps of overhead at 1/3 buy 60 steps at 1/3 instead of 1)
    assert advice(C + 10 * H, **forever) == la.SPOT
    # running on it: keep it, even with no slack left for a relaunch
    assert advice(C + 0.5 * H, running=la.SPOT, **forever) == la.SPOT
    # on on-demand: leave for it while the slack pays a round trip (2d = 6 steps: the launch,
    # and the relaunch on on-demand should it be reclaimed after all), else stay
    assert advice(C + 6 * H + 1e-9, running=la.ON_DEMAND, **forever) == la.SPOT
    assert advice(C + 5 * H + 1e-9, running=la.ON_DEMAND, **forever) == la.ON_DEMAND


def test_spot_dearer_than_on_demand_is_never_chosen():
    for r_h in (C + 0.6, C + 2.0, C + 12.0):
        for running in (la.WAIT, la.ON_DEMAND):
            assert advice(r_h, running=running, up=True, mean_up_h=FOREVER_H,
                          ratio=1.5) == la.ON_DEMAND


def test_spot_runs_shorter_than_the_overhead_are_never_launched():
    # runs of ~1 step (10 min) against a 3-step overhead: a launch makes no progress before
    # the reclaim, so from idle the job never goes to spot, at any slack
    for slack_h in (0.6, 2.0, 8.0):
        assert advice(C + slack_h, up=True, mean_up_h=H / 20, mean_down_h=H) != la.SPOT


def test_no_advice_outside_the_table():
    assert advice(np.inf) == la.NO_ADVICE                        # no deadline
    assert advice(C + 2.0, mean_up_h=np.inf) == la.NO_ADVICE     # no known run length
    assert advice(C + 2.0, ratio=np.nan) == la.NO_ADVICE         # no spot price
    assert advice(C - 1.0) == la.NO_ADVICE                       # not even on-demand in time
    # beyond 480 steps of 10 min × 2^8 (about 20,480 h)
    assert advice(25_000.0, c=24_000.0) == la.NO_ADVICE


def test_ages_that_are_not_numbers_count_as_new_runs_and_huge_ones_as_old():
    forever = dict(up=True, mean_up_h=FOREVER_H)
    for age in (np.nan, -3.0, 0.0):
        assert advice(C + 10 * H, age_h=age, **forever) == advice(C + 10 * H, age_h=0.0,
                                                                  **forever)
    assert advice(C + 10 * H, age_h=np.inf, **forever) == advice(C + 10 * H, age_h=1e9,
                                                                 **forever)


def test_step_grows_with_the_deadline_and_the_decision_interval():
    assert la.step_for(80.0) == pytest.approx(H)
    assert la.step_for(81.0) == pytest.approx(2 * H)
    assert la.step_for(10.0, interval_h=0.25) == pytest.approx(0.25)
    assert la.step_for(1e9) is None


def test_half_speed_spot_is_priced_per_hour_of_work():
    # spot at half the speed and 0.4 × on-demand's hourly price costs 0.8 per hour of work:
    # still cheaper, taken when plentiful and never reclaimed with slack to spare for the
    # doubled time (c / 0.5 = 20 h): deadline in 24 h
    assert advice(24.0, up=True, mean_up_h=FOREVER_H, age_h=5.0, ratio=0.8,
                  speed=0.5) == la.SPOT
    # with 12 h, 20 h on it cannot be in time: a launch there is wasted before on-demand
    # must take over at the start (12 - 10 - .5 = 1.5 h of slack, 3 h of spot lose 1.5)
    assert advice(10.75, up=True, mean_up_h=FOREVER_H, age_h=5.0, ratio=0.8,
                  speed=0.5) == la.ON_DEMAND


def _job(r_h, current=NO_OFFER, since_start_h=5.0):
    return JobView.build(1, compute_h=C, remaining_compute_h=C, time_to_deadline_h=r_h,
                         restart_overhead_h=D, decision_interval_h=H, current=current,
                         since_start_h=since_start_h)


def test_the_policy_follows_the_table_within_the_safety_net():
    models = offers(("a", SPOT, 1.0), ("a", OD, 3.0))
    # a long-lived spot run (mean 1000 h, 5 h old): an on-demand job with 2 h of slack
    # leaves for it; with 0.4 h (less than d) it stays
    old_run = market(models, mean_up_h=1000.0, up_age_h=5.0)
    moved = decide(_job(C + 2.0, current=1), old_run)
    assert moved.offer[0] == 0 and moved.reason[0] == Reason.MIGRATE_TO_SPOT
    kept = decide(_job(C + 0.4, current=1), old_run)
    assert kept.offer[0] == 1
    # spot gone for good (mean outage 10^6 h): an idle job takes on-demand at once
    gone = market(models, available=[False, True], mean_down_h=FOREVER_H, down_age_h=100.0)
    placed = decide(_job(C + 6.0), gone)
    assert placed.offer[0] == 1 and placed.reason[0] == Reason.ON_DEMAND_NEEDED
