import numpy as np
import pytest

from policies import deadline
from policies.decisions import decide, decide_placement, should_migrate
from policies.views import NO_OFFER, JobView, Reason
from tests.unit.policies.views_builder import OD, SPOT, market, offers

G, D = 0.25, 0.5


def job(r, c=10.0, **kw):
    return JobView.build(1, compute_h=c, remaining_compute_h=c, time_to_deadline_h=r,
                         restart_overhead_h=D, decision_interval_h=G, **kw)


def test_feasible_wait_and_spot_safety_by_hand():
    # c = 10, d = 0.5, g = 0.25
    assert deadline.feasible(job(12.0), np.array([False]))[0]
    assert deadline.wait_safe(job(12.0))[0]                      # 12 - .25 >= 10 + .5
    assert not deadline.wait_safe(job(10.6))[0]                  # 10.35 < 10.5
    assert deadline.feasible(job(10.6), np.array([False]))[0]
    assert not deadline.feasible(job(10.4), np.array([False]))[0]
    assert deadline.feasible(job(10.2, overhead_left_h=0.1), np.array([True]))[0]
    # a new spot instance makes no progress in its first tick (overhead .5 > .25)
    assert deadline.spot_safe(job(10.75), np.array([D]))[0]       # 10.5 >= 10 + .5
    assert not deadline.spot_safe(job(10.7), np.array([D]))[0]
    # the current one (nothing owed) progresses .25 in the tick
    assert deadline.spot_safe(job(10.6), np.array([0.0]))[0]      # 10.35 >= 9.75 + .5
    # hourly checkpoints, 0.8 h since the last one: a reclaim loses min(1, .8 + .25) = 1 h
    late = job(11.0, checkpoint_interval_h=1.0, checkpoint_age_h=0.8)
    assert not deadline.spot_safe(late, np.array([0.0]))[0]       # 10.75 < 9.75 + 1 + .5
    # a job that finishes within the interval only needs the deadline
    assert deadline.spot_safe(job(0.1, c=0.1), np.array([0.0]))[0]
    # no deadline: always safe
    assert deadline.wait_safe(JobView.build(1))[0]


def test_spot_while_it_pays_wait_while_slack_allows_on_demand_when_needed():
    models = offers(("a", SPOT, 1.0), ("a", OD, 3.0))
    up = market(models)
    down = market(models, available=[False, True])
    # reserve = 2 · 2d · c/(mean_up + mean_down) + g = 2 · 1 · 10/3 + .25 = 6.92 h
    assert deadline.reserve_h(job(40.0), down, 2.0)[0] == pytest.approx(2 * 1.0 * 10 / 3 + G)
    assert decide_placement(job(40.0), up).reason[0] == Reason.SPOT
    wait = decide_placement(job(40.0), down)
    assert wait.offer[0] == NO_OFFER and wait.reason[0] == Reason.WAIT_FOR_SPOT
    # the reserve is for jobs the lookahead does not cover: with slack 5.5 <= 6.92 such a job
    # fills the gap with on-demand
    assert deadline.on_demand_needed(job(16.0), down, np.zeros(1, bool), 2.0, 0.5)[0]
    assert not deadline.on_demand_needed(job(17.5), down, np.zeros(1, bool), 2.0, 0.5)[0]
    # the lookahead waits while waiting is safe (on-demand later costs what it costs now);
    # at 10.7 h one more tick would leave 10.45 < c + d = 10.5: on-demand now
    assert decide_placement(job(16.0), down).reason[0] == Reason.WAIT_FOR_SPOT
    need = decide_placement(job(10.7), down)
    assert need.offer[0] == 1 and need.reason[0] == Reason.ON_DEMAND_NEEDED


def test_deadline_that_becomes_infeasible():
    models = offers(("a", SPOT, 1.0), ("a", OD, 3.0))
    late = decide_placement(job(10.4), market(models))           # 10.4 < 10 + .5
    assert late.offer[0] == 1 and late.reason[0] == Reason.DEADLINE_INFEASIBLE
    no_od = decide_placement(job(10.4), market(offers(("a", SPOT, 1.0))))
    assert no_od.offer[0] == 0 and no_od.reason[0] == Reason.DEADLINE_INFEASIBLE
    running = should_migrate(job(10.4, current=0), market(models))
    assert running.target[0] == 0 and running.reason[0] == Reason.DEADLINE_INFEASIBLE


def test_safety_net_moves_a_running_spot_job_to_on_demand():
    models = offers(("a", SPOT, 1.0), ("a", OD, 3.0))
    risky = job(11.0, current=0, checkpoint_interval_h=1.0, checkpoint_age_h=0.8,
                since_start_h=5.0)
    moved = should_migrate(risky, market(models))
    assert moved.move[0] and moved.target[0] == 1 and moved.reason[0] == Reason.SAFETY_NET
    calm = job(20.0, current=0, since_start_h=5.0)
    assert decide(calm, market(models)).reason[0] == Reason.CONTINUE


def test_launch_must_leave_room_for_the_fallback():
    # slack r - c - d = .5: a spot launch costs d = .5 and leaves nothing for one more tick
    assert not deadline.launch_sustainable(job(11.0))[0]
    assert deadline.launch_sustainable(job(11.25))[0]            # slack .75 >= d + g
