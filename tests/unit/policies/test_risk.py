import numpy as np
import pytest

from policies.decisions import decide_placement
from policies.risk import effective_price, expected_cost_to_finish, inflation
from policies.views import JobView, Reason
from tests.unit.policies.views_builder import SPOT, market, offers


def _finish(jobs, mk):
    return expected_cost_to_finish(jobs, mk.price_usd_per_hour, effective_price(jobs, mk))


def test_inflation_by_hand():
    assert inflation(np.array(0.0), np.array(0.2)) == 1.0
    assert inflation(np.array(2.5), np.array(0.2)) == pytest.approx(2.0)   # λ·loss = 0.5
    assert np.isinf(inflation(np.array(5.0), np.array(0.2)))               # λ·loss = 1


def test_riskier_cheaper_spot_loses_to_safer_one():
    # a: $1.00, reclaimed every 0.5 h → λ = 2/h; loss 0.2 h → 1/(1 - 0.4) → $1.667 per useful h
    # b: $1.20, every 10 h → λ = 0.1/h → 1/(1 - 0.02) → $1.2245 per useful h
    models = offers(("a", SPOT, 1.0), ("b", SPOT, 1.2))
    mk = market(models, mean_up_h=[0.5, 10.0])
    jobs = JobView.build(1, restart_overhead_h=0.2, remaining_compute_h=10.0)
    assert effective_price(jobs, mk)[0] == pytest.approx([1 / 0.6, 1.2 / 0.98])
    # to finish 10 h: a 16.67 + 0.2 launch, b 12.24 + 0.24 launch
    assert _finish(jobs, mk)[0] == pytest.approx([10 / 0.6 + 0.2, 12 / 0.98 + 0.24])
    decision = decide_placement(jobs, mk)
    assert decision.offer[0] == 1 and decision.reason[0] == Reason.SPOT
    assert min(models, key=lambda o: o.price_usd_per_hour).zone == "a"  # price alone: the risky one


def test_rework_since_checkpoint_raises_the_effective_price():
    models = offers(("a", SPOT, 1.0))
    mk = market(models, mean_up_h=2.0)                     # λ = 0.5/h
    continuous = JobView.build(1, restart_overhead_h=0.2)
    hourly = JobView.build(1, restart_overhead_h=0.2, checkpoint_interval_h=1.0)
    assert effective_price(continuous, mk)[0, 0] == pytest.approx(1 / (1 - 0.5 * 0.2))
    assert effective_price(hourly, mk)[0, 0] == pytest.approx(1 / (1 - 0.5 * 0.7))


def test_current_offer_pays_no_new_launch():
    models = offers(("a", SPOT, 1.0), ("b", SPOT, 1.0))
    mk = market(models, mean_up_h=1e12)
    jobs = JobView.build(1, restart_overhead_h=0.5, remaining_compute_h=2.0, current=0)
    assert _finish(jobs, mk)[0] == pytest.approx([2.0, 2.5])
