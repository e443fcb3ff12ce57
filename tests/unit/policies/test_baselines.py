import numpy as np
import pytest

from policies import baselines
from policies.views import NO_OFFER, JobView, Reason, with_speed
from tests.unit.policies.views_builder import OD, SPOT, market, offers

MODELS = offers(("a", SPOT, 1.0), ("a", OD, 3.0))
UP = market(MODELS)
DOWN = market(MODELS, available=[False, True])


def job(r, c=10.0, **kw):
    return JobView.build(1, compute_h=48.0, remaining_compute_h=c, time_to_deadline_h=r,
                         restart_overhead_h=0.5, decision_interval_h=0.25, **kw)


def test_on_demand_always():
    assert baselines.on_demand(job(40.0), UP).offer[0] == 1
    assert baselines.on_demand(job(40.0, current=1), UP).reason[0] == Reason.CONTINUE
    assert baselines.on_demand(job(40.0), market([])).offer[0] == NO_OFFER


def test_greedy_spot_else_wait_else_forced_on_demand():
    assert baselines.greedy(job(40.0), UP).offer[0] == 0
    assert baselines.greedy(job(40.0), DOWN).offer[0] == NO_OFFER
    assert baselines.greedy(job(10.7), DOWN).offer[0] == 1          # 10.45 < 10 + .5
    # once on on-demand with no slack left it stays, even if spot comes back
    assert baselines.greedy(job(10.6, current=1), UP).offer[0] == 1


@pytest.mark.parametrize("policy", [baselines.uniform_progress,
                                    baselines.uniform_progress_no_condition2])
def test_uniform_progress_rules(policy):
    # elapsed 24 h of a 48 h job with deadline 72 h: the line is at 48 · 24/72 = 16 h done
    behind = job(48.0, c=40.0, elapsed_h=24.0)                       # 8 h done < 16
    ahead = job(48.0, c=30.0, elapsed_h=24.0)                        # 18 h done >= 16
    assert policy(behind, DOWN).offer[0] == 1    # rule 1
    assert policy(ahead, DOWN).offer[0] == NO_OFFER
    assert policy(behind, UP).offer[0] == 0      # rule 2: take the risk
    # rule 3: an on-demand instance is kept while there is no spot, even when ahead...
    assert policy(job(48.0, c=30.0, elapsed_h=24.0, current=1), DOWN).offer[0] == 1
    # ...and left for spot when ahead of C·(t + 2d)/R = 48 · 25/72 = 16.67 h (18 h done)
    assert policy(job(48.0, c=30.0, elapsed_h=24.0, current=1), UP).offer[0] == 0
    # rule 4: c + 2d = 11 h of work against 10.75 h left (ticks of .25 h) → on-demand
    net = policy(job(10.9, c=10.0, elapsed_h=37.1), UP)
    assert net.offer[0] == 1 and net.reason[0] == Reason.SAFETY_NET
    # ...but a warm spot instance is kept until reclaimed while c + d still fits
    keep = policy(job(10.9, c=10.0, elapsed_h=37.1, current=0), UP)
    assert keep.offer[0] == 0 and keep.reason[0] == Reason.CONTINUE
    # c + d = 10.5 h against 10.5 h left: a spot instance still paying its overhead goes
    # to on-demand
    cold = job(10.5, c=10.0, elapsed_h=37.5, current=0, overhead_left_h=0.3)
    assert policy(cold, UP).offer[0] == 1


def test_uniform_progress_hysteresis_keeps_on_demand_until_ahead_of_t_plus_2d():
    # 16.5 h done at t = 24 h: ahead of C·t/R = 16 h but not of C·(t + 2d)/R = 16.67 h
    on_od = job(48.0, c=31.5, elapsed_h=24.0, current=1)
    kept = baselines.uniform_progress(on_od, UP)
    assert kept.offer[0] == 1 and kept.reason[0] == Reason.CONTINUE
    # the authors' "no condition 2" variant leaves on-demand as soon as spot is there
    assert baselines.uniform_progress_no_condition2(on_od, UP).offer[0] == 0
    # exactly on the line C·(t + 2d)/R (the authors' condition2 >= 0): still kept
    assert baselines.uniform_progress(job(48.0, c=48 - 48 * 25 / 72, elapsed_h=24.0,
                                          current=1), UP).offer[0] == 1
    # an idle job ahead of C·t/R takes spot: the hysteresis is for on-demand instances only
    assert baselines.uniform_progress(job(48.0, c=31.5, elapsed_h=24.0), UP).offer[0] == 0


def test_skypilot_failover_vs_eager_next_region():
    models = offers(("a", SPOT, 1.0), ("b", SPOT, 1.2))
    mk = market(models)
    lost_a = JobView.build(1, last_preempted_zone=0, since_preemption_h=0.0)
    assert baselines.skypilot(lost_a, mk, "failover").offer[0] == 0   # same zone first
    assert baselines.skypilot(lost_a, mk, "eager").offer[0] == 1      # anywhere else first
    assert baselines.skypilot(JobView.build(1), market(models, available=[False, False])
                              ).offer[0] == NO_OFFER                 # keeps retrying, no OD
    od = market(offers(("a", SPOT, 1.0), ("a", OD, 3.0)), available=[False, True])
    assert baselines.skypilot(JobView.build(1), od, od_fallback=True).offer[0] == 1
    with pytest.raises(ValueError):
        baselines.skypilot(JobView.build(1), mk, "random")
    assert baselines.skypilot(JobView.build(1, current=1), mk).offer[0] == 1
    assert np.all(baselines.skypilot(JobView.build(1), mk).offer >= 0)


def test_baselines_choose_by_price_but_time_the_deadline_at_the_offers_speed():
    # the on-demand offer runs at half the reference speed: 10 ref-h take 20 h there
    slow = with_speed(market(MODELS, available=[False, True]), [1.0, 0.5])
    # 25 h left: slack 25 - 20 = 5; waiting a tick keeps 4.75 >= d = .5
    assert baselines.greedy(job(25.0), slow).offer[0] == NO_OFFER
    # 20.6 h left: 20.35 < 20 + .5, on-demand now (at speed 1 it would still wait: 10.35 h)
    assert baselines.greedy(job(20.6), slow).offer[0] == 1
    assert baselines.greedy(job(20.6), DOWN).offer[0] == NO_OFFER
    # on a warm spot instance with 20.4 h left (slack .4): a tick on a spot twice as fast as
    # the on-demand is worth .5 h of it, .4 - .25 + .5 = .65 >= d, keep spot; on a spot as
    # slow as the on-demand .4 - .25 + .25 = .4 < .5, on-demand
    warm = job(20.4, current=0, since_start_h=1.0)
    assert baselines.greedy(warm, with_speed(UP, [1.0, 0.5])).offer[0] == 0
    assert baselines.greedy(warm, with_speed(UP, [0.5, 0.5])).offer[0] == 1
    # Uniform Progress's safety net: ceil(20 + .5) = 20.5 >= floor(20.6) = 20.5: on-demand
    assert baselines.uniform_progress(job(20.6), slow).reason[0] == Reason.SAFETY_NET
    assert baselines.uniform_progress(job(20.6), DOWN).reason[0] != Reason.SAFETY_NET
    # the choice stays "cheapest $/h": speeds do not change which offer is launched
    assert baselines.on_demand(job(40.0), slow).offer[0] == 1
