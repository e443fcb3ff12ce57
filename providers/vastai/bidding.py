"""The bid of an interruptible (spot) launch on Vast.ai. Pure: no I/O.

Vast rents an instance interruptible only when the create call carries a ``price`` (the bid,
USD/hour per machine); without one it silently rents on-demand at ``dph_total`` (vast-cli
SKILL.md, "Interruptible (spot) rentals"). So a spot launch always gets a bid from here, or
is refused.
"""

from __future__ import annotations

from providers.vastai.settings import (
    MAX_BID_USD_PER_HOUR,
    MIN_BID_USD_PER_HOUR,
    BidPolicy,
)

# Bids are sent with this many decimals (Vast shows prices to 1/10,000 of a dollar).
BID_DECIMALS = 4


def bid_usd_per_hour(min_bid: float | None, on_demand: float, policy: BidPolicy,
                     job_max: float | None) -> float:
    """The bid, USD/hour: ``min_bid`` plus the policy's margins, lowered to the smallest cap
    of ``policy.max_bid_usd_per_hour``, ``on_demand`` (the same machine's ``dph_total``),
    ``job_max`` (the job's ``max_price_usd_per_hour``) and Vast's 128; never below
    ``min_bid`` (a lower bid is outbid at once), never below Vast's 0.001.

    Raises ``ValueError`` saying which cap is below the minimum bid, or that the ask has no
    minimum bid (``min_bid`` None: Vast does not rent it interruptible).
    """
    if min_bid is None:
        raise ValueError("the ask has no min_bid: Vast does not rent it interruptible")
    caps = [("Vast's maximum bid", MAX_BID_USD_PER_HOUR), ("the on-demand price", on_demand)]
    if policy.max_bid_usd_per_hour is not None:
        caps.append(("bid.max_bid_usd_per_hour", policy.max_bid_usd_per_hour))
    if job_max is not None:
        caps.append(("the job's max_price_usd_per_hour", job_max))
    cap_name, cap = min(caps, key=lambda item: item[1])
    floor = max(min_bid, MIN_BID_USD_PER_HOUR)
    if cap < floor:
        raise ValueError(f"the minimum bid {floor:.4f} USD/h is above {cap_name} "
                         f"({cap:.4f} USD/h): no winning bid fits")
    bid = min(min_bid * (1.0 + policy.margin_fraction) + policy.margin_usd_per_hour, cap)
    rounded = round(bid, BID_DECIMALS)
    # Rounding must cross neither bound; the exact figure is sent when it would.
    return max(rounded if floor <= rounded <= cap else bid, floor)
