from policies.constraints import filter_offers
from policies.placement import choose_offer
from scheduler.models import Market
from tests.factories.jobs import spec
from tests.factories.offers import offer


def test_cheapest_eligible_offer_wins():
    offers = [offer(zone="a", price_usd_per_hour=1.2), offer(zone="b", price_usd_per_hour=0.9),
              offer(zone="c", market="on-demand", price_usd_per_hour=3.06, interruption_risk=0)]
    decision = choose_offer(spec(), offers)
    assert decision.offer.zone == "b"
    assert decision.on_demand_reference_usd_per_hour == 3.06


def test_tie_breaks_on_risk_then_on_demand_then_key():
    offers = [offer(zone="b", price_usd_per_hour=1.0, interruption_risk=0.2),
              offer(zone="a", price_usd_per_hour=1.0, interruption_risk=0.05)]
    assert choose_offer(spec(), offers).offer.zone == "a"
    offers = [offer(zone="x", price_usd_per_hour=1.0, interruption_risk=0.0),
              offer(zone="y", market="on-demand", price_usd_per_hour=1.0, interruption_risk=0.0)]
    assert choose_offer(spec(), offers).offer.market is Market.ON_DEMAND
    offers = [offer(zone="b"), offer(zone="a")]
    assert choose_offer(spec(), offers).offer.zone == "a"


def test_nothing_fits_names_each_constraint_with_counts():
    offers = [offer(vram_gib=8), offer(vram_gib=8, zone="b"), offer(zone="c", gpu_model="T4"),
              offer(zone="d", price_usd_per_hour=9.0)]
    decision = choose_offer(spec(resources={"min_vram_gib": 16, "gpu_models": ["v100"]},
                                 max_price_usd_per_hour=2.0), offers)
    assert decision.offer is None
    assert decision.filtered.removed["min_vram_gib"] == 2
    assert decision.filtered.removed["gpu_models"] == 1
    assert decision.filtered.removed["max_price_usd_per_hour"] == 1
    # Every constraint is named with what it rejects on its own.
    assert "min_vram_gib rejects 2" in decision.reason
    assert "gpu_models rejects 1" in decision.reason
    assert "max_price_usd_per_hour rejects 1" in decision.reason
    assert "4 offers (spot and on-demand counted apart), 0 eligible" in decision.reason


def test_all_constraints_that_reject_are_named_not_only_the_first():
    decision = choose_offer(spec(resources={"gpu_count": 16, "min_vram_gib": 80},
                                 max_price_usd_per_hour=0.1), [offer(), offer(zone="b")])
    assert "gpu_count rejects 2" in decision.reason
    assert "min_vram_gib rejects 2" in decision.reason
    assert "max_price_usd_per_hour rejects 2" in decision.reason


def test_empty_market():
    decision = choose_offer(spec(), [])
    assert decision.offer is None
    assert "no offers" in decision.reason


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
    decision = choose_offer(spec(), [a, b], unavailable={a.key})
    assert decision.offer.zone == "b"
    assert decision.filtered.removed["unavailable"] == 1


def test_on_demand_reference_ignores_market_and_price_limits():
    offers = [offer(price_usd_per_hour=0.5), offer(zone="z", market="on-demand",
                                                   price_usd_per_hour=3.0, interruption_risk=0)]
    decision = choose_offer(spec(market="spot", max_price_usd_per_hour=1.0), offers)
    assert decision.offer.market is Market.SPOT
    assert decision.on_demand_reference_usd_per_hour == 3.0
