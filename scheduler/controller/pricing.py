"""Step for a job with a live instance: record the held offer's price series (what the bill
integrates, :meth:`~core.models.Placement.cost_usd`) and hold the job to its
``max_price_usd_per_hour`` while it runs.

Source of the prices: the offer poller. Each poll replaces the latest offers and appends its
price observations to price history, in the provider's history source (a replayed market's
own; :func:`scheduler.poller.offers.history_source`): AWS and Alibaba stamp a spot price with
the time it took effect, a replayed market with the wall time its clock reached the step.

Recording: once every :data:`~scheduler.timing.PRICE_CATCH_UP_S` (and at most once per offer
poll) per placement, at a phase of its own (:class:`~scheduler.controller.throttle.Spread`: the
running jobs' reads and writes are spread over the interval), the changes history holds after
the placement's latest recorded price are appended to it, each with its own time, in one job
write; so is the last stretch when the placement ends
(:func:`scheduler.controller.transitions.end_placement`), and again over the next
:data:`SETTLE_POLLS` polls (:func:`settle`: a change that took effect just before the end is
polled after it) while the job is active; a running job's cost so far may miss the last
``PRICE_CATCH_UP_S`` of changes (batching keeps a market whose prices move every second from
writing every running job every pass). A price the latest offers list but history never holds
(a source that records none) is recorded from the pass that first saw it, when a later read
still does not find it.

The limit: when the latest poll's price of the held offer is above the job's
``max_price_usd_per_hour`` (checked every pass, so within one poll of the crossing), history is
read at once and the same write saves a stop request of kind ``max-price`` and an event of that
kind naming the price and the limit. The agent checkpoints, the placement ends ``moved``
(:mod:`scheduler.controller.observing`), and the placing step puts the job on a compliant offer
or leaves it ``pending`` with a reason naming the price and the limit until one appears
(placement never chooses an offer above the max). A job still provisioning is held to it once
its agent runs.

Idempotent: a change already recorded is not appended again (changes arrive in order and only
a different price is a change), and a stop request is made once per attempt. The in-process
memories (catch-up and settle gates, prices seen once without history: ``ctx.state``,
:class:`~scheduler.controller.state.ControllerState`) only delay a record when lost.
"""

from __future__ import annotations

from datetime import datetime

from core.models import (
    Job,
    JobState,
    Offer,
    Placement,
    PlacementEnd,
    StopKind,
    StopRequest,
)
from scheduler.controller.context import Context
from scheduler.controller.policy_inputs import MarketSnapshot, snapshot
from scheduler.controller.state import UNMATCHED_MAX
from scheduler.poller.offers import history_source
from scheduler.store.history_sources import REAL
from scheduler.timing import OFFER_POLL_S, PRICE_CATCH_UP_S, REPLAY_OFFER_POLL_S

# Offer polls after a placement's end during which its bill is completed from price history.
SETTLE_POLLS = 3


def listed_offer(snap: MarketSnapshot, placement: Placement) -> Offer | None:
    """The held offer as the latest poll lists it, or ``None`` when it is not listed."""
    return snap.listed(placement.offer.key.series())


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


def _record_prices(ctx: Context, job: Job, placement: Placement, listed: Offer | None,
                   every_s: float) -> bool:
    """Catch up with price history once every ``every_s`` (at the placement's own phase), at
    once when the latest poll's price is new and above the job's max; ``True`` when a change
    was recorded."""
    now = ctx.clock()
    key = (job.id, placement.attempt)
    listed_price = listed.price_usd_per_hour if listed is not None else None
    new = listed_price is not None and listed_price != placement.price_usd_per_hour()
    urgent = new and over_max(job, listed_price) is not None
    # Spread: 1,000 jobs catch up over the interval, not all in one pass.
    if not urgent and not ctx.state.catch_ups.due(key, now.timestamp(), every_s):
        return False
    changed = catch_up(ctx, placement, now)
    unmatched = ctx.state.unmatched
    if listed_price is None or listed_price == placement.price_usd_per_hour():
        unmatched.pop(key, None)
        return changed
    # The latest offers have a price history does not: a poll between its two writes, or a
    # source without history. Taken as from the pass that first saw it, if a later read
    # still does not find it.
    seen = unmatched.get(key)
    if seen is None or seen[0] != listed_price:
        if len(unmatched) >= UNMATCHED_MAX:
            unmatched.clear()
        unmatched[key] = (listed_price, now)
        return changed
    del unmatched[key]
    return placement.add_price_change(seen[1], listed_price) or changed


def settle(ctx: Context, job: Job) -> Job | None:
    """Complete the bill of placements that ended in the last SETTLE_POLLS offer polls: a
    price change that took effect shortly before the end reaches price history only with the
    next poll, after the placement closed. Reads history for them at most once per poll; the
    saved job when a change was added, else ``None``. Jobs that reached a terminal state are
    no longer reconciled, so their last placement keeps what was known when it ended."""
    now = ctx.clock()
    last = job.placements[-1] if job.placements else None
    if last is None or last.ended_at is None or \
            (now - last.ended_at).total_seconds() > SETTLE_POLLS * max(OFFER_POLL_S,
                                                                       REPLAY_OFFER_POLL_S):
        return None
    snap = snapshot(ctx)
    window_s = SETTLE_POLLS * snap.poll_s
    changed = False
    for placement in reversed(job.placements):
        if placement.ended_at is None or (now - placement.ended_at).total_seconds() > window_s:
            break  # closed in order: older ones are settled
        if placement.started_at is None or \
                not ctx.state.settles.due((job.id, placement.attempt), now.timestamp(),
                                          snap.poll_s):
            continue
        changed |= catch_up(ctx, placement, placement.ended_at)
    return ctx.store.jobs.save(job) if changed else None


def hold_price(ctx: Context, job: Job) -> Job | None:
    """Record the held offer's new prices and, above the job's max, ask the agent to
    checkpoint so the job can leave; the saved job, or ``None`` when nothing changed."""
    placement = job.placement
    if placement is None or placement.instance_id is None or placement.started_at is None \
            or placement.ended_at is not None:
        return None
    snap = snapshot(ctx)
    listed = listed_offer(snap, placement)
    changed = _record_prices(ctx, job, placement, listed, max(snap.poll_s, PRICE_CATCH_UP_S))
    # The limit is held to the latest poll's price, even before history has it.
    price = listed.price_usd_per_hour if listed is not None else placement.price_usd_per_hour()
    why = over_max(job, price)
    if why is not None and job.state is JobState.RUNNING and job.stop_request is None \
            and not job.cancel_requested:
        job.stop_request = StopRequest(kind=StopKind.MAX_PRICE, reason=why[:500],
                                       attempt=placement.attempt)
        job.record(JobState.CHECKPOINTING, f"{why}; agent checkpointing, then the job moves "
                   "to a compliant offer or waits for one", offer=placement.offer,
                   at=ctx.clock(), kind="max-price", price_usd_per_hour=price)
        changed = True
    return ctx.store.jobs.save(job) if changed else None
