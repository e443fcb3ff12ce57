"""A placement's bill is the integral of its held offer's price series over its running time,
in market hours; every money figure (job cost, cost report, money-saved figures) uses it."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from core.models import Job, JobState, Placement, PlacementEnd, PriceChange
from core.models.placements import MAX_PRICE_CHANGES
from scheduler.services.costs import job_costs
from scheduler.store.job_stats import saved_usd, summary
from tests.factories.jobs import spec
from tests.factories.offers import T0, offer

H = timedelta(hours=1)


def _placement(price=1.0, start=T0, end=None, scale=1.0, changes=()) -> Placement:
    p = Placement(attempt=1, offer=offer(price_usd_per_hour=price), client_token="ga-x-1",
                  decided_at=start, instance_id="i-1", started_at=start, ended_at=end,
                  time_scale=scale)
    for at, price_then in changes:
        p.add_price_change(at, price_then)
    return p


def test_without_price_changes_the_decision_price_holds():
    p = _placement(price=0.5, end=T0 + 3 * H)
    assert p.cost_usd() == pytest.approx(1.5)
    assert _placement(price=0.5).cost_usd(now=T0 + 2 * H) == pytest.approx(1.0)
    assert Placement(attempt=1, offer=offer(), client_token="t", decided_at=T0).cost_usd() == 0


def test_a_price_that_doubles_mid_run_is_billed_piecewise():
    p = _placement(price=1.0, end=T0 + 3 * H, changes=[(T0 + H, 2.0)])
    assert p.cost_usd() == pytest.approx(1.0 * 1 + 2.0 * 2)
    assert p.cost_usd(now=T0 + 5 * H) == pytest.approx(5.0)  # ended: now does not matter
    running = _placement(price=1.0, changes=[(T0 + H, 2.0)])
    assert running.cost_usd(now=T0 + 90 * timedelta(minutes=1)) == pytest.approx(1.0 + 1.0)


def test_since_bills_only_the_part_of_the_run_inside_the_window():
    # $1/h for 1 h, then $2/h for 2 h, in a 60x market: cut at 30 wall minutes in.
    p = _placement(price=1.0, end=T0 + 3 * H, scale=60.0, changes=[(T0 + H, 2.0)])
    half = T0 + 30 * timedelta(minutes=1)
    assert p.cost_usd(since=half) == pytest.approx(60 * (1.0 * 0.5 + 2.0 * 2))
    assert p.billed_hours(since=half) == pytest.approx(60 * 2.5)
    assert p.cost_usd(since=T0 - H) == pytest.approx(p.cost_usd())  # window before the start
    assert p.cost_usd(since=T0 + 3 * H) == 0 and p.billed_hours(since=T0 + 4 * H) == 0
    running = _placement(price=1.0, changes=[(T0 + H, 2.0)])
    assert running.cost_usd(now=T0 + 2 * H, since=T0 + H) == pytest.approx(2.0)
    job = Job(id="j", spec=spec(), state=JobState.RUNNING, created_at=T0 - 5 * H, updated_at=T0,
              placement=running, on_demand_reference_usd_per_hour=3.0)
    assert job.cost_usd(T0 + 2 * H, since=T0 + H) == pytest.approx(2.0)
    assert job.on_demand_cost_usd(T0 + 2 * H, since=T0 + H) == pytest.approx(3.0)


def test_a_change_before_the_start_sets_the_price_at_the_start():
    p = _placement(price=1.0, end=T0 + 2 * H)
    p.price_changes = [PriceChange(at=T0 - H, price_usd_per_hour=3.0)]  # as stored
    assert p.cost_usd() == pytest.approx(6.0)
    recorded = _placement(price=1.0, end=T0 + 2 * H, changes=[(T0 - H, 3.0)])
    assert recorded.price_changes[0].at == T0  # recorded at the start
    assert recorded.cost_usd() == pytest.approx(6.0)


def test_changes_at_or_after_the_end_are_not_billed():
    p = _placement(price=1.0, end=T0 + 2 * H, changes=[(T0 + 2 * H, 9.0), (T0 + 3 * H, 7.0)])
    assert p.cost_usd() == pytest.approx(2.0)


def test_hours_are_market_hours_on_a_replayed_market():
    # 60x: one wall minute is one market hour; the price doubles after 30 wall s.
    p = _placement(price=1.0, scale=60.0, end=T0 + timedelta(minutes=2),
                   changes=[(T0 + timedelta(seconds=30), 2.0)])
    assert p.billed_hours() == pytest.approx(2.0)
    assert p.cost_usd() == pytest.approx(1.0 * 0.5 + 2.0 * 1.5)


def test_repeats_and_out_of_order_changes_are_not_recorded():
    p = _placement(price=1.0)
    assert not p.add_price_change(T0 + H, 1.0)  # the price in force
    assert p.add_price_change(T0 + 2 * H, 2.0)
    assert not p.add_price_change(T0 + 2 * H, 2.0)  # the same again (a repeated pass)
    assert not p.add_price_change(T0 + H, 5.0)  # older than the latest
    assert p.add_price_change(T0 + 2 * H, 3.0)  # superseded at the same instant
    assert [(c.at, c.price_usd_per_hour) for c in p.price_changes] == [(T0 + 2 * H, 3.0)]
    assert p.price_usd_per_hour() == 3.0 and p.priced_until() == T0 + 2 * H


def test_changes_are_capped_and_the_bill_stays_exact():
    prices = [1.0 + (i % 7) * 0.25 for i in range(3 * MAX_PRICE_CHANGES)]
    p = _placement(price=0.5, changes=[(T0 + (i + 1) * H, x) for i, x in enumerate(prices)])
    assert len(p.price_changes) == MAX_PRICE_CHANGES
    end = T0 + (len(prices) + 2) * H
    expected = 0.5 + sum(prices[:-1]) + prices[-1] * 2  # one hour at each price, then two
    assert p.cost_usd(now=end) == pytest.approx(expected, rel=1e-12)
    assert p.price_usd_per_hour() == prices[-1]


def test_a_stored_placement_without_price_changes_still_reads():
    data = json.loads(_placement(price=0.5, end=T0 + H).model_dump_json())
    del data["price_changes"]
    p = Placement.model_validate_json(json.dumps(data))
    assert p.price_changes == [] and p.cost_usd() == pytest.approx(0.5)


def _job(placement: Placement, *closed: Placement) -> Job:
    job = Job(id="job-c", spec=spec(), state=JobState.RUNNING, created_at=T0, updated_at=T0,
              attempt=len(closed) + 1, placements=list(closed), placement=placement,
              on_demand_reference_usd_per_hour=3.0)
    return job


def test_cost_report_and_money_saved_use_the_integral():
    closed = _placement(price=1.0, end=T0 + 2 * H, changes=[(T0 + H, 2.0)])
    closed.end_reason = PlacementEnd.MOVED
    current = _placement(price=1.0, start=T0 + 2 * H, changes=[(T0 + 3 * H, 2.5)])
    current.attempt = 2
    job = _job(current, closed)
    now = T0 + 5 * H
    bill = (1.0 + 2.0) + (1.0 + 2.5 * 2)
    assert job.cost_usd(now) == pytest.approx(bill)
    report = job_costs(job, now=now)
    assert report["compute_usd"] == pytest.approx(bill)
    assert [r["cost_usd"] for r in report["placements"]] == pytest.approx([3.0, 6.0])
    assert report["placements"][1]["last_price_usd_per_hour"] == 2.5
    assert report["savings_usd"] == pytest.approx(3.0 * 5 - bill)
    figures = summary(job)
    assert figures["since"] == (T0 + 3 * H).timestamp()  # the latest recorded change
    assert saved_usd(figures, now.timestamp()) == pytest.approx(3.0 * 5 - bill)
