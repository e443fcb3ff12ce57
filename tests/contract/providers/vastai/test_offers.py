"""Offers, prices and checks through the real vastai SDK against the local fake: what the
search asks for (auth header, type, limit, filters), both markets, the GPU filter, prices."""

from __future__ import annotations

from datetime import timedelta

import pytest

from core.models import Market
from tests.contract.providers.vastai.conftest import TEST_API_KEY
from tests.contract.providers.vastai.data import ask, catalogue, needs_examples

pytestmark = needs_examples


def test_both_markets_are_searched_with_the_filters_and_a_limit(fake_vast_factory,
                                                                 make_provider) -> None:
    fake = fake_vast_factory([ask(), ask(id=2, machine_id=2, min_bid=None),
                              ask(id=3, machine_id=3, reliability=0.5)])
    provider = make_provider(fake, min_reliability=0.9, countries=["CN", "US"], max_offers=300)
    offers = provider.list_offers()
    assert sorted((o.market.value, o.instance_type) for o in offers) == [
        ("on-demand", "m2.1xRTX4090"), ("on-demand", "m22990.1xRTX4090"),
        ("spot", "m22990.1xRTX4090")]
    searches = fake.calls("POST", "/api/v0/bundles/")
    assert [s.body["type"] for s in searches] == ["bid", "on-demand"]
    for search in searches:
        assert search.authorization == f"Bearer {TEST_API_KEY}"
        assert search.body["limit"] == 300 and search.body["allocated_storage"] == 40
        assert search.body["reliability"] == {"gte": 0.9}
        assert search.body["geolocation"] == {"in": ["CN", "US"]}
        assert search.body["verified"] == {"eq": True} and search.body["rented"] == {"eq": False}


def test_gpu_models_are_filtered_by_the_projects_names(fake_vast_factory, make_provider) -> None:
    fake = fake_vast_factory(catalogue(60))
    offers = make_provider(fake, gpu_models=["RTX4090", "H100"], markets=["spot"],
                           min_reliability=0).list_offers()
    assert offers and {o.gpu_model for o in offers} == {"RTX4090", "H100"}
    assert all(o.market is Market.SPOT and o.interruption_notice_s == 0 for o in offers)


def test_a_full_page_warns_that_the_market_has_more(fake_vast_factory, make_provider,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    fake = fake_vast_factory(catalogue(30))
    offers = make_provider(fake, max_offers=10, markets=["on-demand"],
                           min_reliability=0).list_offers()
    assert len(offers) == 10
    assert "returned max_offers (10) offers, all it asks for" in caplog.text


def test_prices_observe_every_offer_and_reuse_a_fresh_search(fake_vast_factory,
                                                             make_provider) -> None:
    fake = fake_vast_factory(catalogue(40))
    provider = make_provider(fake, min_reliability=0)
    offers = provider.list_offers()
    prices = provider.poll_prices(None)
    assert len(fake.calls("POST", "/api/v0/bundles/")) == 2  # the offers' searches, reused
    assert {p.series: p.price_usd_per_hour for p in prices} == {
        o.key.series(): o.price_usd_per_hour for o in offers}
    assert {o.key for o in provider.list_offers()} == {o.key for o in offers}  # stable
    later = offers[0].observed_at + timedelta(seconds=1)
    assert provider.poll_prices(later) == []  # nothing newer than since


def test_checks_report_the_key_source_the_credit_and_each_call(fake_vast_factory,
                                                               make_provider) -> None:
    fake = fake_vast_factory([ask()], credit=12.5)
    rows = {r.check: r for r in make_provider(fake).check()}
    assert rows["credentials"].ok and "VAST_API_KEY" in rows["credentials"].detail
    assert rows["show user"].ok and rows["show user"].detail == "credit 12.50 USD"
    assert rows["search offers (spot)"].ok and rows["search offers (on-demand)"].ok
    assert rows["show instances"].ok
    fake.credit = 0.0
    assert not {r.check: r for r in make_provider(fake).check()}["show user"].ok


def test_a_wrong_key_fails_the_checks_without_raising(fake_vast_factory, make_provider) -> None:
    fake = fake_vast_factory([ask()], api_key="another-key")
    rows = make_provider(fake).check()
    assert rows[0].ok  # a key was found
    assert all(not r.ok and r.detail.startswith("AuthError") for r in rows[1:])


def test_a_large_market_is_searched_in_pages_after_the_last_id(fake_vast_factory,
                                                               make_provider) -> None:
    fake = fake_vast_factory(catalogue(2300))
    offers = make_provider(fake, markets=["spot"], min_reliability=0).list_offers()
    assert len({o.key for o in offers}) == 2300
    pages = fake.calls("POST", "/api/v0/bundles/")
    assert [p.body["limit"] for p in pages] == [1000, 1000, 1000]
    assert [p.body.get("id") for p in pages] == [None, {"gt": 11_000_999}, {"gt": 11_001_999}]
    assert all(p.body["order"] == [["id", "asc"]] for p in pages)
