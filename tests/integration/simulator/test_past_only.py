"""Policies see only the past: two markets whose traces agree up to tick T and differ after
give every policy the same views, hence the same decisions, at every tick before T."""

import numpy as np
import pytest

from policies.views import NO_OFFER
from providers.replay.market import load_market
from core.models import JobSpec
from scheduler.simulator.simulate import SimJob, simulate
from scheduler.simulator.market import SimulationError, build_sim_market
from scheduler.simulator.runner import policy_registry
from tests.integration.simulator.conftest import markov_trace, write_market

T, N = 150, 320


def _markets(tmp_path, spec: JobSpec, known_before: int):
    rng = np.random.default_rng(7)
    calm = {"a": [1] * T + [1] * (N - T), "b": markov_trace(rng, N, 0.95, 0.8)}
    # same first T samples, then zone a flaps every other tick
    stormy = {"a": [1] * T + [1, 0] * ((N - T) // 2), "b": calm["b"][:T] + markov_trace(
        rng, N - T, 0.6, 0.6)}
    out = []
    for name, traces in (("calm", calm), ("stormy", stormy)):
        folder = tmp_path / name
        folder.mkdir()
        market = load_market(write_market(folder, traces))
        out.append(build_sim_market(market, spec, N, known_before_tick=known_before))
    return out


def _recorded(policy, market, job, starts):
    """Every decision of an unfinished run as (run, absolute tick, offer key) plus what the
    policy was shown, for the ticks before T."""
    seen = []

    def spy(jobs, view):
        decision = policy(jobs, view)
        i = int(round(float(jobs.elapsed_h[0]) / market.tick_h))
        for run in np.flatnonzero((starts + i < T) & (jobs.remaining_compute_h > 1e-9)):
            offer = int(decision.offer[run])
            shown = (view.offers.keys, tuple(view.offers.interruption_risk),
                     tuple(np.atleast_2d(view.available)[run]),
                     tuple(np.atleast_2d(view.price_usd_per_hour)[run]),
                     *(tuple(np.atleast_2d(getattr(view.offer_stats, f))[run])
                       for f in ("up_age_h", "down_age_h", "mean_up_h", "mean_down_h", "frac")),
                     *(float(getattr(view.pool_stats, f)[run])
                       for f in ("up_age_h", "mean_up_h", "mean_down_h", "frac")))
            seen.append((int(run), int(starts[run] + i),
                         "none" if offer == NO_OFFER else view.offers.keys[offer], shown))
        return decision

    simulate(spy, market, job, starts, max_ticks=N - int(starts.max()))
    return seen


@pytest.mark.parametrize("spec", [
    JobSpec(name="t", command="true"),
    # a risk limit is judged on the history before the first start, not on the whole trace
    JobSpec(name="t", command="true", max_interruption_risk=0.5),
], ids=["plain", "max-risk"])
def test_identical_past_identical_decisions(tmp_path, spec):
    starts = np.array([40, 60, 90, 120, 140])
    calm, stormy = _markets(tmp_path, spec, known_before=int(starts.min()))
    job = SimJob(6.0, 9.0, 0.2)
    for name in ("arbiter", "greedy", "uniform-progress", "uniform-progress-no-condition2",
                 "skypilot-eager"):
        policy = policy_registry()[name]
        a, b = _recorded(policy, calm, job, starts), _recorded(policy, stormy, job, starts)
        assert a, name
        assert a == b, name


def test_interruption_risk_comes_from_the_history_before_the_first_start(tmp_path):
    trace = [1] * 100 + [0] + [1] * 8999      # one drop, at tick 100 (600 s ticks)
    write_market(tmp_path, {"a": trace})
    replay = load_market(tmp_path / "market.yaml")
    spec = JobSpec(name="t", command="true")

    def risk(before: int) -> float:
        table = build_sim_market(replay, spec, 9100, known_before_tick=before).table
        return float(table.interruption_risk[list(table.is_spot).index(True)])

    assert risk(0) == 0.0 and risk(100) == 0.0     # nothing known / no drop yet
    assert risk(4320) == pytest.approx(1.0)       # 1 drop in 30 days
    assert risk(8640) == pytest.approx(0.5)       # 1 drop in 60 days
    # the whole trace (what the replay provider reports) would say 1 drop in 9100 ticks
    assert replay.offers[0].spot_risk() == pytest.approx(4320 / 9100)


def test_a_run_before_the_known_history_is_refused(tmp_path):
    write_market(tmp_path, {"a": [1] * 50})
    market = build_sim_market(load_market(tmp_path / "market.yaml"),
                              JobSpec(name="t", command="true"), 50, known_before_tick=20)
    with pytest.raises(SimulationError, match="before tick 20"):
        simulate(policy_registry()["greedy"], market, SimJob(1.0, 2.0), np.array([10, 30]),
                 max_ticks=15)
