import dataclasses
import itertools

import numpy as np
import pytest

from policies.views import NO_OFFER, Decision, Reason
from scheduler.simulator.simulate import SimJob, simulate
from scheduler.simulator.market import SimulationError
from scheduler.simulator.optimum import optimal_cost
from scheduler.simulator.runner import compare, policy_registry, summary_row
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


def test_deadlines_round_down_to_the_tick_grid(sim_market):
    market = sim_market({"a": TRACE})
    # 8.9 ticks is 8 ticks for the optimum (the finish must be by the last whole tick)
    costs = optimal_cost(market, 0.5, TICK, np.array([0]), [8.9 * TICK, 8 * TICK, 10 * TICK])
    assert costs[0] == pytest.approx([5 / 6, 5 / 6, 4 / 6])
    with pytest.raises(SimulationError, match="shorter than one tick"):
        optimal_cost(market, 0.5, TICK, np.array([0]), [0.5 * TICK])


def test_compare_rounds_the_deadline_and_says_so(sim_market):
    market = sim_market({"a": TRACE}, ticks=12)
    job = SimJob(0.5, 8.9 * TICK, TICK)
    comp = compare(market, job, np.array([0]), ["greedy"], 12)
    assert comp.optimum_usd == pytest.approx([5 / 6])
    assert comp.results["greedy"].deadline_h == pytest.approx([8 * TICK])
    assert any("rounded down" in note for note in comp.notes), comp.notes


def test_no_deadline_optimum_within_the_simulated_ticks(sim_market):
    market = sim_market({"a": TRACE}, ticks=12)
    comp = compare(market, SimJob(0.5, None, TICK), np.array([0]), ["greedy"], 12)
    assert comp.optimum_usd == pytest.approx([4 / 6])
    assert any("no deadline" in note for note in comp.notes), comp.notes


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



def test_gap_counts_only_runs_that_met_the_deadline(sim_market):
    # spot comes back only after the deadline: SkyPilot (no deadline) waits and misses, its
    # cost covers a few spot ticks only; that is not "below the optimum"
    market = sim_market({"a": [1] * 3 + [0] * 60 + [1] * 40})
    comp = compare(market, SimJob(1.0, 2.0, 0.1), np.array([0]), ["skypilot-failover"], 100)
    assert not comp.results["skypilot-failover"].met_deadline[0]
    assert comp.results["skypilot-failover"].cost_usd[0] < comp.optimum_usd[0]
    assert np.isnan(summary_row("skypilot-failover", comp)["gap_to_optimum"])
    assert summary_row("on-demand", comp)["gap_to_optimum"] >= 0


def test_many_starts_and_deadlines_in_one_call(sim_market):
    rng = np.random.default_rng(3)
    market = sim_market({"a": markov_trace(rng, 600, 0.9, 0.7), "b": markov_trace(rng, 600, 0.8, 0.8)},
                        gap_s=195)
    starts = rng.integers(0, 300, 70)          # more than one chunk of runs
    deadlines = [2.0, 3.5, 5.0]
    together = optimal_cost(market, 1.7, 0.3, starts, deadlines)
    for i, d in enumerate(deadlines):
        for j in (0, 33, 69):
            alone = optimal_cost(market, 1.7, 0.3, starts[j:j + 1], [d])[0, 0]
            assert together[j, i] == pytest.approx(alone)
    assert np.all(np.diff(together, axis=1) <= 1e-12)   # a later deadline never costs more


def test_too_large_a_dp_is_refused_with_its_size(sim_market, monkeypatch):
    import scheduler.simulator.optimum as optimum
    monkeypatch.setattr(optimum, "MAX_CELLS", 10)
    with pytest.raises(SimulationError, match="too large .* cell updates"):
        optimal_cost(sim_market({"a": TRACE}), 0.5, TICK, np.array([0]), [10 * TICK])


def _replay(choices: np.ndarray, tick_h: float):
    """A policy that plays ``choices[run, tick]`` (an offer, or NO_OFFER); an unavailable
    choice means no instance this tick."""
    def policy(jobs, market):
        i = int(round(float(jobs.elapsed_h[0]) / tick_h))
        want = choices[:, i]
        ok = (want != NO_OFFER) & market.available[np.arange(len(want)), np.maximum(want, 0)]
        offer = np.where(ok, want, NO_OFFER)
        return Decision(offer, np.full(len(offer), int(Reason.SPOT)))
    return policy


def _brute_force(market, job: SimJob, start: int, ticks: int) -> float:
    """Least cost over every decision sequence (idle or one offer per tick), each run through
    the simulator itself; ``inf`` when none meets the deadline."""
    m = market.available.shape[1]
    choices = np.array(list(itertools.product(range(-1, m), repeat=ticks)))
    choices[choices == -1] = NO_OFFER
    result = simulate(_replay(choices, market.tick_h), market, job,
                      np.full(len(choices), start), max_ticks=ticks)
    ok = result.met_deadline
    return float(result.cost_usd[ok].min()) if ok.any() else np.inf


@pytest.mark.parametrize("case", range(80))
def test_optimum_equals_brute_force_on_tiny_markets(sim_market, case):
    rng = np.random.default_rng(1000 + case)
    gap_s = int(rng.choice([600, 195, 360]))
    zones = int(rng.integers(1, 3))
    n = 14
    traces = {f"z{z}": [1] * n for z in range(zones)}
    market = sim_market(traces, ticks=n, gap_s=gap_s)
    spot = market.table.is_spot
    avail = market.available.copy()
    avail[:, spot] = rng.random((n, int(spot.sum()))) < rng.uniform(0.3, 0.9)
    price = market.price.copy()
    price[:, spot] = rng.uniform(0.2, 2.5, (n, int(spot.sum())))
    market = dataclasses.replace(market, available=avail, price=price)
    ticks = int(rng.integers(2, 9 if zones == 1 else 7))
    compute_s = int(rng.integers(1, ticks * gap_s) if case % 2 else rng.integers(ticks * gap_s // 3, ticks * gap_s))
    overhead_s = int(rng.choice([0, rng.integers(1, gap_s), rng.integers(gap_s, 2 * gap_s + 1)]))
    start = int(rng.integers(0, n - ticks))
    job = SimJob(compute_s / 3600, ticks * gap_s / 3600, overhead_s / 3600)
    expected = _brute_force(market, job, start, ticks)
    got = optimal_cost(market, job.compute_h, job.restart_overhead_h, np.array([start]),
                       [job.deadline_h])[0, 0]
    assert got == pytest.approx(expected, rel=1e-9, abs=1e-12), \
        (gap_s, zones, ticks, compute_s, overhead_s, start)
