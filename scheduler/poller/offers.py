"""Poll one provider adapter: replace its latest offers, append its new price observations.

Spot offers' interruption risk is blended with the preemptions this service observed on them
(:mod:`policies.observed_risk`) before they are stored.

A failed poll logs and leaves the latest offers in place (keep the last good data); only real
observations are appended to history. A replayed market's offers and observations are written
under its own history source (``replay:<market name>``), never into the real one, even when it
imitates a real cloud's provider names.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from datetime import datetime

from policies.observed_risk import blended_risk
from policies.priors import UNKNOWN_SPOT_RISK
from providers.base import Provider
from providers.errors import ProviderError
from providers.replay import ReplayMarket, ReplayProvider
from core.models import Market, Offer, utcnow
from scheduler.observability.metrics import POLL_SECONDS
from scheduler.store import Store
from scheduler.store.known_names import KnownNames
from scheduler.store.history_legacy import adopt_legacy
from scheduler.store.history_sources import REAL, for_market

log = logging.getLogger(__name__)


def with_observed_risk(offer: Offer, exposure: dict[str, tuple[int, float]]) -> Offer:
    """The offer with its advertised interruption risk (the policies' prior when its source
    rates none) blended with what we observed on it."""
    if offer.interruption_risk is None:
        offer = offer.model_copy(update={"interruption_risk": UNKNOWN_SPOT_RISK})
    seen = exposure.get(offer.key.series()) if offer.market is Market.SPOT else None
    if not seen:
        return offer
    preemptions, hours = seen
    risk = blended_risk(offer.interruption_risk, preemptions, hours)
    return offer.model_copy(update={"interruption_risk": risk})


def replayed_market(provider: Provider) -> ReplayMarket | None:
    """The market a replay adapter replays, else ``None``."""
    return provider.market if isinstance(provider, ReplayProvider) else None


def history_source(provider: Provider) -> str:
    """The history source a provider's prices belong to: ``replay:<market name>`` for a
    replayed market, ``real`` for everything else (cloud APIs, public catalogs)."""
    market = replayed_market(provider)
    return REAL if market is None else for_market(market.name)


def quoted_prices(market: ReplayMarket) -> dict[str, set[float]]:
    """Series key → every price (USD/hour) a replayed market quotes for it."""
    out: dict[str, set[float]] = {}
    for offer in market.offers:
        for market in offer.markets():
            prices = out.setdefault(offer.key(market).series(), set())
            if market is Market.ON_DEMAND:
                prices.add(float(offer.on_demand_price_usd_per_hour or 0.0))
            elif offer.spot_prices is not None:
                prices.add(offer.spot_prices.base_price)
                prices.update(p for _, p in offer.spot_prices.points)
    return out


class OfferPoller:
    """Callable apscheduler job for one adapter. Not reentrant: register with max_instances=1."""

    def __init__(self, store: Store, provider: Provider) -> None:
        self.store = store
        self.provider = provider
        self.last_prices_at: datetime | None = None
        self.last_error: str | None = None
        self.source = history_source(provider)
        self._legacy_checked = False

    def __call__(self) -> int:
        """Returns the number of offers stored (0 on failure)."""
        started = utcnow()
        try:
            with POLL_SECONDS.labels(provider=self.provider.name).time():
                offers = self.provider.list_offers()
                observations = self.provider.poll_prices(self.last_prices_at)
        except ProviderError as exc:
            self.last_error = str(exc)
            log.warning("poll of %s failed, keeping the last offers: %s", self.provider.name, exc,
                        extra={"provider": self.provider.name})
            return 0
        exposure = self.store.offers.spot_exposure()
        by_name: dict[str, list[Offer]] = defaultdict(list)
        for offer in offers:
            by_name[offer.provider].append(with_observed_risk(offer, exposure))
        names = set(self.provider.provider_names)
        for name in names | set(by_name):
            self.store.offers.replace_offers(name, by_name.get(name, []), self.source)
        # Names ever listed: a job spec naming none of them is warned about (a typo).
        KnownNames(self.store.redis).record(offers)
        # Per-poll availability samples feed the policy's up/down run estimates.
        self.store.offers.record_samples(names | set(by_name),
                                         [o.key.series() for o in offers])
        market = replayed_market(self.provider)
        if not self._legacy_checked and market is not None:
            self._adopt_legacy(market)
        self.store.offers.append_prices(observations, self.source)
        self.last_prices_at = started
        self.last_error = None
        return len(offers)

    def _adopt_legacy(self, market: ReplayMarket) -> None:
        """Once per poller, before its first append: this market's series stored before
        history sources existed move to its source (:mod:`scheduler.store.history_legacy`)."""
        done = adopt_legacy(self.store.redis, quoted_prices(market), self.source)
        self._legacy_checked = True
        if done.moved:
            log.warning("moved %d price series stored before history sources existed into %s "
                        "(every price in them is one this replayed market quotes): %s",
                        len(done.moved), self.source, ", ".join(done.moved[:5]))
        if done.kept_real:
            log.warning("%d older price series under this replayed market's offer keys hold "
                        "other prices and stay real history (re-import real dumps if they "
                        "were mixed with replayed prices): %s", len(done.kept_real),
                        ", ".join(done.kept_real[:5]))
