"""What a unit of work costs a gang: every node is paid for the work the ranks share.

Worked by hand: a 2-node gang on $2.00/h A100 instances whose ranks together did 200,000
samples in one hour: $4.00 × 1,000 ÷ 200,000 = $0.02 per 1k samples (a one-node job on the
same offer at the same rate: $0.01); 800,000 left: 4.0 h, $16.00 to finish.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from core.models import GangNode, Job, JobState, Placement, utcnow
from core.models.jobs import JobProgress
from core.models.placements import node_token
from core.models.work import ProgressPoint
from scheduler.services.work import work_cost
from scheduler.store.job_stats import work_cost as gauge_cost
from tests.factories.jobs import spec
from tests.factories.offers import offer

A100 = offer(instance_type="a100", market="on-demand", gpu_model="A100-80GB", vram_gib=80,
             price_usd_per_hour=2.00, interruption_risk=0.0)


def _job(nodes: int) -> Job:
    now = utcnow()
    start = now - timedelta(hours=1)
    job = Job(id="g-1", spec=spec(name="g", work={"unit": "samples", "total": 1e6},
                                  resources={"nodes": nodes}),
              created_at=start, updated_at=now, state=JobState.RUNNING, attempt=1)
    gang = [GangNode(rank=r, client_token=node_token("t", r), instance_id=f"i-{r}",
                     launched_at=start) for r in range(nodes)] if nodes > 1 else []
    job.placement = Placement(attempt=1, offer=A100, client_token="t", decided_at=start,
                              instance_id="i-0", started_at=start, nodes=gang)
    job.progress = JobProgress(
        latest=ProgressPoint(unit="samples", done=200_000, total=1e6, at=now),
        attempt=1, gpu_model="A100-80GB", gpu_count=1,
        start=ProgressPoint(unit="samples", done=0, at=start))
    return job


@pytest.mark.parametrize(("nodes", "per_1k"), [(1, 0.01), (2, 0.02)])
def test_a_gangs_cost_per_unit_counts_every_node(nodes, per_1k):
    job = _job(nodes)
    cost = work_cost(job)
    assert cost is not None and cost.cost_per_1k_usd == pytest.approx(per_1k)
    assert cost.cost_to_finish_usd == pytest.approx(8.00 * nodes)
    assert cost.cost_so_far_per_1k_usd == pytest.approx(per_1k, rel=1e-3)  # billed × nodes
    assert gauge_cost(job)["cpk"] == pytest.approx(per_1k)


@pytest.mark.parametrize("nodes", [1, 2])
def test_a_gangs_savings_accrue_against_every_nodes_price(nodes):
    from scheduler.store.job_stats import saved_usd, summary

    job = _job(nodes)
    job.on_demand_reference_usd_per_hour = 3.00 * nodes  # the policy's reference: N × on-demand
    figures = summary(job)
    assert figures["rate"] == pytest.approx((3.00 - 2.00) * nodes / 3600.0)
    # Saved up to now (one hour billed): ($3.00 - $2.00) × nodes.
    assert saved_usd(figures, utcnow().timestamp()) == pytest.approx(1.00 * nodes, rel=1e-3)
