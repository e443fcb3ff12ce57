from datetime import timedelta

import numpy as np
import pytest

from core.models import Job, Placement, PlacementEnd
from policies.daemon_views import job_view, market_view
from policies.decisions import decide_placement, should_migrate
from policies.views import NO_OFFER, NO_ZONE, Reason
from tests.factories.jobs import spec
from tests.factories.offers import T0, offer


def offers():
    return [offer(zone="us-west-2a", price_usd_per_hour=0.9),
            offer(zone="us-west-2b", price_usd_per_hour=1.0),
            offer(zone="us-west-2a", market="on-demand", price_usd_per_hour=3.06,
                  interruption_risk=0.0)]


def job(**kw) -> Job:
    return Job(id="j1", spec=spec(deadline=T0 + timedelta(hours=30)), created_at=T0,
               updated_at=T0, **kw)


def test_market_view_from_offers_and_samples():
    models = offers()
    eligible = np.ones((2, 3), bool)
    eligible[1, :2] = False                                   # job 1 admits only on-demand
    samples = np.array([[1, 1, 0, 1], [1, 1, 1, 1], [1, 1, 1, 1]], bool)
    table, mk = market_view(models, eligible, samples, gap_h=0.5)
    assert list(table.is_spot) == [True, True, False]
    assert mk.offer_stats.up_age_h[0] == 0.0 and mk.offer_stats.up_age_h[1] == 1.5
    assert np.isinf(mk.offer_stats.up_age_h[2])
    assert mk.pool_stats.frac[1] == 0.0                       # no spot offer: cannot wait
    with pytest.raises(ValueError):
        market_view(models, np.ones((1, 2), bool))


def _placement(attempt, offer, decided, started, ended=None, end_reason=None):
    return Placement(attempt=attempt, offer=offer, client_token=f"t{attempt}", decided_at=decided,
                     instance_id=f"i-{attempt}", started_at=started, ended_at=ended,
                     end_reason=end_reason)


def test_job_view_reads_placements_deadline_and_spend():
    models = offers()
    table, mk = market_view(models, np.ones((1, 3), bool))
    lost = _placement(1, models[0], T0, T0, T0 + timedelta(hours=2), PlacementEnd.PREEMPTED)
    now_on = _placement(2, models[1], T0 + timedelta(hours=2), T0 + timedelta(hours=2))
    now = T0 + timedelta(hours=2.5)

    def view_at(now):
        return job_view([job(placements=[lost], placement=now_on)], table, now,
                        restart_overhead_h=0.2, decision_interval_h=1 / 60,
                        compute_h=[20.0], remaining_compute_h=[18.0])

    view = view_at(now)
    assert view.current[0] == 1 and view.since_start_h[0] == pytest.approx(0.5)
    assert table.zone_names[view.last_preempted_zone[0]] == "aws/us-west-2/us-west-2a"
    assert view.since_preemption_h[0] == pytest.approx(0.5)
    assert view.time_to_deadline_h[0] == pytest.approx(27.5)
    assert view.spent_usd[0] == pytest.approx(0.9 * 2 + 1.0 * 0.5)
    assert should_migrate(view, mk).reason[0] == Reason.CONTINUE         # dwell, zone cooling
    later = should_migrate(view_at(T0 + timedelta(hours=3.5)), mk)      # back to the cheap zone
    assert later.target[0] == 0 and later.reason[0] == Reason.MIGRATE_PRICE
    pending = job_view([job()], table, now, restart_overhead_h=0.2, decision_interval_h=1 / 60)
    assert pending.current[0] == NO_OFFER and pending.last_preempted_zone[0] == NO_ZONE
    # unknown duration: no deadline reasoning, lowest expected cost now
    assert decide_placement(pending, mk).reason[0] == Reason.SPOT


def test_previous_is_the_offer_last_left_by_a_move_and_hours_scale_to_market_hours():
    models = offers()
    table, mk = market_view(models, np.ones((1, 3), bool))
    moved = _placement(1, models[1], T0, T0, T0 + timedelta(minutes=1), PlacementEnd.MOVED)
    current = _placement(2, models[0], T0, T0 + timedelta(minutes=1))
    view = job_view([job(placements=[moved], placement=current)], table,
                    T0 + timedelta(minutes=2), restart_overhead_h=0.1,
                    decision_interval_h=0.01, time_scale=60, checkpoint_age_h=[0.5])
    assert view.previous[0] == 1
    assert view.since_start_h[0] == pytest.approx(1.0)   # one wall minute at 60x
    assert view.elapsed_h[0] == pytest.approx(2.0)
    assert view.checkpoint_age_h[0] == 0.5
    # The offer just left is not a move target within the ping-pong cooldown.
    assert should_migrate(view, mk).target[0] == 0
