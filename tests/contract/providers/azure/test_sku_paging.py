"""Resource SKU paging stops: a nextLink to another host is not followed (the pipeline would
send it the bearer token), and a service that pages forever is cut off."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from providers.azure import client as azure_client
from providers.errors import TransientError


class _Pages:
    """Stands in for the management client's pipeline: one page per request."""

    def __init__(self, next_link):
        self.next_link = next_link
        self.sent = []

    def send_request(self, request):
        self.sent.append(request.url)
        page = {"value": [{"name": f"sku-{len(self.sent)}"}], "nextLink": self.next_link}
        return SimpleNamespace(raise_for_status=lambda: None, json=lambda: page)


def _client(pages):
    return SimpleNamespace(compute=pages, subscription_id="sub",
                           endpoint_host="management.azure.com")


def test_a_next_link_to_another_host_is_not_followed():
    pages = _Pages("https://attacker.example/next")
    with pytest.raises(TransientError, match="leaves management.azure.com"):
        list(azure_client.AzureClient.iter_skus(_client(pages), "eastus"))
    assert len(pages.sent) == 1


def test_endless_paging_is_cut_off(monkeypatch):
    monkeypatch.setattr(azure_client, "MAX_SKU_PAGES", 3)
    pages = _Pages("https://management.azure.com/next")
    with pytest.raises(TransientError, match="more than 3 pages"):
        list(azure_client.AzureClient.iter_skus(_client(pages), "eastus"))
    assert len(pages.sent) == 3
