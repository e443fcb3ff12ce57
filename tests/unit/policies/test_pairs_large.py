"""Pairs on masks the size of a real placement (the chunked search of policies.pairs
takes over from numpy's from 262,144 cells): the same pairs as numpy's one-pass search and the
row-major layout Pairs documents, and eligibility on a catalog that large as the reference."""

from __future__ import annotations

import numpy as np
import pytest

from policies import decisions, eligibility, pairs
from policies.eligibility import eligible_matrix
from policies.pairs import Pairs
from policies.views import OfferTable
from tests.unit.policies import random_instances as ri
from tests.unit.policies import reference_eligibility as ref


def _mask(rng: np.random.Generator, n: int, m: int, density: float) -> np.ndarray:
    """Rows alike but not equal, as eligibility gives: a shared column pattern, some rows
    emptied and some filled."""
    mask = (rng.random(m) < density * 2)[None, :] & (rng.random((n, m)) < 0.5)
    mask[rng.random(n) < 0.1] = False
    mask[rng.random(n) < 0.02] = True
    return mask


@pytest.mark.parametrize("density", [0.0, 0.001, 0.04, 0.09, 0.3, 0.5])
@pytest.mark.parametrize("shape", [(600, 1000), (301, 997), (1, 300003), (300, 1)])
def test_flatnonzero_is_numpys(density, shape):
    rng = np.random.default_rng(int(density * 1000) + shape[1])
    mask = _mask(rng, *shape, density)
    got = pairs.flatnonzero(mask)
    want = np.flatnonzero(mask)
    assert got.dtype == want.dtype and np.array_equal(got, want)
    # not C-contiguous, or not bool: numpy's own search
    assert np.array_equal(pairs.flatnonzero(mask[:, ::2]), np.flatnonzero(mask[:, ::2]))
    assert np.array_equal(pairs.flatnonzero(mask.view(np.uint8)), want)


def test_flatnonzero_counts_any_nonzero_byte():
    rng = np.random.default_rng(1)
    size = 1 << 19
    raw = (rng.random(size) < 0.05).astype(np.uint8) * rng.integers(1, 255, size, dtype=np.uint8)
    mask = raw.view(np.bool_)
    assert np.array_equal(pairs.flatnonzero(mask), np.flatnonzero(raw))


@pytest.mark.parametrize("density", [0.0, 0.04, 0.3])
def test_pairs_of_a_large_mask_is_row_major(density):
    rng = np.random.default_rng(7)
    n, m = 400, 1201
    mask = _mask(rng, n, m, density)
    pr = Pairs.of(mask)
    rows, cols = np.nonzero(mask)
    assert np.array_equal(pr.rows, rows) and np.array_equal(pr.cols, cols)
    assert np.array_equal(pr.flat, rows * m + cols)
    assert (pr.n, pr.m) == (n, m)
    ids = np.flatnonzero(mask.any(axis=1))
    assert np.array_equal(pr.ids, ids)
    assert np.array_equal(pr.lengths, mask.sum(axis=1)[ids])
    assert np.array_equal(pr.starts, np.searchsorted(rows, ids))
    assert np.array_equal(pr.any(None), mask.any(axis=1))
    values = rng.random(len(pr.rows))
    idx, best = pr.pick(values, None, lambda: np.arange(m))
    dense = np.full((n, m), np.inf)
    dense[rows, cols] = values
    assert np.array_equal(best, dense.min(axis=1))
    has = mask.any(axis=1)
    assert np.array_equal(idx[has], dense.argmin(axis=1)[has]) and (idx[~has] == -1).all()


def test_eligibility_on_a_large_catalog_is_the_reference():
    rng = np.random.default_rng(11)
    offers = ri.offers(rng, 3000)
    table = OfferTable.from_offers(offers)
    prices = np.array([o.price_usd_per_hour for o in offers])
    prices[rng.random(len(prices)) < 0.01] = np.nan
    specs = ri.specs(rng, 300)
    unavailable = rng.random(len(offers)) < 0.1
    # every job its own combination (rows combined in place), and combinations shared
    distinct = list({eligibility._part_keys(spec): spec for spec in specs}.values())
    for some in (distinct, specs + specs[:100]):
        for off in (None, unavailable):
            got = eligible_matrix(some, table, prices, off)
            assert got.shape == (len(some), 3000) and 0 < got.mean() < 1
            assert np.array_equal(got, ref.eligible_matrix(some, table, prices, off))


@pytest.mark.parametrize("seed", range(12))
def test_picks_are_the_dense_picks(seed):
    """pick, deadline_pick and any on pairs against decisions' dense versions, with near-ties,
    nan costs, unusable speeds and jobs late everywhere."""
    rng = np.random.default_rng(seed)
    n, m = int(rng.choice([1, 30, 300])), int(rng.choice([1, 7, 900]))
    mask = _mask(rng, n, m, float(rng.choice([0.05, 0.4])))
    pr = Pairs.of(mask)
    p = len(pr.rows)
    finish = rng.choice([1.0, 1.0 + 1e-12, 2.0, 3.0, np.nan], p, p=[0.3, 0.2, 0.2, 0.29, 0.01])
    speed = rng.choice([0.5, 1.0, 2.0, 0.0, -1.0, np.nan], p, p=[0.3, 0.3, 0.3, 0.04, 0.03, 0.03])
    in_time = rng.random(p) < 0.3
    remaining = rng.uniform(1.0, 10.0, n)
    rank = rng.permutation(m)
    sel = rng.random(p) < 0.6

    def dense(values, fill):
        out = np.full((n, m), fill, dtype=np.asarray(values).dtype)
        out[pr.rows, pr.cols] = values
        return out

    for s in (None, sel):
        mask_s = mask if s is None else dense(s, False)
        got = pr.pick(finish, s, lambda: rank)
        want = decisions._pick(dense(finish, 0.0), mask_s, rank)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1], equal_nan=True)
        assert np.array_equal(pr.any(s), mask_s.any(axis=1))
        got = pr.deadline_pick(remaining, finish, speed, in_time, s, lambda: rank)
        want = decisions._deadline_pick(remaining, dense(finish, 0.0), dense(speed, 1.0),
                                        dense(in_time, False), mask_s, rank)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1], equal_nan=True)
