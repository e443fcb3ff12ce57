"""How the controller records the held offer's price series, against a real Redis and a real
replay cloud process: the price history and latest offers are written here the way the poller
writes them (same store calls, the provider's own history source), so each case is exact."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from core.models import (
    Job,
    JobState,
    Placement,
    PlacementEnd,
    PriceObservation,
    StopKind,
    utcnow,
)
from scheduler.controller.pricing import hold_price
from scheduler.controller.transitions import end_placement
from scheduler.poller.offers import OfferPoller, history_source
from scheduler.timing import OFFER_POLL_S, PRICE_CATCH_UP_S
from tests.factories.jobs import spec
from tests.integration.controller.conftest import controller_context

MARKET = """
name: records
time_scale: 1
offers:
  - {provider: aws, region: r1, zone: r1a, instance_type: held, gpu_model: T4, gpu_count: 1,
     vram_gib: 16, vcpus: 4, memory_gib: 16, spot_price_usd_per_hour: 1.0}
"""
H = timedelta(hours=1)
# One read period of a placement (a market at time_scale 1 is polled like a real cloud).
EVERY = timedelta(seconds=max(OFFER_POLL_S, PRICE_CATCH_UP_S))


@pytest.fixture
def setup(replay_market, redis_client):
    provider = replay_market(MARKET)
    ctx = controller_context(redis_client, provider)
    OfferPoller(ctx.store, provider)()
    return ctx, provider, history_source(provider)


def _running(ctx, job_id: str) -> tuple[Job, object]:
    [held] = ctx.store.offers.all_offers()
    now = utcnow().replace(microsecond=0)  # history keeps milliseconds
    start = now - 2 * H
    placement = Placement(attempt=1, offer=held.model_copy(update={"observed_at": start}),
                          client_token=f"ga-{job_id}-1", decided_at=start, instance_id="i-1",
                          started_at=start)
    job = Job(id=job_id, spec=spec(), state=JobState.RUNNING, created_at=start,
              updated_at=start, attempt=1, placement=placement)
    return ctx.store.jobs.create(job), now


def _at(ctx, when):
    """The context of a new pass at ``when``: the market snapshot is read again."""
    return replace(ctx, clock=lambda: when).for_pass()


def _obs(series: str, at, price: float) -> PriceObservation:
    return PriceObservation(series=series, observed_at=at, price_usd_per_hour=price)


def test_a_price_that_moved_and_came_back_within_one_poll_is_billed(setup):
    ctx, _, source = setup
    job, now = _running(ctx, "job-back")
    series, start = job.placement.offer.key.series(), job.placement.started_at
    t1, t2 = start + H, start + H + timedelta(minutes=30)
    ctx.store.offers.append_prices([_obs(series, t1, 2.0), _obs(series, t2, 1.0)], source)
    ctx = _at(ctx, now)
    assert hold_price(ctx, job) is None  # a placement's first pass starts its read period
    ctx = _at(ctx, now + EVERY)  # the latest offers still say $1.00: only the periodic read sees it
    saved = hold_price(ctx, job)
    assert [(c.at, c.price_usd_per_hour) for c in saved.placement.price_changes] == [
        (t1, 2.0), (t2, 1.0)]
    assert saved.cost_usd(now) == pytest.approx(1.0 * 1 + 2.0 * 0.5 + 1.0 * 0.5)
    assert hold_price(ctx, ctx.store.jobs.get(job.id)) is None  # nothing new, no write


def test_a_listed_price_history_never_holds_is_recorded_from_the_pass_that_saw_it(setup):
    ctx, _, source = setup
    job, now = _running(ctx, "job-nohist")
    [held] = ctx.store.offers.all_offers()
    ctx.store.offers.replace_offers("aws", [held.model_copy(
        update={"price_usd_per_hour": 3.0})], source)
    ctx = _at(ctx, now)
    assert hold_price(ctx, job) is None  # a placement's first pass starts its read period
    ctx = _at(ctx, now + EVERY)
    assert hold_price(ctx, job) is None  # maybe history is being written: not yet
    ctx = _at(ctx, now + 2 * EVERY)
    saved = hold_price(ctx, ctx.store.jobs.get(job.id))
    assert [(c.at, c.price_usd_per_hour) for c in saved.placement.price_changes] == [
        (now + EVERY, 3.0)]


def test_the_last_change_before_the_end_is_billed_without_a_pass_seeing_it(setup):
    ctx, _, source = setup
    job, now = _running(ctx, "job-end")
    series, start = job.placement.offer.key.series(), job.placement.started_at
    # (after the replay market's own opening observation, which is at about now)
    ctx.store.offers.append_prices([_obs(series, now + timedelta(minutes=1), 4.0)], source)
    ctx = _at(ctx, now + timedelta(minutes=7))
    end_placement(ctx, job, PlacementEnd.SUCCEEDED)
    ended = job.placements[-1]
    assert ended.price_changes[-1].price_usd_per_hour == 4.0
    assert (ended.ended_at - start) == 2 * H + timedelta(minutes=7)
    assert ended.cost_usd() == pytest.approx(1.0 * (2 + 1 / 60) + 4.0 * 0.1)


def test_the_max_is_held_to_the_latest_poll_even_before_history_has_the_price(setup):
    ctx, _, source = setup
    job, now = _running(ctx, "job-limit")
    job.spec = job.spec.model_copy(update={"max_price_usd_per_hour": 2.0})
    job = ctx.store.jobs.save(job)
    [held] = ctx.store.offers.all_offers()
    ctx.store.offers.replace_offers("aws", [held.model_copy(
        update={"price_usd_per_hour": 3.0})], source)
    ctx = _at(ctx, now)
    hold_price(ctx, job)  # nothing read from history yet, but ...
    saved = ctx.store.jobs.get(job.id)
    assert saved.placement.price_changes == []
    assert saved.stop_request.kind is StopKind.MAX_PRICE
    assert saved.events[-1].kind == "max-price" and saved.events[-1].price_usd_per_hour == 3.0
    assert "price $3.00/h is above max_price_usd_per_hour $2.00/h" in saved.events[-1].message
    assert saved.state is JobState.CHECKPOINTING  # ... the job leaves at once


def test_a_change_polled_after_the_end_completes_the_closed_placements_bill(setup):
    """A change 20 s before the end reaches history with the next poll, after the placement
    closed: the following polls' passes add it to the closed placement (it was never billed)."""
    from scheduler.controller.pricing import settle
    ctx, _, source = setup
    job, now = _running(ctx, "job-late")
    series = job.placement.offer.key.series()
    # Ends a minute from now: after the replay cloud's own opening observation (setup's poll).
    end = now + timedelta(minutes=1)
    ctx = _at(ctx, end)
    end_placement(ctx, job, PlacementEnd.MOVED)  # history holds no change yet
    job.state = JobState.MIGRATING
    job = ctx.store.jobs.save(job)
    hours = (end - job.placements[-1].started_at).total_seconds() / 3600
    assert job.placements[-1].price_changes == [] and job.cost_usd(end) == pytest.approx(hours)
    late = end - timedelta(seconds=20)
    ctx.store.offers.append_prices([_obs(series, late, 4.0),
                                    _obs(series, end + timedelta(seconds=5), 9.0)], source)
    poll = timedelta(seconds=OFFER_POLL_S)
    assert settle(ctx, job) is None  # first sight of the placement: its poll period starts
    ctx = _at(ctx, end + poll)
    saved = settle(ctx, job)
    assert saved is not None
    assert [(c.at, c.price_usd_per_hour) for c in saved.placements[-1].price_changes] == [
        (late, 4.0)]  # the change after the end is not this placement's
    assert saved.cost_usd(end) == pytest.approx(hours - 1.0 * 20 / 3600 + 4.0 * 20 / 3600)
    ctx = _at(ctx, end + 2 * poll)
    assert settle(ctx, saved) is None  # nothing new: no write
    ctx = _at(ctx, end + 10 * poll)
    ctx.store.offers.append_prices([_obs(series, end - timedelta(seconds=10), 5.0)], source)
    assert settle(ctx, saved) is None  # past the settling window: the bill stays
