"""Per-offer speeds in the simulator: progress at dt × speed, the same speed for the policy,
and the heterogeneous benchmark's comparison on a market small enough to work out by hand."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from benchmarks.heterogeneous.run import JobType, run_job
from core.models import JobSpec
from policies import baselines
from policies.gpu_table import gpu_spec
from providers.replay.market import ReplayMarket, ReplayOffer, load_market
from scheduler.simulator.anchors import cheapest_per_hour
from scheduler.simulator.market import SimulationError, build_sim_market
from scheduler.simulator.runner import CHEAPEST_PER_HOUR, OURS, compare
from scheduler.simulator.simulate import SimJob, simulate
from tests.integration.simulator.conftest import write_market

TICK = 1 / 6


def _market(tmp_path, speeds, trace=(1,) * 60, **kw):
    """Zone ``a``: on-demand $3/h (offer 0) and spot $1/h (offer 1), the given speeds (``kw``:
    :func:`write_market`'s)."""
    path = write_market(tmp_path, {"a": list(trace)}, **kw)
    return build_sim_market(load_market(path), JobSpec(name="t", command="true"), len(trace),
                            speed=lambda offers: np.array(speeds, dtype=float))


def test_progress_advances_at_the_offers_speed(tmp_path):
    market = _market(tmp_path, [0.5, 2.0])
    # on-demand at half speed: one tick of overhead, then 0.5 reference-hours take 1 h
    r = simulate(baselines.on_demand, market, SimJob(0.5, None, TICK), np.array([0]), max_ticks=60)
    assert r.finish_h[0] == pytest.approx(TICK + 1.0)
    assert r.cost_usd[0] == pytest.approx(3.0 * (TICK + 1.0))
    # spot at double speed: 0.5 reference-hours take 0.25 h after the overhead
    spot = simulate(cheapest_per_hour, market, SimJob(0.5, None, TICK), np.array([0]),
                    max_ticks=60)
    assert spot.finish_h[0] == pytest.approx(TICK + 0.25)
    assert spot.cost_usd[0] == pytest.approx(1.0 * (TICK + 0.25))


def test_speeds_of_one_change_nothing(tmp_path, sim_market):
    plain = sim_market({"a": [1, 1, 0, 0, 1, 1] * 10})
    ones = _market(tmp_path, [1.0, 1.0], [1, 1, 0, 0, 1, 1] * 10)
    job = SimJob(2.0, 4.0, TICK)
    for name in ("arbiter", "greedy", "cheapest-per-hour"):
        a = compare(plain, job, np.array([0, 5]), [name], 40, with_optimum=False)
        b = compare(ones, job, np.array([0, 5]), [name], 40, with_optimum=False)
        assert a.results[name].cost_usd == pytest.approx(b.results[name].cost_usd), name
        assert a.results[name].finish_h == pytest.approx(b.results[name].finish_h), name


def test_optimum_skipped_with_a_note_where_speeds_differ(tmp_path):
    comp = compare(_market(tmp_path, [0.5, 2.0]), SimJob(0.5, None, TICK), np.array([0]),
                   ["arbiter"], 30)
    assert comp.optimum_usd is None
    assert any("different speeds" in note for note in comp.notes), comp.notes


def test_bad_speeds_are_refused(tmp_path):
    with pytest.raises(SimulationError, match="finite and > 0"):
        _market(tmp_path, [0.0, 1.0])


def test_periodic_checkpoints_are_clock_hours_on_the_instance(tmp_path):
    # spot ($1/h, speed 2, reclaimed without notice) for the first hour, then only on-demand
    # ($3/h, speed 0.5)
    market = _market(tmp_path, [0.5, 2.0], [1] * 6 + [0] * 54, notices={"a": "{style: none}"})
    job = SimJob(2.0, None, TICK, checkpoint_interval_h=0.3)
    ages = []

    def policy(jobs, view):
        ages.append(float(jobs.checkpoint_age_h[0]))
        return cheapest_per_hour(jobs, view)

    r = simulate(policy, market, job, np.array([0]), max_ticks=60)
    # tick 0 pays the overhead on spot, ticks 1-5 work 5/6 h there: checkpoints after 0.3 h
    # and 0.6 h of work (0.6 and 1.2 reference-hours); the policy saw the clock age
    assert ages[5] == pytest.approx(4 / 6 - 0.6)
    # the reclaim at 1 h loses (5/6 - 0.6) h x 2 = 0.47 reference-hours: 2 - 1.2 = 0.8 are
    # left, 1.6 h on-demand after its overhead (counted in reference-hours, the checkpoint
    # would have been at 1.5 and 0.5 left)
    assert r.preemptions[0] == 1
    assert r.finish_h[0] == pytest.approx(1.0 + TICK + 0.8 / 0.5)
    assert r.cost_usd[0] == pytest.approx(1.0 * 1.0 + 3.0 * (TICK + 0.8 / 0.5))


def _offer(itype: str, gpu: str, price: float) -> ReplayOffer:
    return ReplayOffer(provider="hand", instance_type=itype, gpu_model=gpu, gpu_count=1,
                       vram_gib=24, vcpus=8, memory_gib=32, region="r", zone="r",
                       on_demand_price_usd_per_hour=price, spot_prices=None)


def test_benchmark_prefers_the_cheaper_offer_to_finish(tmp_path):
    # T4 $0.30/h is the cheapest per hour but does 0.15 or so of an A100-80GB's work: per
    # reference-hour $0.30 / 0.15 = $2, the RTX 4090 $0.50 / 0.74 = $0.68, the A100 $2.00
    replay = ReplayMarket(name="hand", path=Path(tmp_path), time_scale=1.0, notice_seconds=120,
                          start_offset_hours=0.0, offers=[
                              _offer("t4", "T4", 0.30), _offer("4090", "RTX4090", 0.50),
                              _offer("a100", "A100-80GB", 2.00)])
    job = JobType("hand", "transformer", 16, 2.0)
    res = run_job(replay, job, np.array([1, 3]), 6 * 20)
    speed = {g: gpu_spec(g).relative("transformer") for g in ("T4", "RTX4090")}
    assert speed["T4"] < 0.3 < speed["RTX4090"]          # the table's premise for the sums
    ours, anchor = res["rows"][OURS], res["rows"][CHEAPEST_PER_HOUR]
    # both pay the 0.2 h restart overhead, then the work at the offer's speed
    assert anchor["cost_usd"] == pytest.approx(0.30 * (0.2 + 2.0 / speed["T4"]))
    assert ours["cost_usd"] == pytest.approx(0.50 * (0.2 + 2.0 / speed["RTX4090"]))
    assert ours["cost_usd"] < anchor["cost_usd"]
    assert ours["finish_h"] < anchor["finish_h"]


def test_speeds_from_the_market_file_and_from_the_spec(tmp_path):
    (tmp_path / "m.yaml").write_text(
        "name: m\noffers:\n"
        "  - {provider: aws, region: r, zone: a, instance_type: slow, gpu_model: T4, gpu_count: 1,"
        " vram_gib: 16, vcpus: 4, memory_gib: 16, on_demand_price_usd_per_hour: 1, speed: 0.5}\n"
        "  - {provider: aws, region: r, zone: a, instance_type: fast, gpu_model: RTX4090,"
        " gpu_count: 2, vram_gib: 24, vcpus: 8, memory_gib: 32, on_demand_price_usd_per_hour: 2}\n")
    replay = load_market(tmp_path / "m.yaml")
    plain = JobSpec(name="t", command="true")
    # the replayed world's own factors win: that is how fast jobs run there
    assert build_sim_market(replay, plain, 4).speed.tolist() == [0.5, 1.0]
    for offer in replay.offers:
        offer.speed = 1.0
    assert build_sim_market(replay, plain, 4).speed is None
    # a spec with work: the GPU table's prior, a 2-GPU offer at 1 + 0.8 GPUs
    spec = JobSpec(name="t", command="true",
                   work={"workload": "transformer", "scaling_efficiency": 0.8})
    t4, rtx = (gpu_spec(g).relative("transformer") for g in ("T4", "RTX4090"))
    assert build_sim_market(replay, spec, 4).speed == pytest.approx([t4, rtx * 1.8])
