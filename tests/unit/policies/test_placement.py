"""Constraint filtering and its explanation, and the all-on-demand baseline (placement itself
is policy v2: test_engine.py, test_risk.py)."""

from policies.constraints import explain_no_fit, filter_offers
from policies.placement import on_demand_reference
from tests.factories.jobs import spec
from tests.factories.offers import offer


def test_nothing_fits_names_each_constraint_with_counts():
    offers = [offer(vram_gib=8), offer(vram_gib=8, zone="b"), offer(zone="c", gpu_model="T4"),
              offer(zone="d", price_usd_per_hour=9.0)]
    job = spec(resources={"min_vram_gib": 16, "gpu_models": ["v100"]}, max_price_usd_per_hour=2.0)
    filtered = filter_offers(job, offers)
    assert filtered.eligible == []
    assert filtered.removed["min_vram_gib"] == 2
    assert filtered.removed["gpu_models"] == 1
    assert filtered.removed["max_price_usd_per_hour"] == 1
    # Every constraint is named with what it rejects on its own.
    reason = explain_no_fit(job, offers)
    assert "min_vram_gib rejects 2" in reason
    assert "gpu_models rejects 1" in reason
    assert "max_price_usd_per_hour rejects 1" in reason
    assert "4 offers (spot and on-demand counted apart), 0 eligible" in reason


def test_all_constraints_that_reject_are_named_not_only_the_first():
    reason = explain_no_fit(spec(resources={"gpu_count": 16, "min_vram_gib": 80},
                                 max_price_usd_per_hour=0.1), [offer(), offer(zone="b")])
    assert "gpu_count rejects 2" in reason
    assert "min_vram_gib rejects 2" in reason
    assert "max_price_usd_per_hour rejects 2" in reason


def test_empty_market():
    assert explain_no_fit(spec(), []) == "no offer fits: the market has no offers"


def test_each_constraint_filters():
    base = offer()
    cases = {
        "gpu_count": (spec(resources={"gpu_count": 2}), base),
        "min_vcpus": (spec(resources={"min_vcpus": 16}), base),
        "min_memory_gib": (spec(resources={"min_memory_gib": 128}), base),
        "providers": (spec(providers={"deny": ["aws"]}), base),
        "regions": (spec(regions={"allow": ["eu-west-1"]}), base),
        "zones": (spec(zones={"deny": ["us-west-2a"]}), base),
        "market": (spec(market="on-demand"), base),
        "max_interruption_risk": (spec(max_interruption_risk=0.05), base),
    }
    for name, (job_spec, o) in cases.items():
        result = filter_offers(job_spec, [o])
        assert result.eligible == [], name
        assert result.removed[name] == 1, name


def test_unavailable_offers_are_skipped_and_counted():
    a, b = offer(zone="a", price_usd_per_hour=0.5), offer(zone="b", price_usd_per_hour=0.7)
    filtered = filter_offers(spec(), [a, b], unavailable={a.key})
    assert [o.zone for o in filtered.eligible] == ["b"]
    assert filtered.removed["unavailable"] == 1
    assert "unavailable rejects 1" in explain_no_fit(spec(), [a], unavailable={a.key})


def test_on_demand_reference_ignores_market_and_price_limits():
    offers = [offer(price_usd_per_hour=0.5), offer(zone="z", market="on-demand",
                                                   price_usd_per_hour=3.0, interruption_risk=0)]
    assert on_demand_reference(spec(market="spot", max_price_usd_per_hour=1.0), offers) == 3.0
    assert on_demand_reference(spec(), offers[:1]) is None
