"""The Azure Retail Prices API (``GET https://prices.azure.com/api/retail/prices``) over
httpx: no credentials (none are ever sent), OData ``$filter``, answers paged by
``NextPageLink``. Microsoft publishes no SDK for it.

One query per location: ``serviceName eq 'Virtual Machines' and armRegionName eq
'<location>' and priceType eq 'Consumption'`` (only ``eq`` and ``and``, as documented;
filter values are case-sensitive) with ``currencyCode='USD'`` — a few thousand rows, a few
pages (the page size is the service's: 100 in the 2021 docs, 1,000 now). Pages are followed
until ``NextPageLink`` is empty or a page has no ``Items``; ``currencyCode`` is put back on a
next link that lost it. Rows are yielded as they arrive, never held whole.

Errors: 429 and 5xx, timeouts and connection failures are :class:`TransientError`; other
answers that are not 200 with JSON are :class:`ProviderError` naming the status.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import httpx

from providers.errors import ProviderError, TransientError
from providers.regional_api import RequestCounter

PROVIDER = "azure"
TIMEOUT_S = 30.0
# A location has a few thousand VM rows; a next link that never ends must not hold the poller.
MAX_PAGES = 100
CURRENCY = "USD"


def location_filter(location: str) -> str:
    """The ``$filter`` of one location's pay-as-you-go and Spot VM prices."""
    return (f"serviceName eq 'Virtual Machines' and armRegionName eq '{location}' "
            "and priceType eq 'Consumption'")


def _with_currency(url: str) -> str:
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    if any(k.lower() == "currencycode" for k, _ in query):
        return url
    return urlunsplit(parts._replace(query=urlencode([*query, ("currencyCode", f"'{CURRENCY}'")])))


class RetailPrices:
    """Reads the Retail Prices API at ``url``.

    - **requests**: where the HTTP requests are counted (operation ``RetailPrices``).
    - **verify**: CA bundle file for TLS (local fakes); default the system's.

    Thread-safe (one httpx client). :meth:`iter_items` blocks on one page at a time
    (:data:`TIMEOUT_S` each).
    """

    def __init__(self, url: str, requests: RequestCounter, *, verify: str | None = None) -> None:
        self.url = url
        self.requests = requests
        context = ssl.create_default_context(cafile=verify) if verify else True
        self._http = httpx.Client(timeout=TIMEOUT_S, verify=context,
                                  headers={"Accept": "application/json"})

    def iter_items(self, location: str) -> Iterator[dict[str, Any]]:
        """Every ``Items[]`` row of ``location``'s query (see the module docstring), page by
        page. Raises :class:`TransientError` / :class:`ProviderError`."""
        url: str | None = _with_currency(
            f"{self.url}?{urlencode({'$filter': location_filter(location)})}")
        for _ in range(MAX_PAGES):
            body = self._page(url, location)
            items = body.get("Items") or []
            yield from items
            url = body.get("NextPageLink")
            if not url or not items:
                return
            url = _with_currency(str(url))
        raise TransientError(f"azure retail prices for {location}: more than {MAX_PAGES} pages",
                             provider=PROVIDER, code="TooManyPages")

    def _page(self, url: str, location: str) -> dict[str, Any]:
        where = f"azure retail prices for {location}"
        self.requests.add("RetailPrices")
        try:
            answer = self._http.get(url)
        except httpx.HTTPError as exc:
            raise TransientError(f"{where}: {type(exc).__name__}", provider=PROVIDER,
                                 code=type(exc).__name__) from None
        if answer.status_code == 429 or answer.status_code >= 500:
            raise TransientError(f"{where}: HTTP {answer.status_code}", provider=PROVIDER,
                                 code=f"HTTP{answer.status_code}")
        try:
            body = answer.json() if answer.status_code == 200 else None
        except ValueError:
            body = None
        if not isinstance(body, dict):
            raise ProviderError(f"{where}: HTTP {answer.status_code}, not a price page "
                                f"({answer.text[:200]!r})", provider=PROVIDER,
                                code=f"HTTP{answer.status_code}")
        return body

    def close(self) -> None:
        self._http.close()
