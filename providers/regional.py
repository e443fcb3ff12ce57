"""One base for clouds made of regions (EC2, ECS): what every such cloud does the same way, so
that a cloud module keeps only its API calls and its translation (the shape of dstack's
``ComputeWithAllOffersCached``: the base fans out and tolerates, the cloud answers per region).

:class:`RegionalCompute` implements :class:`providers.base.Compute`'s operations once:

- offers and prices: one worker per region (at most :data:`MAX_REGION_WORKERS`) runs the cloud's
  ``_region_offers``/``_region_prices``. A region that fails keeps its last good offers for
  :data:`LAST_GOOD_OFFERS_MAX_AGE_S` and, for prices, is asked again from where it missed; a
  call raises (the first region's error) only when every region failed.
- launch: refuses offers of other providers or regions and a missing ``launch`` section,
  returns the instance already carrying the client token, else runs one; parameters the
  cloud's rules refuse are ``InvalidLaunchRequest``, and a cloud's idempotency error is
  answered by looking the token up again.
- terminate: in the region the instance was seen in, else in each region until one knows it.
- describe: every region; ANY failing region raises, so that no caller takes a missing
  instance for a gone one. Instances launched but not listed yet, and those seen before and
  no longer listed, come from :class:`providers.regional_instances.InstanceMemory`.

What deserves caching (instance types, zones, list prices) the cloud keeps in
:class:`providers.cache.TTLCache` objects; which offers lack capacity is the controller's
cache in Redis, never the adapter's. The pure pieces the clouds' clients and translations
share are in :mod:`providers.regional_api`.
"""

from __future__ import annotations

import logging
import threading
from abc import abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any, ClassVar, Protocol, TypeVar

from core.models import Instance, Market, Offer, PriceObservation, utcnow
from providers.base import CheckResult, Compute, LaunchRequest
from providers.errors import NotFoundError, ProviderError
from providers.regional_api import ListPrices, RequestCounter, list_price_observations
from providers.regional_instances import InstanceMemory, has_tags
from providers.regional_settings import RegionalSettings

log = logging.getLogger(__name__)
T = TypeVar("T")
MAX_REGION_WORKERS = 16
# A region whose poll fails keeps its last good offers for at most this long (the store's
# OFFERS_TTL_S is 1 h too; older offers would mislead placement).
LAST_GOOD_OFFERS_MAX_AGE_S = 3600.0
# Regions remembered for this many instance ids, the most recently seen: enough for every
# instance a daemon runs at once; one forgotten is looked for in each region.
REMEMBERED_REGIONS = 10_000


class RegionalClient(Protocol):
    """What the base needs of a cloud's API client."""

    requests: RequestCounter

    def credentials_source(self) -> str | None: ...

    def close(self) -> None: ...


class RegionalCompute(Compute):
    """A :class:`Compute` over ``settings.regions`` (see the module docstring).

    - **settings**: the cloud's validated entry (:class:`RegionalSettings`).
    - **client**: its API client; **clock**: aware-UTC now (default :func:`utcnow`).

    Thread-safe. ``requests`` counts the HTTP requests made per operation.
    A cloud sets ``name``, ``agent_start_timeout_s``, ``launch_fields`` (named in the error
    when ``launch`` is missing), ``idempotency_codes``, ``history_max_days`` (how far back its
    price history reaches, if it says) and the per-region methods below.
    """

    launch_fields: ClassVar[str] = ""
    idempotency_codes: ClassVar[frozenset[str]] = frozenset()
    history_max_days: ClassVar[float | None] = None

    def __init__(self, settings: RegionalSettings, client: RegionalClient, *,
                 clock: Callable[[], datetime] | None = None) -> None:
        self.settings = settings
        self.regions = list(settings.regions)
        self.client = client
        self._clock = clock or utcnow
        self._lock = threading.Lock()
        self._last_offers: dict[str, tuple[datetime, list[Offer]]] = {}
        self._missed_since: dict[str, datetime] = {}  # region → start of a failed history poll
        self._region_of: OrderedDict[str, str] = OrderedDict()  # instance id → region
        self.memory = InstanceMemory(self._clock)
        self._pool = ThreadPoolExecutor(max_workers=min(MAX_REGION_WORKERS, len(self.regions)),
                                        thread_name_prefix=f"{self.name}-region")

    @property
    def requests(self) -> dict[str, int]:
        return self.client.requests.snapshot()

    def close(self) -> None:
        """Stop the region workers and close the HTTP clients. Instances keep running."""
        self._pool.shutdown(wait=True, cancel_futures=True)
        self.client.close()

    # ----- what a cloud implements, per region ------------------------------------------------
    @abstractmethod
    def _region_offers(self, region: str) -> list[Offer]: ...

    @abstractmethod
    def _region_prices(self, region: str, start: datetime,
                       since: datetime | None) -> list[PriceObservation]:
        """Observations from ``start`` (already moved back to a missed window), or, for list
        prices, those fetched after ``since``."""

    @abstractmethod
    def _region_instances(self, region: str, tags: dict[str, str]) -> list[Instance]: ...

    @abstractmethod
    def _find_by_token(self, region: str, client_token: str) -> Instance | None: ...

    @abstractmethod
    def _run_params(self, request: LaunchRequest, region: str) -> dict[str, Any]:
        """The cloud's launch call's parameters; ``ValueError`` when its rules refuse them."""

    @abstractmethod
    def _run_instance(self, request: LaunchRequest, region: str,
                      params: dict[str, Any]) -> Instance: ...

    @abstractmethod
    def _terminate_in(self, region: str, instance_id: str) -> None:
        """Raises :class:`NotFoundError` when ``region`` has no such instance."""

    # ----- offers and prices ------------------------------------------------------------------
    def _list_offers(self) -> list[Offer]:
        results = self._per_region(self._region_offers)
        now = self._clock()
        offers: list[Offer] = []
        for region, result in results.items():
            if not isinstance(result, ProviderError):
                with self._lock:
                    self._last_offers[region] = (now, result)
                offers.extend(result)
                continue
            with self._lock:
                last = self._last_offers.get(region)
            if last and (now - last[0]).total_seconds() <= LAST_GOOD_OFFERS_MAX_AGE_S:
                log.warning("%s offers for %s failed, keeping %d offers from %s: %s", self.name,
                            region, len(last[1]), last[0].isoformat(), result)
                offers.extend(last[1])
            else:
                log.warning("%s offers for %s failed: %s", self.name, region, result)
        _raise_if_all_failed(results)
        return offers

    def _history_start(self, since: datetime | None) -> datetime:
        """Where a price poll starts: ``since``, else ``history_lookback_h`` ago; never before
        what the cloud keeps (``history_max_days``, less 5 minutes of clock skew)."""
        now = self._clock()
        start = since or (now - timedelta(hours=self.settings.history_lookback_h))
        if self.history_max_days is None:
            return start
        return max(start, now - timedelta(days=self.history_max_days, minutes=-5))

    def _poll_prices(self, since: datetime | None) -> list[PriceObservation]:
        start = self._history_start(since)

        def region_prices(region: str) -> list[PriceObservation]:
            with self._lock:
                missed = self._missed_since.get(region)
            return self._region_prices(region, min(start, missed) if missed else start, since)

        results = self._per_region(region_prices)
        observations: list[PriceObservation] = []
        for region, result in results.items():
            with self._lock:
                if isinstance(result, ProviderError):
                    self._missed_since[region] = min(start, self._missed_since.get(region, start))
                else:
                    self._missed_since.pop(region, None)
                    observations.extend(result)
            if isinstance(result, ProviderError):
                log.warning("%s price history for %s failed (will ask again from %s): %s",
                            self.name, region, start.isoformat(), result)
        _raise_if_all_failed(results)
        return observations

    def _list_price_observations(self, region: str, since: datetime | None,
                                 prices: Callable[[], ListPrices[float] | None],
                                 zones: Callable[[], Mapping[str, Iterable[str]]]
                                 ) -> list[PriceObservation]:
        """On-demand observations of the region's list prices (``prices()``: type → USD/hour,
        None when unknown) in ``zones()`` (type → zones), when on-demand is a configured market
        and they were fetched after ``since`` (older ones are stored already)."""
        listed = prices() if Market.ON_DEMAND in self.settings.markets else None
        if listed is None or (since is not None and listed.fetched_at <= since):
            return []
        return list_price_observations(self.name, region, zones(), listed.prices,
                                       listed.fetched_at)

    # ----- instances --------------------------------------------------------------------------
    def _launch_region(self, offer: Offer) -> str:
        """The region to launch ``offer`` in; raises :class:`ProviderError` when it is not an
        offer of a configured region or ``launch`` is not configured."""
        if offer.provider != self.name or offer.region not in self.regions:
            raise ProviderError(f"{self.name} cannot launch {offer.key.series()}: region "
                                f"{offer.region} is not configured", provider=self.name)
        if self.settings.launch is None:
            raise ProviderError(f"{self.name} launch is not configured: add a 'launch' section "
                                f"({self.launch_fields}) to the {self.name} provider entry",
                                provider=self.name, code="LaunchNotConfigured")
        return offer.region

    def _launch(self, request: LaunchRequest) -> Instance:
        region = self._launch_region(request.offer)
        token = request.client_token
        instance = self._find_by_token(region, token) or next(iter(self.memory.unlisted(
            region, (), lambda i: i.client_token == token)), None)
        if instance is None:
            try:
                params = self._run_params(request, region)
            except ValueError as exc:
                raise ProviderError(f"{self.name} launch of {request.offer.key.series()}: {exc}",
                                    provider=self.name, code="InvalidLaunchRequest") from None
            try:
                instance = self._run_instance(request, region, params)
            except ProviderError as exc:
                found = (self._find_by_token(region, request.client_token)
                         if exc.code in self.idempotency_codes else None)
                if found is None:
                    raise
                instance = found
        self._remember_regions({instance.id: region})
        self.memory.launched(instance, region)
        return instance

    def _remember_regions(self, regions: Mapping[str, str]) -> None:
        with self._lock:
            for instance_id, region in regions.items():
                self._region_of[instance_id] = region
                self._region_of.move_to_end(instance_id)
            while len(self._region_of) > REMEMBERED_REGIONS:
                self._region_of.popitem(last=False)

    def _terminate(self, instance_id: str) -> None:
        with self._lock:
            known = self._region_of.get(instance_id)
        for region in [known] if known else self.regions:
            try:
                self._terminate_in(region, instance_id)
                self.memory.deleted(instance_id)
                return
            except NotFoundError:
                continue

    def _describe(self, tags: dict[str, str] | None) -> list[Instance]:
        results = self._per_region(lambda region: self._region_instances(region, tags or {}))
        out: list[Instance] = []
        for region, result in results.items():
            if isinstance(result, ProviderError):
                raise result
            self._remember_regions({i.id: region for i in result})
            self.memory.listed(result, region)
            out += result + self.memory.unlisted(region, [i.id for i in result],
                                                 has_tags(tags or {}))
        return out

    # ----- checks -----------------------------------------------------------------------------
    def _credentials_row(self, missing: str) -> CheckResult:
        """The ``credentials`` row: where the client found them, else ``missing`` (a hint)."""
        source = self.client.credentials_source()
        return CheckResult(self.name, "-", "credentials", source is not None,
                           f"found via {source}" if source else missing)

    def _check_row(self, region: str, check: str, call: Callable[[], Any]) -> CheckResult:
        """Run ``call``; the row says ok, or the :class:`ProviderError` it raised."""
        try:
            call()
        except ProviderError as exc:
            return CheckResult(self.name, region, check, False, f"{type(exc).__name__}: {exc}")
        return CheckResult(self.name, region, check, True, "ok")

    # ----- fan-out ----------------------------------------------------------------------------
    def _per_region(self, fn: Callable[[str], T]) -> dict[str, T | ProviderError]:
        futures = {region: self._pool.submit(fn, region) for region in self.regions}
        results: dict[str, T | ProviderError] = {}
        for region, future in futures.items():
            try:
                results[region] = future.result()
            except ProviderError as exc:
                results[region] = exc
        return results


def _raise_if_all_failed(results: dict[str, Any]) -> None:
    errors = [r for r in results.values() if isinstance(r, ProviderError)]
    if errors and len(errors) == len(results):
        raise errors[0]
