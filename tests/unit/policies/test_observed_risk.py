import pytest

from policies.observed_risk import blended_risk


def test_no_observations_keep_the_advertised_figure():
    assert blended_risk(0.05, 0, 0.0) == 0.05


def test_many_preemptions_in_little_time_raise_the_risk_and_cap_at_one():
    # one preemption in a month of spot hours against an advertised 5 %/month
    assert blended_risk(0.05, 1, 730.0) == pytest.approx((0.05 + 1) / 2)
    # three in a few hours: more than once a month, capped at 1
    assert blended_risk(0.05, 3, 73.0) == 1.0


def test_long_quiet_exposure_lowers_a_pessimistic_figure():
    # a year of spot hours without a preemption against an advertised 25 %
    assert blended_risk(0.25, 0, 12 * 730.0) == pytest.approx(0.25 / 13)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="advertised"):
        blended_risk(1.5, 0, 0)
    with pytest.raises(ValueError):
        blended_risk(0.1, -1, 0)
