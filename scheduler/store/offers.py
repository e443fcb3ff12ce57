"""Latest offers per provider, price history, and the unavailable-offers cache."""

from __future__ import annotations

import time
from collections.abc import Iterable
from datetime import UTC, datetime

from core.models import Offer, OfferKey, PriceObservation, parse_lenient
from scheduler.store import keys
from scheduler.store.connection import RedisClient
from scheduler.store.history import HistoryStore, to_ms
from scheduler.store.history_sources import REAL, check
from scheduler.store.rollups import price_text
from scheduler.timing import OFFER_SAMPLES_KEPT, OFFERS_TTL_S

_UNAVAILABLE = keys.UNAVAILABLE_OFFERS


class OfferStore:
    """Latest offers (replaced per provider in one transaction) and every price observation.

    One provider's latest-offer keys share its ``{offers:<provider>}`` hash tag; the set of
    providers with offers (``keys.OFFER_PROVIDERS``) is its own slot, so it is updated
    outside their transaction, in the order that leaves at most a member without offers
    (read as a provider with none) if the process dies in between."""

    def __init__(self, client: RedisClient) -> None:
        self._r = client
        self.history = HistoryStore(client)

    def replace_offers(self, provider: str, offers: Iterable[Offer], source: str = REAL) -> int:
        """Make ``offers`` the provider's latest offers, atomically. Returns how many.

        Args:
            provider: the ``Offer.provider`` name the offers are listed under.
            offers: the offers of one successful poll.
            source: the history source of these offers (``real``, or ``replay:<market>`` for
                a replayed market imitating that provider), written with them so history
                queries never take a replayed listing for a real one (and vice versa).

        Each offer's price start (:meth:`price_since`) is kept while the price stays the same
        and restarts at the offer's ``observed_at`` when it changes. One writer per provider
        (its poller lease), so reading the previous starts before the transaction is safe.
        Callers must not call this with an empty list after a failed poll (keep the last good
        data); an empty list from a successful poll does clear the provider's offers.
        """
        offers = list(offers)
        key, since_key = keys.offers(provider), keys.offer_price_since(provider)
        since = _price_starts(offers, self._r.hgetall(since_key))
        self._r.sadd(keys.OFFER_PROVIDERS, provider)  # first: see the class docstring
        with self._r.pipeline(transaction=True) as pipe:
            pipe.delete(key, since_key)
            if offers:
                pipe.hset(key, mapping={o.key.series(): o.model_dump_json() for o in offers})
                pipe.hset(since_key, mapping=since)
                pipe.expire(key, OFFERS_TTL_S)
                pipe.expire(since_key, OFFERS_TTL_S)
            pipe.set(keys.offer_source(provider), check(source), ex=OFFERS_TTL_S)
            pipe.execute()
        return len(offers)

    def price_since(self, series: list[str]) -> dict[str, datetime]:
        """Since when each latest offer of ``series`` is listed at its current price (the
        first poll that saw that price; aware UTC). Series not listed now are left out."""
        by_provider: dict[str, list[str]] = {}
        for s in series:
            by_provider.setdefault(s.split("/", 1)[0], []).append(s)
        with self._r.pipeline(transaction=False) as pipe:
            for provider, names in by_provider.items():
                pipe.hmget(keys.offer_price_since(provider), names)
            replies = pipe.execute()
        out = {}
        for names, values in zip(by_provider.values(), replies):
            for s, value in zip(names, values):
                if value:
                    out[s] = datetime.fromtimestamp(int(value.rpartition("|")[2]) / 1000, tz=UTC)
        return out

    def forget_providers_except(self, names: Iterable[str]) -> list[str]:
        """Drop the latest offers (and their price starts and source) of every provider not
        in ``names``: a daemon started without a provider in its config must not keep listing
        that provider's last offers for up to OFFERS_TTL_S. Price history is kept. Returns
        the providers forgotten, sorted."""
        keep = set(names)
        gone = sorted(p for p in self._r.smembers(keys.OFFER_PROVIDERS) if p not in keep)
        for provider in gone:
            # The provider's keys go first, then its member (see the class docstring).
            with self._r.pipeline(transaction=True) as pipe:
                pipe.delete(keys.offers(provider), keys.offer_price_since(provider),
                            keys.offer_source(provider))
                pipe.execute()
        if gone:
            self._r.srem(keys.OFFER_PROVIDERS, *gone)
        return gone

    def all_offers(self) -> list[Offer]:
        """Every provider's latest offers, by provider (two round trips)."""
        providers = sorted(self._r.smembers(keys.OFFER_PROVIDERS))
        if not providers:
            return []
        with self._r.pipeline(transaction=False) as pipe:
            for provider in providers:
                pipe.hvals(keys.offers(provider))
            listings = pipe.execute()
        return [parse_lenient(Offer, raw) for raws in listings for raw in raws]

    def append_prices(self, observations: Iterable[PriceObservation], source: str = REAL) -> int:
        """Append observations to their series' history in ``source`` (:class:`HistoryStore`:
        only price changes are stored; the same observation twice is stored once). Returns
        how many were given."""
        return self.history.append(observations, source=source).given

    def price_history(self, series: str, since: datetime | None = None,
                      until: datetime | None = None, source: str = REAL) -> list[PriceObservation]:
        """The series' raw-tier price changes in ``source`` within ``[since, until]``, oldest
        first (older history is in hourly rollups: query it with
        :mod:`scheduler.services.history`)."""
        points = self.history.raw_points(series, None if since is None else to_ms(since),
                                         None if until is None else to_ms(until), source)
        return [PriceObservation(series=series, price_usd_per_hour=price,
                                 observed_at=datetime.fromtimestamp(ms / 1000, tz=UTC))
                for ms, price in points]

    def series(self, source: str = REAL) -> list[str]:
        """Every series with price history in ``source``, sorted."""
        return self.history.series(source)

    def record_preemption(self, key: OfferKey) -> int:
        """Count one preemption this service observed on ``key``; returns the new total."""
        return int(self._r.hincrby(keys.PREEMPTIONS, key.series(), 1))

    def record_spot_hours(self, key: OfferKey, hours: float) -> None:
        """Add ``hours`` (market hours) of spot running time on ``key``."""
        if hours > 0:
            self._r.hincrbyfloat(keys.SPOT_HOURS, key.series(), hours)

    def spot_exposure(self) -> dict[str, tuple[int, float]]:
        """``series -> (preemptions observed, spot hours run)`` for every key we ran on."""
        with self._r.pipeline(transaction=False) as pipe:
            pipe.hgetall(keys.PREEMPTIONS)
            pipe.hgetall(keys.SPOT_HOURS)
            counts, hours = pipe.execute()
        return {s: (int(counts.get(s, 0)), float(hours.get(s, 0.0)))
                for s in set(counts) | set(hours)}

    def preemptions(self) -> dict[OfferKey, int]:
        """Preemptions observed per offer key (input to interruption-risk estimates)."""
        return {OfferKey.from_series(s): int(n) for s, n in self._r.hgetall(keys.PREEMPTIONS).items()}

    def mark_unavailable(self, key: OfferKey, ttl_s: float) -> None:
        """Skip ``key`` for ``ttl_s`` seconds (after a capacity error or a preemption)."""
        expiry = int((time.time() + ttl_s) * 1000)
        self._r.zadd(_UNAVAILABLE, {key.series(): expiry})

    def record_samples(self, provider_names: Iterable[str], listed: Iterable[str],
                       keep: int = OFFER_SAMPLES_KEPT) -> None:
        """Append one availability sample per series of ``provider_names`` after a successful
        poll: ``1`` for the series in ``listed`` (offered now), ``0`` for series seen before
        but absent now. Each ring keeps the last ``keep`` samples; a series absent for all of
        them is dropped, so the hash stays bounded by the offers of the last ``keep`` polls.
        One writer per provider (its poller), so the read-modify-write needs no lock."""
        prefixes = tuple(f"{name}/" for name in provider_names)
        listed = set(listed)
        rings = {s: r for s, r in self._r.hgetall(keys.OFFER_SAMPLES).items()
                 if s.startswith(prefixes)}
        updated, dropped = {}, []
        for series in set(rings) | listed:
            ring = (rings.get(series, "") + ("1" if series in listed else "0"))[-keep:]
            if "1" in ring:
                updated[series] = ring
            else:
                dropped.append(series)
        with self._r.pipeline(transaction=True) as pipe:
            if updated:
                pipe.hset(keys.OFFER_SAMPLES, mapping=updated)
            if dropped:
                pipe.hdel(keys.OFFER_SAMPLES, *dropped)
            pipe.execute()

    def samples(self, series: list[str]) -> list[str | None]:
        """The availability ring (``"0"``/``"1"`` per poll, oldest first) of each series, in
        order; ``None`` for a series never sampled."""
        return self._r.hmget(keys.OFFER_SAMPLES, series) if series else []

    def unavailable(self) -> set[OfferKey]:
        now = int(time.time() * 1000)
        with self._r.pipeline(transaction=True) as pipe:
            pipe.zremrangebyscore(_UNAVAILABLE, "-inf", now)
            pipe.zrangebyscore(_UNAVAILABLE, now, "+inf")
            _, members = pipe.execute()
        return {OfferKey.from_series(m) for m in members}


def _price_starts(offers: list[Offer], before: dict[str, str]) -> dict[str, str]:
    """``series -> "{price}|{since ms}"`` for ``offers``: the previous start when the price
    is unchanged, else the offer's ``observed_at``."""
    out = {}
    for o in offers:
        series, price = o.key.series(), price_text(o.price_usd_per_hour)
        old = before.get(series, "")
        out[series] = old if old.rpartition("|")[0] == price else f"{price}|{to_ms(o.observed_at)}"
    return out
