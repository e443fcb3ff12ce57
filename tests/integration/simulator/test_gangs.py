"""Gangs in the simulator: N nodes of one offer run only while the trace counts at least N
instances, are preempted when the count drops below N, and are billed N × the price."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from policies import baselines
from policies.decisions import decide
from scheduler.simulator.market import SimulationError
from scheduler.simulator.simulate import SimJob, simulate

TICK = 1 / 6
COUNTS = [2, 2, 2, 1, 1, 2, 2, 2, 2, 2, 2, 2]     # instances available per tick; dips to 1
spot_or_wait = functools.partial(baselines.skypilot, strategy="failover")


def test_two_node_gang_is_preempted_where_the_count_dips_to_one(sim_market):
    market = sim_market({"a": COUNTS})
    one = simulate(spot_or_wait, market, SimJob(0.5, None, TICK), np.array([0]), max_ticks=12)
    two = simulate(spot_or_wait, market, SimJob(0.5, None, TICK, nodes=2), np.array([0]),
                   max_ticks=12)
    # one node: never short of an instance; overhead one tick, three ticks of work
    assert (one.preemptions[0], one.migrations[0]) == (0, 0)
    assert one.finish_h[0] == pytest.approx(4 * TICK)
    assert one.cost_usd[0] == pytest.approx(4 * TICK * 1.0)
    # two nodes: reclaimed at tick 3 (count 1) with 2/6 h done, back at 5: overhead, then done
    assert (two.preemptions[0], two.migrations[0]) == (1, 1)
    assert two.finish_h[0] == pytest.approx(7 * TICK)
    assert two.spot_h[0] == pytest.approx(5 * TICK)          # hours per node
    assert two.cost_usd[0] == pytest.approx(2 * 5 * TICK * 1.0)


def test_on_demand_always_has_room_and_bills_every_node(sim_market):
    market = sim_market({"a": [1] * 12}, on_demand_usd=3.0)
    r = simulate(baselines.on_demand, market, SimJob(0.5, None, TICK, nodes=4), np.array([0]),
                 max_ticks=12)
    assert r.preemptions[0] == 0
    assert r.cost_usd[0] == pytest.approx(4 * 3.0 * 4 * TICK)


def test_policy_waits_out_a_dip_or_takes_on_demand_for_the_gang(sim_market):
    market = sim_market({"a": COUNTS})
    r = simulate(decide, market, SimJob(0.5, 3.0, TICK, nodes=2), np.array([0]), max_ticks=12)
    assert r.met_deadline[0]
    # the policy never chose an offer short of room (the simulator raises on that)
    r = simulate(decide, market, SimJob(0.5, None, TICK, nodes=2), np.array([3]), max_ticks=9)
    assert r.finished[0]


def test_nodes_out_of_range_are_refused():
    with pytest.raises(SimulationError, match="nodes"):
        SimJob(1.0, nodes=0)
    with pytest.raises(SimulationError, match="nodes"):
        SimJob(1.0, nodes=65)
