"""The bid policy (providers/vastai/bidding.py): minimum bid plus margin, lowered to the caps,
refused when a cap is below the minimum bid."""

from __future__ import annotations

import pytest

from providers.vastai.bidding import bid_usd_per_hour
from providers.vastai.settings import BidPolicy


def test_the_bid_is_the_minimum_plus_the_margins() -> None:
    assert bid_usd_per_hour(0.2, 0.5, BidPolicy(), None) == pytest.approx(0.22)
    policy = BidPolicy(margin_fraction=0.0, margin_usd_per_hour=0.03)
    assert bid_usd_per_hour(0.2, 0.5, policy, None) == pytest.approx(0.23)


@pytest.mark.parametrize(("policy", "on_demand", "job_max", "bid"), [
    (BidPolicy(max_bid_usd_per_hour=0.21), 0.5, None, 0.21),  # the user's cap
    (BidPolicy(), 0.205, None, 0.205),                         # never above on-demand
    (BidPolicy(), 0.5, 0.2123, 0.2123),                        # never above the job's max
    (BidPolicy(margin_fraction=1.0), 0.5, 0.3, 0.3),
])
def test_caps_lower_the_bid(policy: BidPolicy, on_demand: float, job_max: float | None,
                            bid: float) -> None:
    got = bid_usd_per_hour(0.2, on_demand, policy, job_max)
    assert got == pytest.approx(bid) and 0.2 <= got


@pytest.mark.parametrize(("policy", "job_max", "named"), [
    (BidPolicy(), 0.19, "job's max_price_usd_per_hour"),
    (BidPolicy(max_bid_usd_per_hour=0.1), None, "bid.max_bid_usd_per_hour"),
])
def test_a_cap_below_the_minimum_bid_is_refused(policy: BidPolicy, job_max: float | None,
                                                named: str) -> None:
    with pytest.raises(ValueError, match=named):
        bid_usd_per_hour(0.2, 0.5, policy, job_max)


def test_no_minimum_bid_means_no_interruptible_rental() -> None:
    with pytest.raises(ValueError, match="min_bid"):
        bid_usd_per_hour(None, 0.5, BidPolicy(), None)


def test_rounding_never_crosses_a_bound() -> None:
    bid = bid_usd_per_hour(0.123456, 0.5, BidPolicy(margin_fraction=0.0), None)
    assert bid >= 0.123456  # 0.1235 rounds up, still above the minimum
    capped = bid_usd_per_hour(0.12341, 0.5, BidPolicy(), 0.12344)
    assert 0.12341 <= capped <= 0.12344
    assert bid_usd_per_hour(0.0001, 0.5, BidPolicy(), None) == 0.001  # Vast's smallest bid
