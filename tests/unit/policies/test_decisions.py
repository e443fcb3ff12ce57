import numpy as np
import pytest

from policies.decisions import decide, decide_placement
from policies.views import NO_OFFER, JobView, Reason, with_speed
from tests.unit.policies.views_builder import OD, SPOT, market, offers


def test_empty_market():
    decision = decide_placement(JobView.build(2), market([], n=2))
    assert list(decision.offer) == [NO_OFFER, NO_OFFER]
    assert list(decision.reason) == [Reason.NOTHING_AVAILABLE] * 2
    running = decide(JobView.build(1, current=3), market([]))
    assert running.offer[0] == 3 and running.reason[0] == Reason.CONTINUE


def test_nothing_available():
    models = offers(("a", SPOT, 1.0))
    decision = decide_placement(JobView.build(1), market(models, available=[False]))
    assert decision.offer[0] == NO_OFFER and decision.reason[0] == Reason.NOTHING_AVAILABLE


def test_ties_break_on_demand_first_then_risk_then_key():
    # no hazard at all: spot $1.0 and on-demand $1.0 cost the same → on-demand
    models = offers(("a", SPOT, 1.0), ("b", OD, 1.0))
    assert decide_placement(JobView.build(1), market(models, mean_up_h=np.inf)).offer[0] == 1
    # two identical spot offers → the series key decides (zone a before zone b)
    models = offers(("b", SPOT, 1.0), ("a", SPOT, 1.0))
    assert decide_placement(JobView.build(1), market(models)).offer[0] == 1


def test_without_deadline_the_cheapest_effective_offer_now():
    models = offers(("a", SPOT, 1.0), ("a", OD, 3.0))
    up = decide_placement(JobView.build(1), market(models))
    assert up.offer[0] == 0 and up.reason[0] == Reason.SPOT
    down = decide_placement(JobView.build(1), market(models, available=[False, True]))
    assert down.offer[0] == 1 and down.reason[0] == Reason.ON_DEMAND_CHEAPER


def test_batch_equals_one_by_one():
    models = offers(("a", SPOT, 1.0), ("b", SPOT, 1.1), ("a", OD, 3.0))
    fields = {"compute_h": 10.0, "remaining_compute_h": [10, 10, 10, 5, 10],
                  "time_to_deadline_h": [40, 16, 10.7, np.inf, 10.4], "restart_overhead_h": 0.5,
                  "decision_interval_h": 0.25, "current": [-1, -1, -1, 0, 2],
                  "since_start_h": [np.inf, np.inf, np.inf, 3.0, 3.0]}
    mk = market(models, available=[False, True, True], n=5)
    batch = decide(JobView.build(5, **fields), mk)
    for i in range(5):
        one = {k: (v[i] if isinstance(v, list) else v) for k, v in fields.items()}
        single = decide(JobView.build(1, **one), market(models, available=[False, True, True]))
        assert (single.offer[0], single.reason[0]) == (batch.offer[i], batch.reason[i]), i


@pytest.mark.parametrize("bad", [0.0, np.nan, np.inf, -1.0])
def test_an_offer_with_an_unusable_speed_is_never_chosen(bad):
    # Nothing left to do and the deadline now: "finish as early as possible" on on-demand.
    # The unusable offer is the cheapest per hour; it cannot make progress: the other one.
    mk = with_speed(market(offers(("a", OD, 0.10), ("b", OD, 1.50))), [bad, 1.0])
    done = JobView.build(1, compute_h=10.0, remaining_compute_h=0.0, restart_overhead_h=0.2,
                         decision_interval_h=0.25, time_to_deadline_h=0.0)
    assert int(decide(done, mk).offer[0]) == 1
    # Only unusable offers: nothing is chosen (waiting beats an offer that makes no progress).
    only = with_speed(market(offers(("a", OD, 0.10), ("a", SPOT, 0.05))), [bad, bad])
    untimed = JobView.build(1, compute_h=10.0, remaining_compute_h=10.0,
                            restart_overhead_h=0.2, decision_interval_h=0.25)
    assert int(decide(untimed, only).offer[0]) == NO_OFFER
