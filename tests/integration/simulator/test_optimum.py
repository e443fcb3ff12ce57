import numpy as np
import pytest

from scheduler.simulator.engine import SimJob
from scheduler.simulator.market import SimulationError
from scheduler.simulator.optimum import optimal_cost
from scheduler.simulator.runner import compare, policy_registry
from tests.integration.simulator.conftest import markov_trace

TICK = 1 / 6
TRACE = [1, 1, 1, 0, 0, 0, 1, 1, 1, 1, 1, 1]


def test_optimum_by_hand(sim_market):
    market = sim_market({"a": TRACE})
    # 0.5 h of compute, 1 tick of overhead, spot $1/h, on-demand $3/h:
    # - by 10 ticks: idle until tick 6, then one spot run (overhead + 3 ticks) = 4 ticks, $0.667
    # - by 8 ticks: spot 0-2 (2/6 h done), spot again 6-7 (overhead + 1/6 h) = 5 ticks, $0.833
    # - by 4 ticks: spot 0-2, then on-demand at tick 3 (overhead, then 1/6 h): $0.5 + $1.0
    costs = optimal_cost(market, 0.5, TICK, np.array([0]), [10 * TICK, 8 * TICK, 5 * TICK])
    assert costs[0] == pytest.approx([4 / 6, 5 / 6, 3 / 6 + 3.0 * 2 / 6])
    # by 2 ticks nothing can finish 0.5 h after a 1-tick overhead
    assert np.isinf(optimal_cost(market, 0.5, TICK, np.array([0]), [2 * TICK])[0, 0])


def test_deadline_must_be_whole_ticks(sim_market):
    with pytest.raises(SimulationError, match="whole numbers of ticks"):
        optimal_cost(sim_market({"a": TRACE}), 0.5, TICK, np.array([0]), [1.0001])


def test_no_policy_beats_the_optimum(sim_market):
    rng = np.random.default_rng(11)
    traces = {"a": markov_trace(rng, 400, 0.9, 0.8), "b": markov_trace(rng, 400, 0.85, 0.85)}
    market = sim_market(traces)
    starts = rng.integers(0, 400 - 90, 24)
    job = SimJob(8.0, 12.0, 0.25)
    comp = compare(market, job, starts, list(policy_registry()), 90)
    for name, result in comp.results.items():
        ok = result.met_deadline
        assert np.all(result.cost_usd[ok] >= comp.optimum_usd[ok] - 1e-9), name
