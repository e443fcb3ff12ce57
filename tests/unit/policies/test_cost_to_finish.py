"""Decisions on expected cost to finish over GPUs of different speed, on hand-made markets.

Speeds are reference-hours of work per hour (A100 = 1; the Lambda benchmark relatives quoted in
the issue: RTX 4090 0.61, V100 0.375). Costs below are worked out by hand in the comments:
effective price = price × inflation ÷ speed (USD per reference-hour), cost to finish =
effective price × remaining reference-hours + the launch overhead billed at the offer's price.
"""

import numpy as np
import pytest

from policies import deadline, risk
from policies.daemon_views import market_view, offer_speeds
from policies.decisions import PolicyConfig, decide, decide_placement, should_migrate
from policies.throughput import Measurement, WorkModel, scaling
from policies.views import NO_OFFER, JobView, MarketView, Reason, with_speed
from tests.factories.offers import offer
from tests.unit.policies.views_builder import OD, SPOT, market, offers

# With mean_up 2 h and age 0 a spot offer is reclaimed λ = 1/2 times an hour; each reclaim
# loses the restart overhead d (continuous checkpoints), so inflation = 1 / (1 - d/2).


def job(**kw) -> JobView:
    base = {"compute_h": 10.0, "remaining_compute_h": 10.0, "restart_overhead_h": 0.2,
            "decision_interval_h": 0.25}
    return JobView.build(1, **(base | kw))


def issue_market(with_4090: bool) -> MarketView:
    rows = [("a", OD, 1.50), ("a", SPOT, 0.92)] + ([("b", SPOT, 0.30)] if with_4090 else [])
    speed = [1.0, 0.375] + ([0.61] if with_4090 else [])
    return with_speed(market(offers(*rows), mean_up_h=2.0), speed)


def test_a_slower_gpu_cheaper_per_hour_costs_more_to_finish():
    # d = .2: spot inflation 1 / (1 - .5 · .2) = 1/.9
    # A100 on-demand: 1.50 $/ref-h; 10 ref-h → 15.00 + .2 h · 1.50 = $15.30
    # V100 spot: .92 / .9 / .375 = 2.7259 $/ref-h → 27.259 + .2 · .92 = $27.443
    mk = issue_market(with_4090=False)
    eff = risk.effective_price(job(), mk)
    assert eff[0] == pytest.approx([1.50, 0.92 / 0.9 / 0.375])
    finish = risk.expected_cost_to_finish(job(), mk.price_usd_per_hour, eff)
    assert finish[0] == pytest.approx([15.30, 10 / 0.375 * 0.92 / 0.9 + 0.184])
    placed = decide_placement(job(), mk)
    assert placed.offer[0] == 0 and placed.reason[0] == Reason.ON_DEMAND_CHEAPER
    # by price per hour alone (no speeds) the V100 wins: 1.0222 × 10 + .184 = $10.41 < $15.30
    assert decide_placement(job(), with_speed(mk, None)).offer[0] == 1


def test_a_slower_gpu_that_costs_less_to_finish():
    # RTX 4090 spot: .30 / .9 / .61 = .5464 $/ref-h (about $0.49 per A100-hour before the
    # risk) → 5.464 + .2 · .30 = $5.52, under the A100's $15.30 and the V100's $27.44
    mk = issue_market(with_4090=True)
    eff = risk.effective_price(job(), mk)[0]
    assert eff[2] == pytest.approx(0.30 / 0.9 / 0.61)
    assert 0.30 / 0.61 == pytest.approx(0.49, abs=0.005)
    placed = decide_placement(job(), mk)
    assert placed.offer[0] == 2 and placed.reason[0] == Reason.SPOT
    # unknown duration: ranked on one reference-hour plus the launch, the 4090 still wins
    # (.546 + .06 < 1.50 + .30 < 2.726 + .184)
    assert decide_placement(job(remaining_compute_h=np.nan, compute_h=np.nan), mk).offer[0] == 2


# slow spot, fast spot, slow on-demand, fast on-demand
DEADLINE_ROWS = (("a", SPOT, 0.40), ("b", SPOT, 1.20), ("a", OD, 0.60), ("b", OD, 2.00))
DEADLINE_SPEED = [0.5, 1.0, 0.5, 1.0]


def deadline_market() -> MarketView:
    return with_speed(market(offers(*DEADLINE_ROWS), mean_up_h=2.0), DEADLINE_SPEED)


def timed(r, **kw) -> JobView:
    return job(restart_overhead_h=0.5, time_to_deadline_h=r, **kw)


def test_a_deadline_only_the_faster_gpu_meets():
    # d = .5: spot inflation 1 / (1 - .5 · .5) = 4/3.
    # cost to finish 10 ref-h: slow spot .40·4/3/.5 = 1.0667 $/ref-h → 10.667 + .2 = $10.87;
    # fast spot 1.60 → 16 + .6 = $16.60; slow on-demand 1.20 → 12 + .3 = $12.30;
    # fast on-demand 2.00 → 20 + 1 = $21.00
    mk = deadline_market()
    finish = risk.expected_cost_to_finish(timed(15.0), mk.price_usd_per_hour,
                                          risk.effective_price(timed(15.0), mk))[0]
    assert finish == pytest.approx([10.0 / 0.5 * 0.4 * 4 / 3 + 0.2, 16.6, 12.3, 21.0])
    # no deadline: the slow spot, cheapest to finish
    assert decide_placement(job(restart_overhead_h=0.5), mk).offer[0] == 0
    # deadline in 12 h: the slow offers need .5 + 10/.5 = 20.5 h, the fast ones 10.5 h.
    # The fallback is the fast on-demand (the only one in time), the fast spot is safe (its
    # first tick makes no progress: 12 - .25 >= 10 + .5) and costs less than it: spot. (With
    # 15 h the lookahead would rather let the new spot run age first: policies.lookahead.)
    placed = decide_placement(timed(12.0), mk)
    assert placed.offer[0] == 1 and placed.reason[0] == Reason.SPOT
    hours = deadline.finish_h(timed(15.0), np.array(DEADLINE_SPEED), np.array([[0.5]]))
    assert hours[0] == pytest.approx([20.5, 10.5, 20.5, 10.5])


def test_without_a_fast_spot_a_slow_safe_one_beats_idling():
    # the fast spot is gone; 15 h left. The slow spot cannot finish in time (20.5 h) but its
    # first tick keeps the fallback in time (15 - .25 - .5 - 10 >= 0) and its $10.87 to finish
    # is under the fast on-demand's $21: it makes progress there until the safety net moves
    # the job
    no_fast = with_speed(market(offers(*DEADLINE_ROWS), mean_up_h=2.0,
                                available=[True, False, True, True]), DEADLINE_SPEED)
    placed = decide_placement(timed(15.0), no_fast)
    assert placed.offer[0] == 0 and placed.reason[0] == Reason.SPOT
    # at $0.90/h the slow spot costs .9 · 4/3 / .5 · 10 + .45 = $24.45 > $21: not that spot.
    # With 4.5 h of slack the job waits (on-demand later costs what it costs now, and the
    # slack may still buy spot); at 10.7 h it could not wait one more tick (10.45 < 10.5):
    # the fast on-demand
    rows = (("a", SPOT, 0.90),) + DEADLINE_ROWS[1:]
    dear = with_speed(market(offers(*rows), mean_up_h=2.0, available=[True, False, True, True]),
                      DEADLINE_SPEED)
    placed = decide_placement(timed(15.0), dear)
    assert placed.offer[0] == NO_OFFER and placed.reason[0] == Reason.WAIT_FOR_SPOT
    placed = decide_placement(timed(10.7), dear)
    assert placed.offer[0] == 3 and placed.reason[0] == Reason.ON_DEMAND_NEEDED


def test_the_safety_net_falls_back_to_a_fast_on_demand():
    mk = deadline_market()
    # on the fast spot, 11 h left, hourly checkpoints .8 h old: a reclaim at the end of the
    # tick loses min(1, .8 + .25) = 1 h, and 11 - .25 = 10.75 < 10 - .25 + 1 + .5 = 11.25
    risky = timed(11.0, current=1, since_start_h=5.0, checkpoint_interval_h=1.0,
                  checkpoint_age_h=0.8)
    moved = should_migrate(risky, mk)
    # the slow on-demand is cheaper to finish ($12.30 vs $21) but needs 20.5 h > 11
    assert moved.target[0] == 3 and moved.reason[0] == Reason.SAFETY_NET
    assert deadline.feasible(risky, np.array([False]), np.array([1.0]))[0]      # 10.5 <= 11
    assert not deadline.feasible(risky, np.array([False]), np.array([0.5]))[0]  # 20.5 > 11
    # nothing is in time any more (10.4 < 10.5): on-demand that finishes first, the fast one
    late = decide_placement(timed(10.4), mk)
    assert late.offer[0] == 3 and late.reason[0] == Reason.DEADLINE_INFEASIBLE
    # a tick on a warm spot instance of speed s is worth .25 · s reference-hours: with 10.6 h
    # left, reclaimed at its end, the fast fallback needs 10 - .25 s + .5 h in 10.35 h:
    # speed 2: 10.0 <= 10.35, safe; speed .5: 10.375 > 10.35, not safe
    j = timed(10.6, current=1, since_start_h=5.0)
    assert deadline.spot_safe(j, np.array([0.0]), np.array([2.0]), np.array([1.0]))[0]
    assert not deadline.spot_safe(j, np.array([0.0]), np.array([0.5]), np.array([1.0]))[0]


def test_a_two_gpu_offer_scales_with_its_efficiency():
    # 2 × A100 at 90 % efficiency: 1 + (2 - 1) · .9 = 1.9 reference-hours an hour
    two = scaling(2, 0.9)
    assert two == pytest.approx(1.9)
    mk = with_speed(market(offers(("a", OD, 1.50), ("b", OD, 3.00))), [1.0, two])
    # 10 ref-h: one GPU 15 + .3 = $15.30; two 3/1.9 · 10 = 15.79 + .6 = $16.39
    finish = risk.expected_cost_to_finish(job(), mk.price_usd_per_hour,
                                          risk.effective_price(job(), mk))[0]
    assert finish == pytest.approx([15.30, 30 / 1.9 + 0.6])
    assert decide_placement(job(), mk).offer[0] == 0
    # 6 h to the deadline: one GPU needs 10.2 h, two 10/1.9 + .2 = 5.46 h; slack
    # 6 - 5.46 = .54 h is under the end-game reserve 2 · 2 · .2 · (5.26/3) + .25 = 1.65 h
    placed = decide_placement(job(time_to_deadline_h=6.0), mk)
    assert placed.offer[0] == 1 and placed.reason[0] == Reason.ON_DEMAND_NEEDED


def test_a_job_whose_on_demand_gpu_turns_out_too_slow_moves_to_a_fast_one():
    # 6 ref-h left, 11 h to the deadline, on the slow on-demand (speed .5: 12 h > 11): the
    # fast on-demand needs 6 + .5 = 6.5 h, in time: safety net
    on_slow = timed(11.0, remaining_compute_h=6.0, current=2, since_start_h=5.0)
    moved = should_migrate(on_slow, deadline_market())
    assert moved.target[0] == 3 and moved.reason[0] == Reason.SAFETY_NET
    # with 13 h to go the slow on-demand is in time (12 h) and the cheapest: it stays
    calm = timed(13.0, remaining_compute_h=6.0, current=2, since_start_h=5.0)
    assert should_migrate(calm, deadline_market()).reason[0] == Reason.CONTINUE


def test_too_late_on_a_slow_spot_the_job_finishes_earliest_on_the_fast_on_demand():
    # 10 ref-h, 10 h left: the slow spot needs 20 h, the fast on-demand 10.5 h: neither is in
    # time, the on-demand finishes first
    late = timed(10.0, current=0, since_start_h=5.0)
    moved = should_migrate(late, deadline_market())
    assert moved.target[0] == 3 and moved.reason[0] == Reason.DEADLINE_INFEASIBLE
    # on the fast spot (10 h) staying finishes before the on-demand (10.5 h): it stays
    stay = should_migrate(timed(10.0, current=1, since_start_h=5.0), deadline_market())
    assert stay.target[0] == 1 and stay.reason[0] == Reason.DEADLINE_INFEASIBLE


def test_speeds_per_job_on_one_shared_market():
    # A100 on-demand $1.50 and V100 on-demand $0.92. Job 0 runs on the V100 at .375 of an A100
    # (2.45 $/ref-h: the A100 wins), job 1 at .9 (1.02 $/ref-h: the V100 wins)
    shared = market(offers(("a", OD, 1.50), ("b", OD, 0.92)), n=2)
    mk = with_speed(shared, [[1.0, 0.375], [1.0, 0.9]])
    jobs = JobView.build(2, compute_h=10.0, remaining_compute_h=10.0, restart_overhead_h=0.2)
    assert list(decide_placement(jobs, mk).offer) == [0, 1]
    assert shared.speed.size == 0


NEVER = 1e12   # a spot offer that is never reclaimed: no inflation


def running(**kw) -> JobView:
    return job(current=0, since_start_h=5.0, **kw)


def test_a_move_to_a_faster_per_dollar_offer_that_pays():
    # on a V100 on-demand .92/.375 = 2.4533 $/ref-h, an A100 on-demand costs 1.50:
    # saving (2.4533 - 1.50) · 10 ref-h = $9.53 > 1.5 × (.2 h · 1.50) = $0.45
    mk = with_speed(market(offers(("a", OD, 0.92), ("b", OD, 1.50))), [0.375, 1.0])
    moved = should_migrate(running(), mk)
    assert moved.move[0] and moved.target[0] == 1 and moved.reason[0] == Reason.MIGRATE_PRICE
    assert moved.saving_usd[0] == pytest.approx((0.92 / 0.375 - 1.50) * 10)
    assert moved.move_cost_usd[0] == pytest.approx(0.30)
    # by price per hour the A100 is dearer: no move
    assert not should_migrate(running(), with_speed(mk, None)).move[0]


def test_a_faster_per_dollar_offer_that_does_not_pay_for_its_move():
    # from one A100 at 1.50 $/ref-h to 2 × A100 at 2.80/1.9 = 1.4737: saving
    # .0263 · 10 = $0.263 < 1.5 × (.2 h · 2.80) = $0.84
    mk = with_speed(market(offers(("a", OD, 1.50), ("b", OD, 2.80))), [1.0, 1.9])
    stay = should_migrate(running(), mk)
    assert not stay.move[0] and stay.reason[0] == Reason.CONTINUE
    # 100 ref-h left: $2.63 > $0.84, the move pays
    long = should_migrate(running(remaining_compute_h=100.0), mk)
    assert long.move[0] and long.target[0] == 1
    assert long.saving_usd[0] == pytest.approx((1.50 - 2.80 / 1.9) * 100)
    assert long.move_cost_usd[0] == pytest.approx(0.56)


def test_a_spot_target_carries_only_its_expected_run_at_its_speed():
    # V100 on-demand (2.4533 $/ref-h) → RTX 4090 spot, mean_up 2 h: .30/.9/.61 = .5464 $/ref-h.
    # The run left after the .2 h overhead is 2²/2.2 = 1.818 h, × .61 = 1.109 ref-h carried:
    # saving (2.4533 - .5464) · 1.109 = $2.115. Move cost .2 · .30 = .06, plus the relaunch
    # back (10/.61 = 16.4 h of work > 2 h of run: certain) .2 · .92 = .184: $0.244
    mk = with_speed(market(offers(("a", OD, 0.92), ("b", SPOT, 0.30)), mean_up_h=2.0),
                    [0.375, 0.61])
    moved = should_migrate(running(), mk)
    carried = 4 / 2.2 * 0.61
    assert moved.saving_usd[0] == pytest.approx((0.92 / 0.375 - 0.30 / 0.9 / 0.61) * carried)
    assert moved.move_cost_usd[0] == pytest.approx(0.06 + 0.184)
    assert moved.target[0] == 1 and moved.reason[0] == Reason.MIGRATE_TO_SPOT


def test_speeds_of_one_decide_exactly_as_no_speeds():
    rng = np.random.default_rng(7)
    models = offers(*[("abc"[i % 3], SPOT if i % 2 else OD, float(p))
                      for i, p in enumerate(rng.uniform(0.5, 3.0, 8))])
    n = 200
    mk = market(models, available=rng.random((n, 8)) < 0.7, mean_up_h=rng.uniform(0.5, 5, 8),
                up_age_h=rng.uniform(0, 3, 8), n=n)
    c = rng.uniform(1, 10, n)
    jobs = JobView.build(
        n, compute_h=c, remaining_compute_h=c * rng.uniform(0.1, 1, n),
        time_to_deadline_h=np.where(rng.random(n) < 0.7, c * rng.uniform(0.9, 3, n), np.inf),
        current=rng.integers(-1, 8, n), overhead_left_h=rng.uniform(0, 0.2, n),
        restart_overhead_h=0.2, decision_interval_h=0.25, checkpoint_interval_h=0.5,
        checkpoint_age_h=rng.uniform(0, 0.5, n), since_start_h=rng.uniform(0, 8, n))
    plain, ones = decide(jobs, mk), decide(jobs, with_speed(mk, np.ones(8)))
    np.testing.assert_array_equal(plain.offer, ones.offer)
    np.testing.assert_array_equal(plain.reason, ones.reason)


def _simulate(seed: int, n: int = 64, ticks: int = 200):
    """Replay ``n`` deadline jobs on a heterogeneous market whose spot capacity comes and goes
    at random; reclaims lose the progress since the last checkpoint (every .5 h on the
    instance), moves too. Returns (finish hour, deadline hour) per job and the hours run on
    each offer."""
    rng = np.random.default_rng(seed)
    rows = (("a", SPOT, 0.40), ("b", SPOT, 1.20), ("c", SPOT, 0.30),
            ("a", OD, 0.60), ("b", OD, 2.00), ("c", OD, 3.60))
    speed = np.array([0.5, 1.0, 0.61, 0.5, 1.0, 1.9])
    g, d, tau = 0.25, 0.2, 0.5
    c0 = rng.uniform(2.0, 8.0, n)
    deadline_h = c0 / 1.9 + d + rng.uniform(0.0, 6.0, n)     # the 2-GPU on-demand is in time
    rem, current = c0.copy(), np.full(n, NO_OFFER)
    owed, age, since = np.zeros(n), np.zeros(n), np.full(n, np.inf)
    finish, used = np.full(n, np.inf), np.zeros(len(rows))
    up = rng.random((n, 3)) < 0.6
    rows_i = np.arange(n)
    for tick in range(ticks):
        t = tick * g
        flip = rng.random((n, 3)) < np.where(up, 0.15, 0.3)
        up = up ^ flip
        available = np.concatenate([up, np.ones((n, 3), bool)], axis=1)
        live = np.isinf(finish)
        on = current != NO_OFFER
        reclaimed = live & on & ~available[rows_i, np.maximum(current, 0)]
        rem = rem + np.where(reclaimed, age * speed[np.maximum(current, 0)], 0.0)
        current = np.where(reclaimed, NO_OFFER, current)
        jobs = JobView.build(n, compute_h=c0, remaining_compute_h=np.maximum(rem, 0.0),
                             time_to_deadline_h=deadline_h - t, current=current,
                             overhead_left_h=owed, restart_overhead_h=d, decision_interval_h=g,
                             checkpoint_interval_h=tau, checkpoint_age_h=age, since_start_h=since)
        mk = with_speed(market(offers(*rows), available=available, mean_up_h=1.5, n=n), speed)
        new = np.where(live, decide(jobs, mk).offer, current)
        changed = live & (new != current)
        moved = changed & (current != NO_OFFER)
        rem = rem + np.where(moved, age * speed[np.maximum(current, 0)], 0.0)
        current = new
        owed = np.where(changed, d, owed)
        age = np.where(changed, 0.0, age)
        since = np.where(changed, 0.0, since)
        run = live & (current != NO_OFFER)
        s = speed[np.maximum(current, 0)]
        p = np.where(run, np.maximum(0.0, g - owed), 0.0)
        np.add.at(used, current[run], g)
        done = run & (p * s >= rem)
        finish = np.where(done, t + np.minimum(owed, g) + rem / s, finish)
        rem = np.where(run, rem - p * s, rem)
        age = np.mod(age + p, tau)
        owed = np.maximum(0.0, owed - g)
        since = since + g
    return finish, deadline_h, used


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_safety_net_never_misses_a_deadline_feasible_at_submission(seed):
    finish, deadline_h, used = _simulate(seed)
    assert np.isfinite(finish).all()
    assert (finish <= deadline_h + 1e-6).all(), np.flatnonzero(finish > deadline_h + 1e-6)
    # the jobs ran on spot and on GPUs slower than the 2-GPU on-demand, and some finished
    # close to their deadline: the safety net was needed
    assert used[:3].sum() > 0 and used[3:5].sum() > 0
    assert (finish > deadline_h - 0.3).any()


def test_daemon_attaches_a_jobs_speeds_without_copying_the_view():
    models = [offer(gpu_model="V100", price_usd_per_hour=0.92),
              offer(gpu_model="A100-80GB", market="on-demand", price_usd_per_hour=1.50,
                    interruption_risk=0.0),
              offer(gpu_model="A100-80GB", gpu_count=2, market="on-demand",
                    price_usd_per_hour=3.00, interruption_risk=0.0)]
    table, mk = market_view(models, np.ones((1, 3), bool))
    # declared: 375 and 1,000 samples an hour on one V100 / A100 → speeds .375, 1, 1.9
    model = WorkModel(declared={"v100": 375.0, "a100-80gb": 1000.0})
    speed, rates, ref = offer_speeds(model, table, [])
    assert ref == pytest.approx(1000.0)
    assert speed == pytest.approx([0.375, 1.0, 1.9])
    assert rates.source == ("declared",) * 3
    job_mk = with_speed(mk, speed)
    assert job_mk.available is mk.available and mk.speed.size == 0
    with pytest.raises(ValueError):
        with_speed(mk, [1.0, 2.0])
    # a measured rate on the V100 replaces the declaration there
    speed, rates, _ = offer_speeds(model, table, [Measurement("V100", 1, 500.0, hours=50.0)])
    assert rates.source[0] == "measured" and speed[0] == pytest.approx(0.5, rel=0.05)


def test_an_offer_without_a_usable_speed_is_never_chosen():
    mk = with_speed(market(offers(("a", OD, 0.10), ("b", OD, 1.50))), [0.0, 1.0])
    assert np.isinf(risk.effective_price(job(), mk)[0, 0])
    assert decide_placement(job(), mk).offer[0] == 1
    assert decide_placement(job(), with_speed(mk, [np.nan, 1.0])).offer[0] == 1
    assert PolicyConfig().migration_margin == 0.5     # the 1.5 × of the migration comments
