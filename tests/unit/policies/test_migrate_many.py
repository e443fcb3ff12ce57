"""should_migrate_many: the same decisions, bit for bit, as one should_migrate call per pair."""

from __future__ import annotations

import numpy as np
import pytest

from policies.decisions import PolicyConfig, should_migrate, should_migrate_many
from policies.views import JobView, MarketView, OfferTable
from tests.unit.policies import random_instances as ri


def _row(view, i: int):
    return type(view)(**{k: (v[i:i + 1] if isinstance(v, np.ndarray) and v.ndim == 1 else v)
                         for k, v in view.__dict__.items()})


def _pairs(seed: int) -> list[tuple[JobView, MarketView]]:
    """Per-job views as the daemon builds them: one row each, its own available row, pool
    stats and speeds, against equal (sometimes equal but distinct) copies of one market."""
    rng = np.random.default_rng(seed)
    m = int(rng.choice([1, 3, 12, 40]))
    models = ri.offers(rng, m)
    table = OfferTable.from_offers(models)
    prices = np.array([o.price_usd_per_hour for o in models])
    n = int(rng.integers(1, 30))
    speed = str(rng.choice(["none", "shared", "per_job"]))
    market = ri.market(rng, table, prices, n, speed=speed, correlation=rng.random() < 0.5,
                       density=float(rng.choice([0.2, 0.7, 1.0])))
    jobs = ri.jobs(rng, n, m, running=0.9, zones=len(table.zone_names))
    pairs = []
    for i in range(n):
        speed_i = market.speed if np.ndim(market.speed) < 2 else market.speed[i]
        view = MarketView(**{**market.__dict__, "available": market.available[i:i + 1],
                             "pool_stats": _row(market.pool_stats, i), "speed": speed_i})
        if rng.random() < 0.3:   # an equal market built anew (another table object)
            copy = OfferTable.from_offers(models)
            view = MarketView(**{**view.__dict__, "offers": copy,
                                 "price_usd_per_hour": prices.copy()})
        if rng.random() < 0.1:   # a market of its own: other prices
            view = MarketView(**{**view.__dict__, "price_usd_per_hour": prices * 1.5})
        pairs.append((_row(jobs, i), view))
    return pairs


def _assert_same(a, b) -> None:
    for name in ("move", "target", "reason", "saving_usd", "move_cost_usd"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.shape == y.shape and x.dtype == y.dtype, name
        assert x.tobytes() == y.tobytes(), (name, x, y)


@pytest.mark.parametrize("seed", range(60))
def test_many_is_one_call_per_pair(seed):
    pairs = _pairs(seed)
    cfg = PolicyConfig() if seed % 3 else PolicyConfig(same_zone_strict=True, min_dwell_h=0.0)
    expected = [should_migrate(j, mk, cfg) for j, mk in pairs]
    for max_rows in (1, 4, 256):
        got = should_migrate_many(pairs, cfg, max_rows=max_rows)
        assert len(got) == len(expected)
        for a, b in zip(got, expected):
            _assert_same(a, b)


def test_many_decides_some_moves():
    """The instances exercise the interesting branches (not only "continue")."""
    reasons = set()
    for seed in range(60):
        for d in should_migrate_many(_pairs(seed)):
            reasons.update(int(r) for r in d.reason)
    assert len(reasons) >= 4


def test_many_of_nothing_and_of_empty_markets():
    assert should_migrate_many([]) == []
    rng = np.random.default_rng(1)
    empty = OfferTable.from_offers([])
    market = ri.market(rng, empty, np.zeros(0), 1)
    jobs = ri.jobs(rng, 1, 0)
    (got,) = should_migrate_many([(jobs, market)])
    _assert_same(got, should_migrate(jobs, market))
