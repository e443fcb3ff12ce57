import numpy as np
import pytest

from policies.decisions import PolicyConfig, decide_placement
from policies.views import NO_OFFER, JobView
from policies.zones import zone_correlation
from tests.unit.policies.views_builder import OD, SPOT, market, offers


def test_zone_correlation_by_hand():
    corr = zone_correlation(np.array([[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 1, 1], [1, 1, 1, 1]]))
    assert corr[0, 1] == pytest.approx(1.0)
    assert corr[0, 2] == pytest.approx(-1.0)
    assert corr[0, 3] == 0.0 and corr[3, 3] == 1.0       # a zone that never changed: no info


def reclaimed_in(zone: int, since_h: float = 0.1) -> JobView:
    return JobView.build(1, last_preempted_zone=zone, since_preemption_h=since_h)


def test_never_the_same_zone_right_after_a_reclaim():
    models = offers(("a", SPOT, 0.9), ("b", SPOT, 1.0), ("a", OD, 3.0))
    zone_a = 0
    assert decide_placement(JobView.build(1), market(models)).offer[0] == 0
    assert decide_placement(reclaimed_in(zone_a), market(models)).offer[0] == 1
    assert decide_placement(reclaimed_in(zone_a, since_h=2.0), market(models)).offer[0] == 0


def test_same_zone_allowed_without_alternative_unless_strict():
    models = offers(("a", SPOT, 0.9), ("b", SPOT, 1.0), ("a", OD, 3.0))
    only_a = market(models, available=[True, False, True])
    assert decide_placement(reclaimed_in(0), only_a).offer[0] == 0
    strict = decide_placement(reclaimed_in(0), only_a, PolicyConfig(same_zone_strict=True))
    assert strict.offer[0] == 2                          # no deadline: on-demand, not zone a


def test_prefer_the_zone_uncorrelated_with_the_lost_one():
    # lost zone a; b moves with a (rho .9), c does not. Both reclaim hourly (λ = 1/h), loss .2 h:
    # b: λ·(1 + .9) → 1/(1 - .38) × $1.00 = $1.613;  c: 1/(1 - .2) × $1.05 = $1.3125
    models = offers(("a", SPOT, 0.8), ("b", SPOT, 1.0), ("c", SPOT, 1.05))
    corr = np.array([[1.0, 0.9, 0.0], [0.9, 1.0, 0.0], [0.0, 0.0, 1.0]])
    mk = market(models, available=[False, True, True], mean_up_h=1.0, corr=corr)
    jobs = JobView.build(1, restart_overhead_h=0.2, last_preempted_zone=0, since_preemption_h=0.1)
    assert decide_placement(jobs, mk).offer[0] == 2
    no_corr = market(models, available=[False, True, True], mean_up_h=1.0)
    assert decide_placement(jobs, no_corr).offer[0] == 1
    later = JobView.build(1, restart_overhead_h=0.2, last_preempted_zone=0, since_preemption_h=12)
    assert decide_placement(later, mk).offer[0] == 1
    assert NO_OFFER == -1
