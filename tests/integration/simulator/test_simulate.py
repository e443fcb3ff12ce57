import functools

import numpy as np
import pytest

from policies import baselines
from policies.decisions import decide
from policies.views import NO_OFFER, Decision, Reason
from scheduler.simulator.simulate import SimJob, simulate
from scheduler.simulator.market import SimulationError

TICK = 1 / 6
TRACE = [1, 1, 1, 0, 0, 0, 1, 1, 1, 1, 1, 1]      # 1 = available (cbl_spot_traces polarity)
spot_or_wait = functools.partial(baselines.skypilot, strategy="failover")


def test_reclaim_wait_relaunch_by_hand(sim_market):
    market = sim_market({"a": TRACE})
    # spot 0-2 (overhead one tick, 2/6 h done), reclaimed at 3, back at 6: overhead, then done
    r = simulate(spot_or_wait, market, SimJob(0.5, None, TICK), np.array([0]), max_ticks=12)
    assert r.finish_h[0] == pytest.approx(8 * TICK)
    assert r.cost_usd[0] == pytest.approx(5 * TICK * 1.0)
    assert r.spot_h[0] == pytest.approx(5 * TICK) and r.on_demand_h[0] == 0
    assert (r.preemptions[0], r.migrations[0]) == (1, 1)
    # the last tick is billed only for the part used
    r = simulate(spot_or_wait, market, SimJob(0.45, None, TICK), np.array([0]), max_ticks=12)
    assert r.finish_h[0] == pytest.approx(7 * TICK + 0.45 - 2 * TICK)
    assert r.cost_usd[0] == pytest.approx(4 * TICK + 0.45 - 2 * TICK)


def test_start_offsets_and_polarity(sim_market):
    market = sim_market({"a": TRACE})
    # starting at tick 3 (trace 0 = unavailable) the spot-only policy waits 3 ticks
    r = simulate(spot_or_wait, market, SimJob(0.5, None, TICK), np.array([3]), max_ticks=9)
    assert r.finish_h[0] == pytest.approx(7 * TICK)
    assert r.start_h[0] == pytest.approx(3 * TICK)


def test_checkpoint_interval_loses_unsaved_progress(sim_market):
    market = sim_market({"a": TRACE}, notices={"a": "{style: none}"})  # reclaimed unwarned
    # checkpoints every .25 h of progress: reclaimed at 2/6 h done → back to .25 h; relaunched
    # at tick 6 (overhead), 1/6 h more at tick 7, the last .083 h in tick 8
    job = SimJob(0.5, None, TICK, checkpoint_interval_h=0.25)
    r = simulate(spot_or_wait, market, job, np.array([0]), max_ticks=12)
    assert r.finish_h[0] == pytest.approx(8 * TICK + (0.5 - 0.25 - TICK))


def test_budget_alerts_and_stop(sim_market):
    market = sim_market({"a": [1] * 12})
    job = SimJob(2.0, None, TICK, budget_usd=0.5)
    r = simulate(decide, market, job, np.array([0]), max_ticks=12)
    # $1/h spot billed 1/6 per tick: 0.333 after two ticks, 0.5 after three → 80/90/100 % at once
    assert [(scope, t) for _, scope, t, _ in r.alerts] == [("job", .8), ("job", .9), ("job", 1.0)]
    assert r.alerts[-1][3] == pytest.approx(0.5)
    assert r.budget_stopped[0] and not r.finished[0]
    assert r.cost_usd[0] == pytest.approx(0.5)


def test_budget_stops_baselines_too_like_the_daemon(sim_market):
    """The daemon's budget step stops a job at 100 % whatever the policy: so does the
    simulator, for baselines that know nothing of budgets."""
    market = sim_market({"a": [1] * 12})
    job = SimJob(2.0, None, TICK, budget_usd=0.5)
    for policy in (baselines.greedy, baselines.on_demand, spot_or_wait):
        r = simulate(policy, market, job, np.array([0]), max_ticks=12)
        assert r.budget_stopped[0] and not r.finished[0], policy
        assert r.alerts[-1][2] == 1.0
        assert 0.5 <= r.cost_usd[0] < 0.5 + 3.0 * TICK  # up to the tick that crossed it


def test_deadline_met_and_missed(sim_market):
    market = sim_market({"a": TRACE})
    r = simulate(spot_or_wait, market, SimJob(0.5, 1.0, TICK), np.array([0, 6]), max_ticks=6)
    assert list(r.met_deadline) == [False, True]        # run 0 unfinished after 6 ticks


def test_policy_choosing_an_unavailable_offer_is_an_error(sim_market):
    market = sim_market({"a": [0, 0, 0]})
    spot = int(np.flatnonzero(market.table.is_spot)[0])

    def bad(jobs, mk):
        return Decision(np.full(len(jobs), spot), np.full(len(jobs), Reason.SPOT))

    with pytest.raises(SimulationError, match="unavailable offer"):
        simulate(bad, market, SimJob(1.0), np.array([0]), max_ticks=2)


def test_market_too_short(sim_market):
    with pytest.raises(SimulationError, match="covers"):
        simulate(decide, sim_market({"a": TRACE}), SimJob(1.0), np.array([5]), max_ticks=10)


def test_on_demand_baseline_costs_compute_plus_one_overhead(sim_market):
    market = sim_market({"a": TRACE})
    r = simulate(baselines.on_demand, market, SimJob(1.0, None, TICK), np.array([0, 2]),
                 max_ticks=10)
    assert list(r.cost_usd) == pytest.approx([3.0 * (1 + TICK)] * 2)
    assert NO_OFFER == -1
