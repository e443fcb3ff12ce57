import numpy as np
import pytest

from policies.deadline import flip_age_h
from policies.decisions import PolicyConfig, should_migrate
from policies.views import JobView, Reason
from tests.unit.policies.views_builder import OD, SPOT, market, offers

NEVER = 1e12   # mean uptime so long the hazard is ~0: effective price = price


def running(**kw):
    base = {"remaining_compute_h": 10.0, "restart_overhead_h": 0.2, "decision_interval_h": 0.25,
                "current": 0, "since_start_h": 5.0}
    return JobView.build(1, **(base | kw))


def test_price_driven_move_when_saving_beats_the_move_cost():
    # on a at $2/h, b at $1/h: saving 1 × 10 h = $10 > 1.5 × (1 × 0.2 h) = $0.30
    mk = market(offers(("a", SPOT, 2.0), ("b", SPOT, 1.0)), mean_up_h=NEVER)
    moved = should_migrate(running(), mk)
    assert moved.move[0] and moved.target[0] == 1 and moved.reason[0] == Reason.MIGRATE_PRICE
    assert moved.saving_usd[0] == pytest.approx(10.0, rel=1e-6)
    assert moved.move_cost_usd[0] == pytest.approx(0.2, rel=1e-6)


def test_no_move_below_the_margin():
    # saving .02 × 10 = $0.20 < 1.5 × $0.20 = $0.30
    mk = market(offers(("a", SPOT, 1.02), ("b", SPOT, 1.0)), mean_up_h=NEVER)
    stay = should_migrate(running(), mk)
    assert not stay.move[0] and stay.reason[0] == Reason.CONTINUE
    # with no margin $0.20 > $0.20 is still not a saving; at $1.03 it is
    mk = market(offers(("a", SPOT, 1.03), ("b", SPOT, 1.0)), mean_up_h=NEVER)
    assert should_migrate(running(), mk, PolicyConfig(migration_margin=0.0)).move[0]


def test_hysteresis_dwell_and_no_ping_pong():
    mk = market(offers(("a", SPOT, 2.0), ("b", SPOT, 1.0)), mean_up_h=NEVER)
    assert not should_migrate(running(since_start_h=0.5), mk).move[0]         # dwell 1 h
    assert not should_migrate(running(previous=1, since_start_h=3.0), mk).move[0]  # just left b
    assert should_migrate(running(previous=1, since_start_h=7.0), mk).move[0]


def test_lost_progress_counts_in_the_move_cost():
    mk = market(offers(("a", SPOT, 1.1), ("b", SPOT, 1.0)), mean_up_h=NEVER)
    assert should_migrate(running(), mk).move[0]                 # $1 saving vs $0.30
    # 1 h of unsaved progress at $1.1: cost .2 + 1.1 = $1.30; 1.5 × 1.30 > $1 saving
    assert not should_migrate(running(checkpoint_age_h=1.0), mk).move[0]


def test_on_demand_job_leaves_for_spot_only_when_it_pays():
    models = offers(("a", OD, 3.0), ("b", SPOT, 1.0))
    mk = market(models, mean_up_h=2.0, up_age_h=1.0)
    moved = should_migrate(running(time_to_deadline_h=30.0, compute_h=10.0), mk)
    assert moved.target[0] == 1 and moved.reason[0] == Reason.MIGRATE_TO_SPOT
    # 2 h of compute left on a $3.1 on-demand vs $3 spot: not worth two restarts
    pricey = market(offers(("a", OD, 3.1), ("b", SPOT, 3.0)), mean_up_h=2.0, up_age_h=1.0)
    assert not should_migrate(running(remaining_compute_h=2.0), pricey).move[0]


def test_selective_flips_wait_for_a_run_old_enough():
    # c = 10, r = 11, d = .2: slack .8 pays 2 round trips; ~10/3 runs will start (cycle 3 h)
    # → only runs older than a* = 2 h · (sqrt(10/3 / 2) - 1) = 0.58 h
    models = offers(("a", OD, 3.0), ("b", SPOT, 1.0))
    jobs = running(time_to_deadline_h=11.0, compute_h=10.0, decision_interval_h=1 / 6)
    fresh = market(models, mean_up_h=2.0, up_age_h=0.0)
    assert flip_age_h(jobs, fresh, np.full((1, 2), 2.0))[0, 0] == pytest.approx(
        2.0 * (np.sqrt((10 / 3) / 2) - 1))
    assert not should_migrate(jobs, fresh).move[0]
    aged = market(models, mean_up_h=2.0, up_age_h=1.0)
    assert should_migrate(jobs, aged).target[0] == 1


def test_never_ping_pongs_under_oscillating_prices():
    # prices swap every decision; the dwell and the ping-pong guard bound the moves
    models = offers(("a", SPOT, 1.0), ("b", SPOT, 1.0))
    current, previous, since, moves = 0, -1, 5.0, 0
    for tick in range(48):
        mk = market(models, mean_up_h=NEVER)
        prices = np.array([1.0, 0.8]) if tick % 2 == 0 else np.array([0.8, 1.0])
        mk = mk.__class__(**{**mk.__dict__, "price_usd_per_hour": prices})
        d = should_migrate(running(current=current, previous=previous, since_start_h=since), mk)
        if d.move[0]:
            previous, current, since, moves = current, int(d.target[0]), 0.0, moves + 1
        since += 0.25
    assert moves <= 2
