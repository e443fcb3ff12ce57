"""Poll one provider adapter: replace its latest offers, append its new price observations.

A failed poll logs and leaves the latest offers in place (keep the last good data); only real
observations are appended to history.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from datetime import datetime

from providers.base import Provider
from providers.errors import ProviderError
from scheduler.models import Offer, utcnow
from scheduler.store import Store

log = logging.getLogger(__name__)


class OfferPoller:
    """Callable apscheduler job for one adapter. Not reentrant: register with max_instances=1."""

    def __init__(self, store: Store, provider: Provider) -> None:
        self.store = store
        self.provider = provider
        self.last_prices_at: datetime | None = None
        self.last_error: str | None = None

    def __call__(self) -> int:
        """Returns the number of offers stored (0 on failure)."""
        started = utcnow()
        try:
            offers = self.provider.list_offers()
            observations = self.provider.poll_prices(self.last_prices_at)
        except ProviderError as exc:
            self.last_error = str(exc)
            log.warning("poll of %s failed, keeping the last offers: %s", self.provider.name, exc)
            return 0
        by_name: dict[str, list[Offer]] = defaultdict(list)
        for offer in offers:
            by_name[offer.provider].append(offer)
        names = set(getattr(self.provider, "provider_names", None) or {self.provider.name})
        for name in names | set(by_name):
            self.store.offers.replace_offers(name, by_name.get(name, []))
        self.store.offers.append_prices(observations)
        self.last_prices_at = started
        self.last_error = None
        return len(offers)
