"""The rule the anchors rank by: the cheapest price per hour that fits.

SkyPilot's optimizer and dstack's offer list both sort the offers that meet the job's
resources by $/h and launch the first; a managed job that is reclaimed relaunches the same way.
Neither knows how fast the job runs on each GPU model, so both treat an hour on a T4 like an
hour on an A100. Two policies over the data of :func:`policies.decisions.decide`:

- :func:`cheapest_per_hour`: the cheapest available offer (spot or on-demand), kept until it is
  reclaimed; no deadline, no speeds.
- :func:`speed_blind`: any policy told that every offer runs at speed 1 (our policy as it was
  before it knew speeds: risk-aware, deadline-aware, but ranking by $/h).
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from policies.views import NO_OFFER, Decision, JobView, MarketView, Reason
from scheduler.simulator.simulate import Policy


def cheapest_per_hour(jobs: JobView, market: MarketView) -> Decision:
    """Keep the running instance; otherwise launch the cheapest available offer by price now
    (first in table order on ties), spot or on-demand; wait when none is available."""
    n, m = len(jobs), len(market.offers)
    avail = np.broadcast_to(market.available, (n, m))
    price = np.where(avail, np.broadcast_to(market.price_usd_per_hour, (n, m)), np.inf)
    pick = np.full(n, NO_OFFER)
    if m:
        pick = np.where(np.isfinite(price.min(axis=1)), price.argmin(axis=1), NO_OFFER)
    running = jobs.current != NO_OFFER
    offer = np.where(running, jobs.current, pick)
    spot = market.offers.is_spot[np.maximum(offer, 0)] if m else np.zeros(n, bool)
    reason = np.where(running, Reason.CONTINUE,
                      np.where(pick == NO_OFFER, Reason.NOTHING_AVAILABLE,
                               np.where(spot, Reason.SPOT, Reason.ON_DEMAND_CHEAPER)))
    return Decision(offer, reason)


def speed_blind(policy: Policy) -> Policy:
    """``policy`` deciding as if every offer ran at speed 1 (the job's progress still follows
    the offers' real speeds in the simulator)."""
    none = {f.name: f.default_factory() for f in dataclasses.fields(MarketView)
            if f.name == "speed"}   # the view's own "no speeds" value

    @functools.wraps(policy)
    def blind(jobs: JobView, market: MarketView) -> Decision:
        return policy(jobs, dataclasses.replace(market, **none))
    return blind
