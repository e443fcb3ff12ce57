"""eligible_matrix (specs grouped by kind, price limits in one comparison) against the
reference that evaluated the constraints spec by spec."""

from __future__ import annotations

import numpy as np
import pytest

from policies.eligibility import eligible_matrix
from policies.views import OfferTable
from tests.unit.policies import random_instances as ri
from tests.unit.policies import reference_eligibility as ref


@pytest.mark.parametrize("seed", range(40))
def test_same_matrix_as_the_reference(seed):
    rng = np.random.default_rng(seed)
    m = int(rng.choice([0, 1, 5, 60, 300]))
    offers = ri.offers(rng, m)
    table = OfferTable.from_offers(offers)
    prices = np.array([o.price_usd_per_hour for o in offers])
    if m and seed % 4 == 0:
        prices[rng.random(m) < 0.2] = np.nan     # unknown prices: only limitless specs admit them
    specs = ri.specs(rng, int(rng.choice([0, 1, 7, 80])))
    for unavailable in (None, rng.random(m) < 0.2):
        got = eligible_matrix(specs, table, prices, unavailable)
        want = ref.eligible_matrix(specs, table, prices, unavailable)
        assert got.dtype == want.dtype and got.shape == want.shape == (len(specs), m)
        assert np.array_equal(got, want)


def test_instances_admit_some_and_refuse_some():
    rng = np.random.default_rng(3)
    offers = ri.offers(rng, 300)
    table = OfferTable.from_offers(offers)
    prices = np.array([o.price_usd_per_hour for o in offers])
    got = eligible_matrix(ri.specs(rng, 200), table, prices)
    assert 0.02 < got.mean() < 0.9
    assert (~got.any(axis=1)).any() and got.any(axis=1).any()
