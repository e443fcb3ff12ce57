"""Interruption notices in the risk model: a market that warns long enough for a final
checkpoint loses only the restart at a reclaim; one that gives no notice (Vast.ai) also loses
the progress since the last periodic checkpoint; an unknown notice keeps the old model."""

import numpy as np
import pytest

from core.models import Job
from policies.daemon_views import job_view, market_view
from policies.decisions import decide_placement
from policies.risk import effective_price, loss_per_reclaim_h
from policies.views import JobView, OfferTable, Reason
from tests.factories.jobs import spec
from tests.factories.offers import T0, offer
from tests.unit.policies.views_builder import market

LAM_MEAN_UP_H = 2.0     # λ = 0.5 reclaims per hour on every spot offer here
RESTART_H = 0.2


def _spot(zone: str, price: float, notice_s: float | None):
    return offer(zone=zone, price_usd_per_hour=price, interruption_notice_s=notice_s)


def _job(interval_h: float, final_s: float = 8.0, n: int = 1) -> JobView:
    return JobView.build(n, restart_overhead_h=RESTART_H, checkpoint_interval_h=interval_h,
                         final_checkpoint_s=final_s, remaining_compute_h=10.0)


def test_loss_by_hand_for_each_kind_of_notice() -> None:
    table = OfferTable.from_offers([_spot("unknown", 1, None), _spot("none", 1, 0),
                                    _spot("aws", 1, 120), _spot("azure", 1, 30),
                                    _spot("short", 1, 10)])
    assert np.isnan(table.interruption_notice_s[0])
    loss = loss_per_reclaim_h(_job(interval_h=1.0, final_s=30.0), table)
    # rework (half an hour) is lost without a notice, with an unknown one, and with one
    # shorter than the 30 s the final checkpoint takes
    assert loss[0] == pytest.approx([0.7, 0.7, 0.2, 0.2, 0.7])


def test_unknown_notices_keep_the_old_model_exactly() -> None:
    models = [_spot("a", 1.0, None), _spot("b", 1.2, None)]
    mk = market(models, mean_up_h=LAM_MEAN_UP_H)
    jobs = _job(interval_h=1.0)
    assert loss_per_reclaim_h(jobs, mk.offers).shape == (1, 1)
    assert np.array_equal(loss_per_reclaim_h(jobs, mk.offers), loss_per_reclaim_h(jobs))
    # the old formula, computed the old way: price / (1 - λ (d + τ/2))
    assert np.array_equal(effective_price(jobs, mk)[0],
                          np.array([1.0, 1.2]) * (1.0 / (1.0 - 0.5 * (RESTART_H + 0.5))))


def test_equal_spot_prices_the_offer_with_notice_wins() -> None:
    models = [_spot("vast-like", 1.0, 0), _spot("aws-like", 1.0, 120)]
    mk = market(models, mean_up_h=LAM_MEAN_UP_H)
    jobs = _job(interval_h=1.0)
    # no notice: 1 / (1 - 0.5·0.7) = 1.538; a notice: 1 / (1 - 0.5·0.2) = 1.111
    assert effective_price(jobs, mk)[0] == pytest.approx([1 / 0.65, 1 / 0.9])
    decision = decide_placement(jobs, mk)
    assert decision.offer[0] == 1 and decision.reason[0] == Reason.SPOT


def test_a_short_checkpoint_interval_barely_cares() -> None:
    # A no-notice offer 1 % cheaper: worth it when a checkpoint is 36 s of work away, not
    # when it is an hour away.
    models = [_spot("vast-like", 0.99, 0), _spot("aws-like", 1.0, 120)]
    mk = market(models, mean_up_h=LAM_MEAN_UP_H)
    frequent, hourly = _job(interval_h=0.01), _job(interval_h=1.0)
    eff = effective_price(frequent, mk)[0]
    assert eff[0] / 0.99 == pytest.approx(1 / (1 - 0.5 * 0.205))
    assert eff[0] / 0.99 / eff[1] - 1 < 0.003  # 0.28 % apart before the price difference
    assert decide_placement(frequent, mk).offer[0] == 0
    assert decide_placement(hourly, mk).offer[0] == 1


def test_a_notice_shorter_than_the_final_checkpoint_is_no_help() -> None:
    models = [_spot("vast-like", 1.0, 0), _spot("azure-like", 1.0, 30)]
    mk = market(models, mean_up_h=LAM_MEAN_UP_H)
    slow_save = _job(interval_h=1.0, final_s=60.0)
    eff = effective_price(slow_save, mk)[0]
    assert eff[0] == eff[1] == pytest.approx(1 / 0.65)


def test_jobs_with_different_saves_get_their_own_rows() -> None:
    models = [_spot("vast-like", 1.0, 0), _spot("azure-like", 1.0, 30)]
    mk = market(models, mean_up_h=LAM_MEAN_UP_H, n=3)
    jobs = JobView.build(3, restart_overhead_h=RESTART_H, checkpoint_interval_h=1.0,
                         final_checkpoint_s=[10.0, 60.0, 10.0])
    eff = effective_price(jobs, mk)
    assert eff[:, 1] == pytest.approx([1 / 0.9, 1 / 0.65, 1 / 0.9])
    assert eff[:, 0] == pytest.approx([1 / 0.65] * 3)


def test_daemon_views_carry_the_offers_notice_and_the_jobs_grace() -> None:
    offers = [_spot("a", 1.0, 0), _spot("b", 1.0, 30.0), _spot("c", 1.0, None)]
    table, mk = market_view(offers, np.ones((1, 3), bool))
    assert table.interruption_notice_s[:2].tolist() == [0.0, 30.0]
    assert np.isnan(table.interruption_notice_s[2])
    job = Job(id="j1", spec=spec(), created_at=T0, updated_at=T0)
    view = job_view([job], table, T0, restart_overhead_h=RESTART_H,
                    decision_interval_h=0.01, checkpoint_interval_h=[1.0],
                    final_checkpoint_s=[8.0])
    assert view.final_checkpoint_s.tolist() == [8.0]
    assert loss_per_reclaim_h(view, mk.offers)[0] == pytest.approx([0.7, 0.2, 0.7])
