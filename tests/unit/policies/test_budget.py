import itertools

import numpy as np
import pytest

from policies.budget import budget_level, crossed, must_stop, thresholds_reached
from policies.decisions import decide
from policies.views import NO_OFFER, JobView, Reason
from tests.unit.policies.views_builder import OD, SPOT, market, offers


def test_levels():
    spent = np.array([0.0, 79.99, 80.0, 89.9, 90.0, 99.99, 100.0, 250.0])
    assert list(budget_level(spent, np.full(8, 100.0))) == [0, 0, .8, .8, .9, .9, 1.0, 1.0]
    assert budget_level(np.array([1e9]), np.array([np.inf]))[0] == 0
    assert budget_level(np.array([0.0]), np.array([0.0]))[0] == 1.0     # a zero budget is spent
    with pytest.raises(ValueError):
        budget_level(np.array([1.0]), np.array([-5.0]))


def test_alerts_at_each_threshold_once():
    limit = np.array([100.0])
    readings = [0.0, 50.0, 79.0, 81.0, 85.0, 91.0, 99.0, 100.0, 120.0]
    alerts = [a for prev, now in itertools.pairwise(readings)
              for a in crossed(np.array([prev]), np.array([now]), limit)]
    assert [a.threshold for a in alerts] == [0.8, 0.9, 1.0]
    assert [a.spent_usd for a in alerts] == [81.0, 91.0, 100.0]
    assert "checkpointing and stopping" in alerts[-1].message()
    jump = crossed(np.array([10.0]), np.array([100.0]), limit, scope="user")
    assert [(a.scope, a.threshold) for a in jump] == [("user", .8), ("user", .9), ("user", 1.0)]


def test_at_100_percent_the_job_checkpoints_and_stops():
    models = offers(("a", SPOT, 1.0), ("a", OD, 3.0))
    job_full = JobView.build(2, current=[0, NO_OFFER], spent_usd=100.0, budget_usd=100.0)
    d = decide(job_full, market(models, n=2))
    assert list(d.offer) == [NO_OFFER, NO_OFFER]
    assert list(d.reason) == [Reason.BUDGET_STOP] * 2
    user_full = JobView.build(1, current=0, user_spent_usd=500.0, user_budget_usd=500.0)
    assert decide(user_full, market(models)).reason[0] == Reason.BUDGET_STOP
    at_90 = JobView.build(1, current=0, spent_usd=95.0, budget_usd=100.0)
    assert decide(at_90, market(models)).reason[0] == Reason.CONTINUE
    assert must_stop(np.array([1.0]), np.array([1.0]), np.array([0.0]), np.array([np.inf]))[0]


def test_thresholds_reached_lists_every_level_up_to_the_spend():
    assert [a.threshold for a in thresholds_reached("job", 9.5, 10.0)] == [0.8, 0.9]
    assert [(a.scope, a.threshold, a.spent_usd, a.limit_usd)
            for a in thresholds_reached("user", 12.0, 10.0)] == [
        ("user", 0.8, 12.0, 10.0), ("user", 0.9, 12.0, 10.0), ("user", 1.0, 12.0, 10.0)]
    assert thresholds_reached("job", 7.9, 10.0) == []
    assert thresholds_reached("job", 1e9, float("inf")) == []
