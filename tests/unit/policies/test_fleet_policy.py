"""Owned GPUs (the SSH fleet) in the unchanged policy: a fleet slot is an on-demand offer priced
at its amortised cost with no interruption risk, so with free slots it wins, when the fleet is
full (its hosts list no offer) spot takes the overflow, and when a slot frees a job running on
a cloud moves back only if the saving over its remaining work pays for the move. A job is
pinned to the fleet or kept off it with ``providers.allow``/``deny``.

Plain data through the daemon's own path: offers → :func:`policies.eligibility.eligible_matrix`
→ :func:`policies.daemon_views.market_view`/:func:`~policies.daemon_views.job_view` →
:mod:`policies.decisions`.
"""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest

from core.models import Job, Placement
from core.units import RESTART_OVERHEAD_H
from policies.daemon_views import job_view, market_view
from policies.decisions import DEFAULT_CONFIG, decide_placement, should_migrate
from policies.eligibility import eligible_matrix
from policies.views import NO_OFFER, OfferTable, Reason
from tests.factories.jobs import spec
from tests.factories.offers import T0, offer

# An RTX 4090 bought for $1,800 and used 70 % of the hours of 3 years ($0.098/h) plus 450 W at
# $0.15/kWh ($0.0675/h), as the README derives cost_per_gpu_hour_usd.
OWNED_USD_PER_GPU_HOUR = 1800 / (3 * 8760 * 0.7) + 0.450 * 0.15


def fleet_slot(host: str = "gpu-a") -> object:
    return offer(provider="fleet", region="home", zone="rack-1", instance_type=f"{host}-1gpu",
                 market="on-demand", gpu_model="RTX4090", vram_gib=24, vcpus=16, memory_gib=64,
                 price_usd_per_hour=OWNED_USD_PER_GPU_HOUR,
                 on_demand_price_usd_per_hour=OWNED_USD_PER_GPU_HOUR, interruption_risk=0.0)


CLOUD = [
    offer(instance_type="g5.xlarge", gpu_model="A10G", vram_gib=22.35, vcpus=4, memory_gib=16,
          price_usd_per_hour=0.45, on_demand_price_usd_per_hour=1.006, interruption_risk=0.05),
    offer(instance_type="g5.xlarge", gpu_model="A10G", vram_gib=22.35, vcpus=4, memory_gib=16,
          market="on-demand", price_usd_per_hour=1.006, on_demand_price_usd_per_hour=1.006,
          interruption_risk=0.0),
]
SPOT = CLOUD[0]


def _market(offers, specs):
    table = OfferTable.from_offers(offers)
    prices = np.array([o.price_usd_per_hour for o in offers])
    return market_view(offers, eligible_matrix(specs, table, prices))


def _place(offers, job_spec):
    table, market = _market(offers, [job_spec])
    job = Job(id="j1", spec=job_spec, created_at=T0, updated_at=T0)
    view = job_view([job], table, T0, restart_overhead_h=RESTART_OVERHEAD_H,
                    decision_interval_h=1 / 60)
    decision = decide_placement(view, market)
    index = int(decision.offer[0])
    return (None if index == NO_OFFER else offers[index]), Reason(decision.reason[0])


def test_a_free_fleet_slot_wins_and_a_full_fleet_sends_the_job_to_spot():
    job_spec = spec(resources={"gpu_count": 1, "min_vram_gib": 16})
    chosen, _ = _place([*CLOUD, fleet_slot()], job_spec)
    assert chosen.provider == "fleet"
    # Full hosts list no slot: the overflow bursts to the cheapest spot offer.
    chosen, reason = _place(CLOUD, job_spec)
    assert chosen == SPOT and reason is Reason.SPOT


def test_pinned_to_the_fleet_or_kept_off_it_with_the_provider_lists():
    pinned = spec(providers={"allow": ["fleet"]})
    assert _place([*CLOUD, fleet_slot()], pinned)[0].provider == "fleet"
    assert _place(CLOUD, pinned) == (None, Reason.NOTHING_AVAILABLE)  # waits for a slot
    kept_off = spec(providers={"deny": ["fleet"]})
    assert _place([*CLOUD, fleet_slot()], kept_off)[0] == SPOT


def _on_spot(remaining_compute_h: float, since_start_h: float = 2.0):
    """Where a job running on :data:`SPOT` for ``since_start_h`` goes once a slot frees, and
    the saving and move cost the decision weighed (USD)."""
    offers = [*CLOUD, fleet_slot()]
    job_spec = spec()
    table, market = _market(offers, [job_spec])
    started = T0 - timedelta(hours=since_start_h)
    job = Job(id="j1", spec=job_spec, created_at=started, updated_at=T0, placement=Placement(
        attempt=1, offer=SPOT, client_token="j1-1", decided_at=started, instance_id="i-1",
        started_at=started))
    view = job_view([job], table, T0, restart_overhead_h=RESTART_OVERHEAD_H,
                    decision_interval_h=1 / 60, remaining_compute_h=[remaining_compute_h])
    moved = should_migrate(view, market)
    return offers[int(moved.target[0])], Reason(moved.reason[0]), moved


def test_a_cloud_job_moves_back_to_a_freed_slot_when_the_saving_pays_for_the_move():
    target, reason, moved = _on_spot(remaining_compute_h=10.0)
    assert target.provider == "fleet" and reason is Reason.MIGRATE_PRICE
    assert moved.saving_usd[0] > (1 + DEFAULT_CONFIG.migration_margin) * moved.move_cost_usd[0]
    # the saving is the spot job's risk-aware price over the owned slot's, over 10 h of work
    assert moved.saving_usd[0] > (SPOT.price_usd_per_hour - OWNED_USD_PER_GPU_HOUR) * 10


@pytest.mark.parametrize("remaining_compute_h, since_start_h", [
    (0.05, 2.0),   # nearly done: $0.014 saved < 1.5 × $0.017 of restart billed on the slot
    (10.0, 0.5),   # started on spot half an hour ago: the dwell time holds it there
])
def test_a_cloud_job_stays_when_the_move_would_not_pay(remaining_compute_h, since_start_h):
    target, reason, _ = _on_spot(remaining_compute_h, since_start_h)
    assert target == SPOT and reason is Reason.CONTINUE
