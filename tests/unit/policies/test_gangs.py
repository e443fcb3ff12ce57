"""Gangs in the policy: N nodes of one offer pay N × its price, are interrupted when any node is
(hazard N × a node's, monthly risk 1 − (1 − p)^N), and fit only offers with room for N."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest

from core.models import Job
from policies import risk
from policies.availability import risk_to_mean_up_h
from policies.constraints import explain_no_fit, filter_offers
from policies.daemon_views import job_view, market_view
from policies.decisions import decide_placement
from policies.eligibility import eligible_matrix
from policies.placement import on_demand_reference
from policies.views import JobView, OfferTable
from tests.factories.jobs import spec
from tests.factories.offers import T0, offer
from tests.unit.policies.views_builder import OD, SPOT, market, offers


def test_two_node_gang_pays_twice_the_price_and_twice_the_hazard():
    models = offers(("us-west-2a", SPOT, 1.0), ("us-west-2a", OD, 3.0))
    view = market(models, mean_up_h=10.0)
    # restart 0.5 h, no checkpoint loss beyond it: λ·loss = 0.5/10 for one node, 1.0/10 for two
    jobs = JobView.build(2, restart_overhead_h=0.5, remaining_compute_h=4.0, nodes=[1, 2])
    eff = risk.effective_price(jobs, view)
    assert eff[0, 0] == pytest.approx(1.0 / (1 - 0.05))
    assert eff[1, 0] == pytest.approx(2 * 1.0 / (1 - 0.10))
    assert eff[1, 1] == pytest.approx(2 * 3.0)          # on-demand: never reclaimed
    finish = risk.expected_cost_to_finish(jobs, view.price_usd_per_hour, eff)
    # the launch's half hour is billed for both nodes
    assert finish[1, 1] == pytest.approx(2 * 3.0 * 4.0 + 2 * 3.0 * 0.5)
    assert finish[0, 1] == pytest.approx(3.0 * 4.0 + 3.0 * 0.5)


def test_gang_risk_is_the_combined_risk_of_its_nodes():
    p = 0.2
    assert risk.gang_interruption_risk(p, 2) == pytest.approx(1 - (1 - p) ** 2)
    assert risk.gang_interruption_risk(p, 1) == pytest.approx(p)
    assert risk.gang_interruption_risk(0.0, 8) == 0.0
    # rates add: the gang's mean uptime is a node's ÷ N
    assert risk_to_mean_up_h(risk.gang_interruption_risk(p, 2)) == \
        pytest.approx(risk_to_mean_up_h(p) / 2)
    lam = np.array([0.1, 0.0])
    jobs = JobView.build(1, nodes=2)
    assert risk.gang_hazard(lam, jobs).tolist() == [[0.2, 0.0]]


def test_one_node_figures_are_the_same_arrays_as_before():
    models = offers(("us-west-2a", SPOT, 1.0), ("us-west-2a", OD, 3.0))
    view = market(models)
    jobs = JobView.build(1, restart_overhead_h=0.2, remaining_compute_h=3.0)
    assert risk.gang_nodes(jobs) is None
    assert risk.gang_price(view.price_usd_per_hour, jobs) is view.price_usd_per_hour


def test_gang_prefers_on_demand_when_its_combined_risk_makes_spot_dearer():
    models = offers(("us-west-2a", SPOT, 1.0), ("us-west-2a", OD, 1.2))
    view = market(models, mean_up_h=3.0)
    jobs = JobView.build(2, restart_overhead_h=0.5, remaining_compute_h=10.0, nodes=[1, 8])
    d = decide_placement(jobs, view)
    assert int(d.offer[0]) == 0                      # one node: spot is cheaper
    assert int(d.offer[1]) == 1                      # 8 nodes: reclaimed 8× as often


def test_capacity_one_offer_is_ineligible_for_two_nodes_and_explained():
    small = offer(capacity=1)
    roomy = offer(zone="us-west-2b", capacity=4)
    unknown = offer(zone="us-west-2c")
    gang = spec(resources={"nodes": 2})
    assert filter_offers(gang, [small, roomy, unknown]).eligible == [roomy, unknown]
    assert filter_offers(spec(), [small]).eligible == [small]   # one node: capacity not checked
    table = OfferTable.from_offers([small, roomy, unknown])
    mask = eligible_matrix([gang, spec()], table, np.array([1.0, 1.0, 1.0]))
    assert mask.tolist() == [[False, True, True], [True, True, True]]
    text = explain_no_fit(gang, [small])
    assert "nodes rejects 1 offer: 2 nodes wanted; offer has capacity 1" in text


def test_on_demand_reference_of_a_gang_is_n_times_the_cheapest_roomy_offer():
    cheap = offer(market="on-demand", price_usd_per_hour=2.0, interruption_risk=0, capacity=1)
    dear = offer(zone="us-west-2b", market="on-demand", price_usd_per_hour=3.0,
                 interruption_risk=0)
    assert on_demand_reference(spec(), [cheap, dear]) == 2.0
    assert on_demand_reference(spec(resources={"nodes": 4}), [cheap, dear]) == 12.0


def test_daemon_view_of_a_gang_prices_it_as_one_node_of_the_combined_risk():
    p = 0.3
    gang = Job(id="g", spec=spec(resources={"nodes": 2}), created_at=T0, updated_at=T0)
    one = Job(id="o", spec=spec(), created_at=T0, updated_at=T0)
    node = offer(interruption_risk=p, price_usd_per_hour=1.0)
    combined = offer(interruption_risk=float(risk.gang_interruption_risk(p, 2)),
                     price_usd_per_hour=1.0)
    now = T0 + timedelta(hours=1)
    table, view = market_view([node], np.ones((1, 1), bool))
    jobs = job_view([gang], table, now, restart_overhead_h=0.5, decision_interval_h=0.1,
                    remaining_compute_h=[3.0])
    assert jobs.nodes.tolist() == [2.0]
    table1, view1 = market_view([combined], np.ones((1, 1), bool))
    jobs1 = job_view([one], table1, now, restart_overhead_h=0.5, decision_interval_h=0.1,
                     remaining_compute_h=[3.0])
    # 2 nodes of risk p = twice the price of one node of risk 1 - (1 - p)^2
    assert risk.effective_price(jobs, view)[0, 0] == \
        pytest.approx(2 * risk.effective_price(jobs1, view1)[0, 0])
