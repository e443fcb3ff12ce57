"""decide_placement on the candidate pairs (policies.pairs) against the dense-grid reference:
the same offers and reasons, ties included, on many random instances."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from policies import decisions
from policies.decisions import PolicyConfig, decide_placement
from policies.pairs import Pairs
from policies.views import JobView, MarketView, OfferTable
from tests.unit.policies import random_instances as ri
from tests.unit.policies import reference_decisions as ref

CONFIGS = (PolicyConfig(), PolicyConfig(same_zone_strict=True, reserve_factor=0.5),
           PolicyConfig(same_zone_cooldown_h=0.0, correlation_window_h=0.0))


def _instance(seed: int):
    rng = np.random.default_rng(seed)
    m = int(rng.choice([1, 2, 5, 20, 80]))
    models = ri.offers(rng, m)
    table = OfferTable.from_offers(models)
    prices = np.array([o.price_usd_per_hour for o in models])
    n = int(rng.choice([1, 3, 25, 70]))
    speed = ("none", "shared", "per_job")[seed % 3]
    density = float(rng.choice([0.0, 0.1, 0.5, 1.0]))
    market = ri.market(rng, table, prices, n, speed=speed, correlation=rng.random() < 0.5,
                       density=density)
    if seed % 5 == 0:        # a table built without notices
        table = replace(table, interruption_notice_s=np.zeros(0))
        market = replace(market, offers=table)
    if rng.random() < 0.2:   # one availability row for every job
        market = MarketView(**{**market.__dict__, "available": market.available[0]})
    jobs = ri.jobs(rng, n, m, zones=len(table.zone_names))
    if seed % 2:   # few kinds of jobs (overheads, checkpoints, nodes): figures tabled per kind
        kind = {"restart_overhead_h": [0.1, 0.25], "checkpoint_interval_h": [0.0, 1.0],
                "final_checkpoint_s": [60.0, np.inf], "nodes": [1.0, 2.0]}
        jobs = JobView(**{**jobs.__dict__, **{k: rng.choice(v[:1 + seed % 4 // 2], n)
                                              for k, v in kind.items()}})
    return jobs, market, CONFIGS[seed % len(CONFIGS)]


@pytest.mark.parametrize("seed", range(150))
def test_same_decisions_as_the_dense_reference(seed):
    jobs, market, cfg = _instance(seed)
    assert decisions._on_pairs(jobs, market)
    got = decide_placement(jobs, market, cfg)
    want = ref.decide_placement(jobs, market, cfg)
    assert got.offer.dtype == want.offer.dtype
    assert np.array_equal(got.offer, want.offer), (got.offer, want.offer)
    assert np.array_equal(got.reason, want.reason), (got.reason, want.reason)


@pytest.mark.parametrize("seed", range(150))
def test_same_costs_at_every_candidate_pair(seed):
    """The expected cost to finish at each candidate pair is the dense grid's, bit for bit
    (whether tabled per kind of job or computed per pair)."""
    jobs, market, cfg = _instance(seed)
    idle = JobView(**{**jobs.__dict__, "current": np.full(len(jobs), -1),
                      "overhead_left_h": np.zeros(len(jobs))})
    if len(market.offers) == 0:
        return
    ctx = ref._context(idle, market, cfg)
    speed = decisions.risk.speed_of(market)
    pr = Pairs.of(decisions._candidates(idle, market, cfg, None if speed is None else speed > 0))
    got = decisions._pair_finish(idle, market, cfg, None if speed is None else pr.at(speed), pr)
    want = np.broadcast_to(ctx.finish, ctx.cand.shape)[pr.rows, pr.cols]
    assert got.tobytes() == want.tobytes()


def test_instances_cover_the_interesting_cases():
    """Placements on spot and on-demand, waits, nothing available, near-ties broken by rank."""
    reasons, tied = set(), 0
    for seed in range(150):
        jobs, market, cfg = _instance(seed)
        reasons.update(int(r) for r in decide_placement(jobs, market, cfg).reason)
        finish = market.price_usd_per_hour
        tied += int(len(finish) - len(np.unique(finish)))
    assert len(reasons) >= 6 and tied > 50


def test_zero_offers():
    rng = np.random.default_rng(5)
    table = OfferTable.from_offers([])
    market = ri.market(rng, table, np.zeros(0), 4)
    jobs = ri.jobs(rng, 4, 0)
    got, want = decide_placement(jobs, market), ref.decide_placement(jobs, market)
    assert np.array_equal(got.offer, want.offer) and np.array_equal(got.reason, want.reason)


def test_pick_breaks_near_ties_by_rank_and_skips_nan_rows():
    mask = np.array([[True, True, True], [False, False, False], [True, True, False]])
    pr = Pairs.of(mask)
    values = np.array([2.0, 1.0 + 1e-12, 1.0, 3.0, np.nan])
    idx, best = pr.pick(values, None, lambda: np.array([2, 0, 1]))
    assert idx.tolist() == [1, -1, -1]       # offers 1 and 2 tie; offer 1 ranks first
    assert best[0] == 1.0 and best[1] == np.inf and np.isnan(best[2])
