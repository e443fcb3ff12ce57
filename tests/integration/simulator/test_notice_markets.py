"""A market that reclaims without notice (Vast.ai) beside markets that warn (AWS, Azure): with a
notice long enough for the final checkpoint a reclaim loses no progress, without one (or with
one too short) the progress since the last periodic checkpoint is lost."""

import functools

import numpy as np
import pytest

from policies import baselines
from policies.decisions import decide
from scheduler.simulator.market import SimulationError
from scheduler.simulator.simulate import SimJob, simulate

TICK = 1 / 6
TRACE = [1, 1, 1, 0, 0, 0, 1, 1, 1, 1, 1, 1]      # 1 = available
spot_or_wait = functools.partial(baselines.skypilot, strategy="failover")
# Checkpoints every .25 h; reclaimed at tick 3 with 2/6 h done; back at tick 6 (overhead).
JOB = SimJob(0.5, None, TICK, checkpoint_interval_h=0.25, final_checkpoint_s=8.0)


@pytest.mark.parametrize("notice, finish_h", [
    # no notice: back to the .25 h checkpoint, 1/6 h at tick 7, the last .083 h in tick 8
    ("{style: none}", 8 * TICK + (0.5 - 0.25 - TICK)),
    # a notice: the final checkpoint keeps 2/6 h; tick 7 finishes the job
    ("{style: azure, seconds: 30}", 8 * TICK),
    ("{style: aws}", 8 * TICK),                    # the market's default 120 s
    # a notice shorter than the 8 s the final checkpoint takes is as good as none
    ("{style: gcp, seconds: 5}", 8 * TICK + (0.5 - 0.25 - TICK)),
])
def test_reclaim_by_hand(sim_market, notice: str, finish_h: float) -> None:
    market = sim_market({"a": TRACE}, notices={"a": notice})
    r = simulate(spot_or_wait, market, JOB, np.array([0]), max_ticks=12)
    assert r.preemptions[0] == 1
    assert r.finish_h[0] == pytest.approx(finish_h)


def test_periodic_checkpoints_after_a_final_one_do_not_lose_it(sim_market) -> None:
    # Reclaimed twice: at 2/6 h done (final checkpoint 0.333), then again with 0.5 h done;
    # the periodic grid (.25, .5, ...) must not drag the saved progress back below 0.333.
    trace = [1, 1, 1, 0, 1, 1, 0, 1, 1, 1, 1, 1, 1]
    market = sim_market({"a": trace}, notices={"a": "{style: azure, seconds: 30}"})
    job = SimJob(1.0, None, TICK, checkpoint_interval_h=0.25, final_checkpoint_s=8.0)
    r = simulate(spot_or_wait, market, job, np.array([0]), max_ticks=13)
    # ticks 0 overhead, 1-2 work (2/6), reclaim at 3; 4 overhead, 5 work (3/6), reclaim at 6;
    # 7 overhead, 8-10 work (6/6): done at the end of tick 10
    assert r.preemptions[0] == 2
    assert r.finish_h[0] == pytest.approx(11 * TICK)


def test_the_policy_prefers_the_warning_market_at_equal_price(sim_market) -> None:
    # the unwarned zone sorts first, so the static tie-break alone would pick it
    traces = {"a-vast": TRACE, "b-azure": TRACE}
    notices = {"a-vast": "{style: none}", "b-azure": "{style: azure, seconds: 30}"}
    mixed = sim_market(traces, notices=notices, on_demand_usd=None)
    warned = sim_market({"b-azure": TRACE}, notices={"b-azure": notices["b-azure"]},
                        on_demand_usd=None)
    unwarned = sim_market({"a-vast": TRACE}, notices={"a-vast": notices["a-vast"]},
                          on_demand_usd=None)
    assert mixed.table.interruption_notice_s.tolist() == [0.0, 30.0]
    r_mixed = simulate(decide, mixed, JOB, np.array([0]), max_ticks=12)
    r_warned = simulate(decide, warned, JOB, np.array([0]), max_ticks=12)
    assert r_mixed.finish_h[0] == pytest.approx(r_warned.finish_h[0])
    assert r_mixed.cost_usd[0] == pytest.approx(r_warned.cost_usd[0])
    r_unwarned = simulate(decide, unwarned, JOB, np.array([0]), max_ticks=12)
    assert r_unwarned.finish_h[0] > r_warned.finish_h[0]


def test_final_checkpoint_seconds_must_not_be_negative() -> None:
    with pytest.raises(SimulationError, match="final_checkpoint_s"):
        SimJob(1.0, final_checkpoint_s=-1)
