"""The Retail Prices API through httpx against the fake: the filter, USD, paging by
NextPageLink, no credentials sent; prices polled as observations."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest

from providers.azure import AzureProvider
from providers.azure.prices import location_filter
from providers.errors import ProviderError, TransientError
from tests.contract.providers.azure.data import LOCATION, T0
from tests.contract.providers.azure.fake_azure import FakeAzure


def test_pages_are_followed_with_the_filter_and_usd(
        fake_azure: FakeAzure, make_provider: Callable[..., AzureProvider]) -> None:
    provider = make_provider(fake_azure)
    items = list(provider.prices.iter_items(LOCATION))
    # the eastus Consumption rows in USD: the assembled page's 8 plus 2 derived (Windows,
    # low priority) plus the non-primary duplicate; 3 per page
    assert len(items) == 11
    calls = [r for r in fake_azure.requests if r.path == "/api/retail/prices"]
    assert len(calls) == 4
    assert all(r.query["$filter"] == location_filter(LOCATION) for r in calls)
    assert all(r.query["currencyCode"] == "'USD'" for r in calls)  # kept on next links
    assert [r.query.get("$skip") for r in calls] == [None, "3", "6", "9"]
    assert not any("authorization" in r.headers for r in calls)


def test_offers_and_prices_are_cached_and_observed_once(
        fake_azure: FakeAzure, make_provider: Callable[..., AzureProvider]) -> None:
    now = [T0]
    provider = make_provider(fake_azure, clock=lambda: now[0])
    offers = provider.list_offers()
    assert {o.market.value for o in offers} == {"spot", "on-demand"}
    observations = provider.poll_prices()
    assert len(observations) == 6  # 3 zones × (spot, on-demand)
    assert all(o.observed_at == T0 for o in observations)
    assert fake_azure.counts["RetailPrices"] == 4  # one listing, cached
    now[0] = T0 + timedelta(minutes=5)
    assert provider.poll_prices(since=T0) == []  # nothing fetched since
    assert provider.requests["ResourceSkus_List"] == 2


def test_spot_only_markets(fake_azure: FakeAzure,
                           make_provider: Callable[..., AzureProvider]) -> None:
    provider = make_provider(fake_azure, markets=["spot"])
    assert {o.market.value for o in provider.list_offers()} == {"spot"}
    assert {o.series.rsplit("/", 1)[1] for o in provider.poll_prices()} == {"spot"}


def test_failed_pages_are_transient_or_plain_errors(
        fake_azure: FakeAzure, make_provider: Callable[..., AzureProvider]) -> None:
    provider = make_provider(fake_azure)
    fake_azure.price_failures[:] = [None, 503]  # the second page fails
    with pytest.raises(TransientError, match="HTTP 503"):
        list(provider.prices.iter_items(LOCATION))
    fake_azure.price_failures[:] = [429]
    with pytest.raises(TransientError):
        provider.list_offers()  # the only location failed: the poll raises
    fake_azure.price_failures[:] = [400]
    with pytest.raises(ProviderError, match="not a price page"):
        list(provider.prices.iter_items(LOCATION))
    assert len(provider.list_offers()) == 6  # answered again: offers are back
