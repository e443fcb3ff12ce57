import random

import numpy as np

from policies.constraints import filter_offers
from policies.eligibility import eligible_matrix
from policies.views import OfferTable
from tests.factories.jobs import spec
from tests.factories.offers import offer


def random_offers(rng: random.Random, n: int) -> list:
    out = []
    for i in range(n):
        out.append(offer(
            provider=rng.choice(["aws", "gcp", "azure"]),
            region=rng.choice(["us-east-1", "us-west-2", "eu-west-1"]),
            zone=f"z{rng.randrange(6)}", instance_type=f"t{i}",
            market=rng.choice(["spot", "on-demand"]), gpu_model=rng.choice(["V100", "T4", "A100"]),
            gpu_count=rng.choice([1, 2, 4, 8]), vram_gib=rng.choice([8, 16, 24, 40, 80]),
            vcpus=rng.choice([4, 8, 16, 32]), memory_gib=rng.choice([16, 61, 128, 244]),
            price_usd_per_hour=round(rng.uniform(0.1, 10), 3),
            interruption_risk=rng.choice([0.0, 0.05, 0.1, 0.2])))
    return out


def random_spec(rng: random.Random):
    fields = {"resources": {"gpu_count": rng.choice([1, 2, 4]),
                            "min_vram_gib": rng.choice([0, 16, 24]),
                            "gpu_models": rng.choice([None, ["v100"], ["T4", "A100"]]),
                            "min_vcpus": rng.choice([0, 8]), "min_memory_gib": rng.choice([0, 64])},
              "market": rng.choice(["spot", "on-demand", "auto"]),
              "providers": rng.choice([{}, {"allow": ["aws"]}, {"deny": ["gcp"]}]),
              "regions": rng.choice([{}, {"allow": ["us-east-1", "us-west-2"]}]),
              "zones": rng.choice([{}, {"deny": ["z1"]}])}
    if rng.random() < 0.5:
        fields["max_price_usd_per_hour"] = rng.choice([1.0, 5.0])
    if rng.random() < 0.5:
        fields["max_interruption_risk"] = rng.choice([0.05, 0.1])
    return spec(**fields)


def test_vectorised_constraints_agree_with_filter_offers():
    rng = random.Random(7)
    offers = random_offers(rng, 300)
    specs = [random_spec(rng) for _ in range(60)]
    table = OfferTable.from_offers(offers)
    price = np.array([o.price_usd_per_hour for o in offers])
    unavailable = np.zeros(len(offers), bool)
    unavailable[::17] = True
    matrix = eligible_matrix(specs, table, price, unavailable)
    blocked = {offers[i].key for i in np.flatnonzero(unavailable)}
    for i, s in enumerate(specs):
        expected = {id(o) for o in filter_offers(s, offers, blocked).eligible}
        assert {id(offers[j]) for j in np.flatnonzero(matrix[i])} == expected, i
