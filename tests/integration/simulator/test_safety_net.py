"""Our policy never misses a deadline that was feasible at submission (r >= c + d), whatever
the market does: random Markov traces, one and two zones, tight and loose deadlines, decision
intervals shorter and longer than the restart overhead, periodic checkpoints."""

import functools

import numpy as np
import pytest

from policies.decisions import PolicyConfig, decide
from scheduler.simulator.simulate import SimJob, simulate
from tests.integration.simulator.conftest import markov_trace

CASES = [  # (zones, compute h, deadline h, overhead h, checkpoint interval h, gap s)
    (1, 6.0, 6.25, 0.2, 0.0, 600),      # slack barely above one overhead
    (1, 6.0, 9.0, 0.2, 0.0, 600),
    (2, 6.0, 6.5, 0.05, 0.0, 600),      # overhead shorter than a tick
    (2, 6.0, 8.0, 0.5, 0.5, 600),       # hourly-ish checkpoints: reclaims lose progress
    (1, 4.0, 5.0, 0.3, 0.0, 1800),      # decision interval (0.5 h) longer than the overhead
]


@pytest.mark.parametrize("zones,compute,dl,overhead,tau,gap", CASES)
def test_zero_misses(sim_market, zones, compute, dl, overhead, tau, gap):
    rng = np.random.default_rng(int(compute * 100 + dl * 10 + zones))
    n = 300
    traces = {z: markov_trace(rng, n, 0.8, 0.75) for z in "ab"[:zones]}
    market = sim_market(traces, gap_s=gap)
    ticks = int(np.ceil(dl / market.tick_h)) + 1
    starts = rng.integers(0, n - ticks, 150)
    job = SimJob(compute, dl, overhead, checkpoint_interval_h=tau)
    for cfg in (PolicyConfig(), PolicyConfig(reserve_factor=0.0)):
        r = simulate(functools.partial(decide, cfg=cfg), market, job, starts, max_ticks=ticks)
        assert r.met_deadline.all(), (cfg, np.flatnonzero(~r.met_deadline))
