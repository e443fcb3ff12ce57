"""Step for a job with a live instance: record the held offer's price series (what the bill
integrates, :meth:`~scheduler.models.Placement.cost_usd`) and hold the job to its
``max_price_usd_per_hour`` while it runs.

Source of the prices: the offer poller. Each poll replaces the latest offers and appends its
price observations to price history, in the provider's history source (a replayed market's
own; :func:`scheduler.poller.offers.history_source`): AWS and Alibaba stamp a spot price with
the time it took effect, a replayed market with the wall time its clock reached the step. Each pass compares
the held offer's price in the latest offers with the placement's latest recorded price; when
they differ, or at most every :data:`~scheduler.timing.PRICE_CATCH_UP_S` anyway (a price that
moved and came back within one poll), the changes history holds since the latest recorded one
are appended to the placement, with their own times. An offer whose changes never reach
history (a source that records none) is recorded at the price of the latest offers from the
pass that first saw it, once a second pass still sees it.

When the held price is above the job's ``max_price_usd_per_hour``, the same write saves a stop
request of kind ``max-price`` and an event of that kind naming the price and the limit: the
agent checkpoints, the placement ends ``moved`` (:mod:`scheduler.controller.observing`) and the
placing step puts the job on a compliant offer, or leaves it ``pending`` with a reason naming
the price and the limit until one appears (placement never chooses an offer above the max).

Idempotent: a change already recorded is not appended again (changes arrive in order and only
a different price is a change), and a stop request is made once per attempt. The in-process
memories (catch-up throttle, mismatches seen once) only delay a record when lost.
"""

from __future__ import annotations

from datetime import datetime

from scheduler.controller.context import Context
from scheduler.controller.policy_inputs import MarketSnapshot, snapshot
from scheduler.controller.throttle import Throttle
from scheduler.models import Job, JobState, Offer, Placement, PlacementEnd, StopKind, StopRequest
from scheduler.poller.offers import history_source
from scheduler.store.history_sources import REAL
from scheduler.timing import PRICE_CATCH_UP_S

_catch_ups = Throttle()
# (job id, attempt) → (price, wall time) of a latest-offers price history did not hold yet.
_unmatched: dict[tuple[str, int], tuple[float, datetime]] = {}
_UNMATCHED_MAX = 100_000

# The latest offers by series, per snapshot (a pass shares one snapshot).
_index: list[tuple[MarketSnapshot, dict[str, Offer]]] = []


def listed_offer(snap: MarketSnapshot, placement: Placement) -> Offer | None:
    """The held offer as the latest poll lists it, or ``None`` when it is not listed."""
    if not _index or _index[0][0] is not snap:
        _index[:] = [(snap, {o.key.series(): o for o in snap.offers})]
    return _index[0][1].get(placement.offer.key.series())


def _source(ctx: Context, placement: Placement) -> str:
    """The history source the poller writes the held offer's prices to (a replayed market's
    own, else real)."""
    try:
        return history_source(ctx.providers.get(placement.offer.provider))
    except KeyError:
        return REAL


def catch_up(ctx: Context, placement: Placement, until: datetime) -> bool:
    """Append to ``placement`` the held offer's price changes price history holds after its
    latest recorded price, up to ``until`` (aware UTC). One Redis read. ``True`` when any."""
    changed = False
    for obs in ctx.store.offers.price_history(placement.offer.key.series(),
                                              placement.priced_until(), until,
                                              _source(ctx, placement)):
        changed |= placement.add_price_change(obs.observed_at, obs.price_usd_per_hour)
    return changed


def usd(price: float) -> str:
    """``$1.30``, ``$0.158``: at least two decimals, at most four."""
    text = f"{price:.4f}".rstrip("0")
    return "$" + (text + "0" * (2 - len(text.split(".")[1])))


def over_max(job: Job, price_usd_per_hour: float) -> str | None:
    """Why ``price_usd_per_hour`` of the held offer breaks the job's limit, or ``None``."""
    limit = job.spec.max_price_usd_per_hour
    placement = job.placement or (job.placements[-1] if job.placements else None)
    if limit is None or placement is None or price_usd_per_hour <= limit:
        return None
    return (f"held offer's {placement.offer.market.value} price {usd(price_usd_per_hour)}/h is "
            f"above max_price_usd_per_hour {usd(limit)}/h")


def left_over_max(ctx: Context, job: Job) -> str | None:
    """For a job waiting to be placed after it left an offer priced above its max: why, with
    the offer's price now (the latest offers', else its last recorded one); else ``None``."""
    if job.placement is not None or not job.placements or job.spec.max_price_usd_per_hour is None:
        return None
    last = job.placements[-1]
    if last.end_reason is not PlacementEnd.MOVED:
        return None
    listed = listed_offer(snapshot(ctx), last)
    return over_max(job, listed.price_usd_per_hour if listed else last.price_usd_per_hour())


def _record_prices(ctx: Context, job: Job, placement: Placement) -> bool:
    snap = snapshot(ctx)
    now = ctx.clock()
    listed = listed_offer(snap, placement)
    key = (job.id, placement.attempt)
    differs = listed is not None and listed.price_usd_per_hour != placement.price_usd_per_hour()
    periodic = _catch_ups.due(key, now.timestamp(), max(snap.poll_s, PRICE_CATCH_UP_S))
    if not differs and not periodic:
        _unmatched.pop(key, None)
        return False
    changed = catch_up(ctx, placement, now)
    if not differs or listed is None or listed.price_usd_per_hour == placement.price_usd_per_hour():
        _unmatched.pop(key, None)
        return changed
    # The latest offers have a price history does not: a poll between its two writes, or a
    # source without history. Taken as from the pass that first saw it, if it is still there.
    seen = _unmatched.get(key)
    if seen is None or seen[0] != listed.price_usd_per_hour:
        if len(_unmatched) >= _UNMATCHED_MAX:
            _unmatched.clear()
        _unmatched[key] = (listed.price_usd_per_hour, now)
        return changed
    del _unmatched[key]
    return placement.add_price_change(seen[1], listed.price_usd_per_hour) or changed


def hold_price(ctx: Context, job: Job) -> Job | None:
    """Record the held offer's new prices and, above the job's max, ask the agent to
    checkpoint so the job can leave; the saved job, or ``None`` when nothing changed."""
    placement = job.placement
    if placement is None or placement.instance_id is None or placement.started_at is None \
            or placement.ended_at is not None:
        return None
    changed = _record_prices(ctx, job, placement)
    why = over_max(job, placement.price_usd_per_hour())
    if why is not None and job.state is JobState.RUNNING and job.stop_request is None \
            and not job.cancel_requested:
        job.stop_request = StopRequest(kind=StopKind.MAX_PRICE, reason=why[:500],
                                       attempt=placement.attempt)
        job.record(JobState.CHECKPOINTING, f"{why}; agent checkpointing, then the job moves "
                   "to a compliant offer or waits for one", offer=placement.offer,
                   at=ctx.clock(), kind="max-price", price_usd_per_hour=placement.price_usd_per_hour())
        changed = True
    return ctx.store.jobs.save(job) if changed else None
