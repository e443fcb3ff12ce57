"""``AliyunProvider``: the Provider protocol over Alibaba Cloud ECS.

It composes :mod:`.client` (SDK calls) with :mod:`.translate`/:mod:`.launch` (pure), the caches
of :mod:`.cache` and the instance memory of :mod:`.tracking`. Per poll and region:

- the region exists (``DescribeRegions``, cached 24 h);
- GPU instance types (``DescribeInstanceTypes``, 24 h);
- zones with stock per market (``DescribeAvailableResource``, 2 min);
- on-demand list prices (``DescribePrice`` per type, 12 h);
- spot prices (``DescribeSpotPriceHistory`` per type, every zone): the last 3 h for
  :meth:`list_offers`, everything since the last poll for :meth:`poll_prices`;
- interruption risk (``DescribeSpotAdvice``, 1 h).

Prices arrive in the account's currency and are converted to USD (``exchange_rates_usd``);
:meth:`native_price` gives what ECS said. Regions are polled in parallel (one worker each, at
most 16). A region that fails keeps its last good offers for up to an hour; only when every
region fails does a call raise.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

from providers.aliyun import launch as launching
from providers.aliyun import translate
from providers.aliyun.cache import (
    AVAILABLE_RESOURCES_TTL_S,
    CURRENT_SPOT_WINDOW_S,
    INSTANCE_TYPES_TTL_S,
    LAST_GOOD_OFFERS_MAX_AGE_S,
    ON_DEMAND_PRICES_TTL_S,
    REGIONS_TTL_S,
    SPOT_ADVICE_TTL_S,
    UNAVAILABLE_OFFER_TTL,
)
from providers.aliyun.client import SPOT_HISTORY_MAX_DAYS, AliyunClient
from providers.aliyun.settings import AliyunSettings
from providers.aliyun.tracking import InstanceTracker
from providers.base import LaunchRequest
from providers.cache import TTLCache
from providers.errors import (
    AuthError,
    CapacityError,
    NotFoundError,
    ProviderError,
    TransientError,
)
from scheduler.models import (
    Instance,
    InstanceState,
    Market,
    Offer,
    OfferKey,
    PriceObservation,
    utcnow,
)

log = logging.getLogger(__name__)
PROVIDER = "aliyun"
MAX_REGION_WORKERS = 16
T = TypeVar("T")


@dataclass(frozen=True)
class CheckResult:
    """One line of ``schedctl providers check``: did ``check`` work in ``region``?"""

    provider: str
    region: str
    check: str
    ok: bool
    detail: str


@dataclass(frozen=True)
class _OnDemand:
    prices: dict[str, tuple[float, str]]  # type → (list price per hour, currency)
    fetched_at: datetime


class AliyunProvider:
    """GPU offers, prices and instances on Alibaba Cloud ECS (spot and pay-as-you-go).

    - **settings**: the validated ``kind: aliyun`` entry (:class:`AliyunSettings`).
    - **client**: an :class:`AliyunClient` to use instead of building one from ``settings``.
    - **clock**: aware-UTC now (injectable for tests).

    ``name`` is ``"aliyun"``, ``time_scale`` 1.0. Every method may block on ECS calls (5 s
    connect / 30 s read timeouts per request, ``max_attempts`` tries on throttling).
    Thread-safe. ``requests`` counts HTTP requests made per action.
    """

    name = PROVIDER
    time_scale = 1.0

    def __init__(self, settings: AliyunSettings, *, client: AliyunClient | None = None,
                 clock: Callable[[], datetime] = utcnow) -> None:
        self.settings = settings
        self.regions = list(settings.regions)
        self.client = client or AliyunClient(
            self.regions, endpoint_url=settings.endpoint_url, ecs_ram_role=settings.ecs_ram_role,
            max_attempts=settings.max_attempts, retry_base_wait_s=settings.retry_base_wait_s,
            retry_max_wait_s=settings.retry_max_wait_s)
        self.currencies = translate.Currencies(settings.default_currency,
                                               dict(settings.exchange_rates_usd))
        self._clock = clock
        self._region_ids: TTLCache[str, frozenset[str]] = TTLCache("regions", REGIONS_TTL_S)
        self._types: TTLCache[str, dict[str, translate.GpuInstanceType]] = TTLCache(
            "instance types", INSTANCE_TYPES_TTL_S)
        self._zones: TTLCache[tuple[str, Market], dict[str, tuple[str, ...]]] = TTLCache(
            "available resources", AVAILABLE_RESOURCES_TTL_S)
        self._on_demand: TTLCache[str, _OnDemand] = TTLCache(
            "on-demand prices", ON_DEMAND_PRICES_TTL_S)
        self._advice: TTLCache[str, dict[tuple[str | None, str], float]] = TTLCache(
            "spot advice", SPOT_ADVICE_TTL_S)
        self._unavailable: TTLCache[OfferKey, str] = TTLCache(
            "unavailable offers", UNAVAILABLE_OFFER_TTL)
        self._lock = threading.Lock()
        self._last_offers: dict[str, tuple[datetime, list[Offer]]] = {}
        self._native: dict[OfferKey, translate.NativePrice] = {}
        self._missed_since: dict[str, datetime] = {}
        self._logged_rates: set[str] = set()
        self.tracker = InstanceTracker(clock)
        self._pool = ThreadPoolExecutor(max_workers=min(MAX_REGION_WORKERS, len(self.regions)),
                                        thread_name_prefix="aliyun-region")

    @property
    def requests(self) -> dict[str, int]:
        return self.client.requests.snapshot()

    # ----- Provider protocol: offers and prices ----------------------------------------------
    def list_offers(self) -> list[Offer]:
        """Every GPU offer buyable now in the configured regions and markets, in USD.

        On-demand: each zone with stock for the type, at its list price (``DescribePrice``, or
        the latest ``OriginPrice``). Spot: each zone with stock and a spot price in the last 3 h,
        with the ``DescribeSpotAdvice`` risk. With ``launch`` configured, zones without a
        vSwitch are left out. Offers that failed with a capacity error at a launch in the last
        3 min are left out. A failing region contributes its last good offers (≤ 1 h old).
        Raises the first region's error only when every region failed.
        """
        results = self._per_region(self._region_offers)
        now = self._clock()
        offers: list[Offer] = []
        for region, result in results.items():
            if isinstance(result, ProviderError):
                with self._lock:
                    last = self._last_offers.get(region)
                if last and (now - last[0]).total_seconds() <= LAST_GOOD_OFFERS_MAX_AGE_S:
                    log.warning("aliyun offers for %s failed, keeping %d offers from %s: %s",
                                region, len(last[1]), last[0].isoformat(), result)
                    offers.extend(last[1])
                else:
                    log.warning("aliyun offers for %s failed: %s", region, result)
                continue
            with self._lock:
                self._last_offers[region] = (now, result)
            offers.extend(result)
        _raise_if_all_failed(results)
        return [o for o in offers if self._unavailable.get(o.key) is None]

    def poll_prices(self, since: datetime | None = None) -> list[PriceObservation]:
        """Price observations newer than ``since`` (aware UTC), in USD.

        Per GPU type with stock in the region: every ``DescribeSpotPriceHistory`` record from
        ``since`` (or ``history_lookback_h`` ago; never more than ECS's 30 days) to now, as a
        spot observation (``SpotPrice``) and an on-demand one (``OriginPrice``), stamped with
        the record's time. Plus one on-demand observation per (zone, type) from
        ``DescribePrice`` when those list prices were fetched after ``since``. A region that
        failed last time is asked again from where it missed. Raises like :meth:`list_offers`.
        """
        now = self._clock()
        start = since or (now - timedelta(hours=self.settings.history_lookback_h))
        oldest = now - timedelta(days=SPOT_HISTORY_MAX_DAYS) + timedelta(minutes=5)
        start = max(start, oldest)
        results = self._per_region(lambda region: self._region_prices(region, start, since))
        observations: list[PriceObservation] = []
        for region, result in results.items():
            if isinstance(result, ProviderError):
                log.warning("aliyun price history for %s failed (will ask again from %s): %s",
                            region, start.isoformat(), result)
                with self._lock:
                    self._missed_since[region] = min(start, self._missed_since.get(region, start))
                continue
            with self._lock:
                self._missed_since.pop(region, None)
            observations.extend(result)
        _raise_if_all_failed(results)
        return observations

    def native_price(self, key: OfferKey) -> translate.NativePrice | None:
        """The price behind the last offer listed for ``key`` as ECS stated it (amount,
        currency, the USD rate used, when), or None when no such offer was listed."""
        with self._lock:
            return self._native.get(key)

    # ----- Provider protocol: instances ------------------------------------------------------
    def launch(self, request: LaunchRequest) -> Instance:
        """Launch one pay-as-you-go instance (spot or not) for ``request.offer``
        (``RunInstances``).

        Idempotent: an instance already tagged with ``client_token`` is returned as is, and
        ``ClientToken`` makes ECS itself return the first instance for a repeated request.
        Returns the instance, usually ``pending``. Raises ``CapacityError`` (the offer is then
        reported by :meth:`unavailable_reason` for 3 min), ``QuotaError``, ``AuthError``,
        ``TransientError``, or ``ProviderError`` when the offer is not an aliyun offer of a
        configured region, its zone has no vSwitch, or ``launch`` is not configured.
        """
        offer, token = request.offer, request.client_token
        region = self._launch_region(offer)
        existing = self._find_by_token(region, token)
        if existing is not None:
            return existing
        params = self._run_params(request, region)
        try:
            instance_id = self.client.run_instance(region, params)
        except CapacityError as exc:
            self._unavailable.put(offer.key, f"no capacity ({exc.code}) at the last launch")
            raise
        except ProviderError as exc:
            if exc.code in ("IdempotentParameterMismatch", "IdempotentProcessing"):
                existing = self._find_by_token(region, token)
                if existing is not None:
                    return existing
            raise
        listed = self._region_instances(region, instance_ids=[instance_id])
        if listed:
            return listed[0]
        instance = Instance(
            id=instance_id, provider=PROVIDER, offer=offer.key, client_token=token,
            state=InstanceState.PENDING, launched_at=self._clock(),
            tags={**request.tags, launching.CLIENT_TOKEN_TAG: token})
        self.tracker.launched(instance, region)
        return instance

    def terminate(self, instance_id: str) -> None:
        """Release ``instance_id`` (``DeleteInstance``, ``Force=true``). Quiet when it is
        already gone or never existed. The region is the one it was seen in; an unknown id is
        tried in every region. Raises ``AuthError``/``TransientError``."""
        known = self.tracker.region_of(instance_id)
        for region in [known] if known else self.regions:
            try:
                self.client.delete_instance(region, instance_id)
            except NotFoundError:
                continue
            self.tracker.deleted(instance_id)
            return

    def describe(self, tags: dict[str, str] | None = None) -> list[Instance]:
        """Instances in the configured regions carrying every ``tags`` key=value (all when
        None). A spot instance ECS is reclaiming (``Recycling`` lock) carries a notice (action
        five minutes after it was first seen so); instances released since we last saw them
        are reported ``terminated`` for an hour (see :mod:`.tracking`). Raises the first
        failure when ANY region fails, so that no caller takes a missing instance for a
        released one."""
        results = self._per_region(lambda region: self._region_instances(region, tags or {}))
        out: list[Instance] = []
        for result in results.values():
            if isinstance(result, ProviderError):
                raise result
            out.extend(result)
        return out

    def unavailable_reason(self, key: OfferKey) -> str | None:
        """Why ``key`` cannot be launched now: a capacity error at a launch in the last 3 min,
        a region or market not configured, or no vSwitch for its zone; else None. No API call."""
        if key.provider != PROVIDER or key.region not in self.regions:
            return f"region {key.region} is not configured for aliyun"
        if key.market not in self.settings.markets:
            return f"market {key.market.value} is not configured for aliyun"
        launch = self.settings.launch
        if launch is not None and key.zone not in launch.vswitches:
            return f"no vSwitch configured for zone {key.zone}"
        return self._unavailable.get(key)

    def close(self) -> None:
        """Stop the region workers and close the HTTP sessions. Instances keep running."""
        self._pool.shutdown(wait=True, cancel_futures=True)
        self.client.close()

    # ----- beyond the protocol ---------------------------------------------------------------
    def check(self) -> list[CheckResult]:
        """Credentials and permissions, one cheap call each: ``DescribeRegions`` (and whether
        every configured region exists), then per region ``DescribeAvailableResource`` and
        ``DescribeInstances``. Never raises."""
        source = self.client.credentials_source()
        rows = [CheckResult(PROVIDER, "-", "credentials", source is not None,
                            f"found via {source}" if source else
                            "none: set ALIBABA_CLOUD_ACCESS_KEY_ID/_SECRET or ecs_ram_role")]
        try:
            known = {r.get("RegionId") for r in self.client.describe_regions(self.regions[0])}
            missing = [r for r in self.regions if r not in known]
            rows.append(CheckResult(PROVIDER, "-", "DescribeRegions", not missing,
                                    f"unknown region(s) {missing}" if missing else "ok"))
        except ProviderError as exc:
            rows.append(CheckResult(PROVIDER, "-", "DescribeRegions", False,
                                    f"{type(exc).__name__}: {exc}"))
        probes: dict[str, Callable[[str], Any]] = {
            "DescribeAvailableResource": lambda r: self.client.available_zones(r, spot=True),
            "DescribeInstances": lambda r: self.client.call(r, "DescribeInstances",
                                                            {"MaxResults": 1}),
        }
        for region in self.regions:
            for label, probe in probes.items():
                try:
                    probe(region)
                    rows.append(CheckResult(PROVIDER, region, label, True, "ok"))
                except ProviderError as exc:
                    rows.append(CheckResult(PROVIDER, region, label, False,
                                            f"{type(exc).__name__}: {exc}"))
        return rows

    # ----- per region: offers and prices -----------------------------------------------------
    def _per_region(self, fn: Callable[[str], T]) -> dict[str, T | ProviderError]:
        futures = {region: self._pool.submit(fn, region) for region in self.regions}
        results: dict[str, T | ProviderError] = {}
        for region, future in futures.items():
            try:
                results[region] = future.result()
            except ProviderError as exc:
                results[region] = exc
        return results

    def _check_region(self, region: str) -> None:
        known = self._region_ids.get_or_load("all", lambda: frozenset(
            str(r.get("RegionId")) for r in self.client.describe_regions(self.regions[0])))
        if region not in known:
            raise ProviderError(f"aliyun region {region} is not in DescribeRegions "
                                f"({', '.join(sorted(known)) or 'none'})", provider=PROVIDER,
                                code="UnknownRegion")

    def _gpu_types(self, region: str) -> dict[str, translate.GpuInstanceType]:
        def load() -> dict[str, translate.GpuInstanceType]:
            types, skipped = translate.gpu_instance_types(
                self.client.iter_instance_types(region), self.settings.instance_types)
            if skipped:
                log.warning("aliyun %s: skipped %d malformed GPU instance types", region, skipped)
            return types
        return self._types.get_or_load(region, load)

    def _market_zones(self, region: str, market: Market) -> dict[str, tuple[str, ...]]:
        return self._zones.get_or_load((region, market), lambda: translate.zones_by_type(
            self.client.available_zones(region, spot=market is Market.SPOT,
                                        spot_duration_h=self.settings.spot_duration_h)))

    def _on_demand_prices(self, region: str, types: list[str]) -> _OnDemand:
        """List prices of ``types``; a type ECS has no price for (or that fails with anything
        but auth/transient errors) is left out with a warning."""
        def load() -> _OnDemand:
            prices: dict[str, tuple[float, str]] = {}
            for itype in types:
                try:
                    prices[itype] = translate.on_demand_price(
                        self.client.describe_price(region, itype), self.currencies)
                except (AuthError, TransientError):
                    raise
                except (ProviderError, ValueError) as exc:
                    log.warning("aliyun on-demand price of %s in %s unavailable: %s",
                                itype, region, exc)
            return _OnDemand(prices, self._clock())
        return self._on_demand.get_or_load(region, load)

    def _spot_records(self, region: str, types: list[str], start: datetime
                      ) -> list[translate.SpotPrice]:
        prices: list[translate.SpotPrice] = []
        for itype in types:
            records = self.client.iter_spot_prices(region, itype, start,
                                                   spot_duration_h=self.settings.spot_duration_h)
            parsed, skipped = translate.spot_prices(records, region, self.currencies)
            if skipped:
                log.warning("aliyun spot prices of %s in %s: skipped %d malformed records",
                            itype, region, skipped)
            prices += parsed
        return prices

    def _risks(self, region: str, types: list[str]) -> dict[tuple[str | None, str], float]:
        try:
            return self._advice.get_or_load(region, lambda: translate.advice_risks(
                self.client.spot_advice(region, types)))
        except (AuthError, TransientError):
            raise
        except ProviderError as exc:
            log.warning("aliyun spot advice for %s unavailable (unknown risk used): %s",
                        region, exc)
            return {}

    def _region_offers(self, region: str) -> list[Offer]:
        self._check_region(region)
        types = self._gpu_types(region)
        if not types:
            return []
        zones = {m: {t: z for t, z in self._market_zones(region, m).items() if t in types}
                 for m in self.settings.markets}
        sold = sorted({t for by_type in zones.values() for t in by_type})
        if not sold:
            return []
        on_demand = self._on_demand_prices(region, sold)
        spot_types = sorted(zones.get(Market.SPOT, {}))
        now = self._clock()
        spot = translate.latest_spot_prices(self._spot_records(
            region, spot_types, now - timedelta(seconds=CURRENT_SPOT_WINDOW_S)))
        risks = self._risks(region, spot_types) if spot_types else {}
        launch = self.settings.launch
        pairs, warnings = translate.build_offers(
            region, types, zones, on_demand.prices, spot, risks, self.currencies,
            unknown_risk=self.settings.unknown_interruption_risk, observed_at=now,
            launchable_zones=list(launch.vswitches) if launch else None)
        for warning in warnings:
            log.warning("aliyun offers in %s: %s", region, warning)
        with self._lock:
            for offer, native in pairs:
                self._native[offer.key] = native
        self._log_conversion(region, [native for _, native in pairs])
        return [offer for offer, _ in pairs]

    def _log_conversion(self, region: str, natives: list[translate.NativePrice]) -> None:
        """Once per currency: which rate turned it into USD (the native prices stay in
        :meth:`native_price`); every poll at DEBUG."""
        for currency in sorted({n.currency for n in natives}):
            rate = next(n.usd_per_unit for n in natives if n.currency == currency)
            count = sum(1 for n in natives if n.currency == currency)
            message = ("aliyun %s: %d offer prices in %s, converted to USD at %s USD/%s",
                       region, count, currency, rate, currency)
            with self._lock:
                first = currency not in self._logged_rates
                self._logged_rates.add(currency)
            (log.info if first and currency != "USD" else log.debug)(*message)

    def _region_prices(self, region: str, start: datetime,
                       since: datetime | None) -> list[PriceObservation]:
        self._check_region(region)
        types = self._gpu_types(region)
        sold = sorted({t for m in self.settings.markets
                       for t in self._market_zones(region, m) if t in types})
        if not sold:
            return []
        with self._lock:
            missed = self._missed_since.get(region)
        records = self._spot_records(region, sold, min(start, missed) if missed else start)
        observations, no_rate = translate.price_observations(
            records, region, self.currencies, self.settings.markets)
        if no_rate:
            log.warning("aliyun prices in %s: %d records left out, no exchange rate for their "
                        "currency", region, no_rate)
        if Market.ON_DEMAND in self.settings.markets:
            on_demand = self._on_demand_prices(region, sold)
            if since is None or on_demand.fetched_at > since:
                observations += translate.on_demand_observations(
                    region, self._market_zones(region, Market.ON_DEMAND), on_demand.prices,
                    self.currencies, on_demand.fetched_at)
        return observations

    # ----- per region: instances -------------------------------------------------------------
    def _region_instances(self, region: str, tags: dict[str, str] | None = None,
                          instance_ids: list[str] | None = None) -> list[Instance]:
        out: list[Instance] = []
        for raw in self.client.iter_instances(region, tags, instance_ids):
            try:
                notice = self.tracker.notice_for(str(raw.get("InstanceId")),
                                                 translate.is_recycling(raw))
                instance = translate.instance_from_api(
                    raw, region, client_token_tag=launching.CLIENT_TOKEN_TAG, notice=notice)
            except ValueError as exc:
                log.warning("aliyun describe %s: skipping an instance: %s", region, exc)
                continue
            self.tracker.listed(instance, region)
            out.append(instance)
        if instance_ids is None:
            out += self.tracker.unlisted(region, tags or {}, [i.id for i in out])
        return out

    def _launch_region(self, offer: Offer) -> str:
        if offer.provider != PROVIDER or offer.region not in self.regions:
            raise ProviderError(f"aliyun cannot launch {offer.key.series()}: region "
                                f"{offer.region} is not configured", provider=PROVIDER)
        if self.settings.launch is None:
            raise ProviderError("aliyun launch is not configured: add a 'launch' section "
                                "(image_id, vswitches, security_groups…) to the aliyun entry",
                                provider=PROVIDER, code="LaunchNotConfigured")
        if offer.zone not in self.settings.launch.vswitches:
            raise ProviderError(f"aliyun launch: no vSwitch configured for zone {offer.zone} "
                                "(launch.vswitches)", provider=PROVIDER,
                                code="LaunchNotConfigured")
        return offer.region

    def _run_params(self, request: LaunchRequest, region: str) -> dict[str, Any]:
        cfg = self.settings.launch
        assert cfg is not None
        offer = request.offer
        limit = None
        if offer.market is Market.SPOT and cfg.spot_strategy == "SpotWithPriceLimit":
            limit = self._on_demand_native(offer) * cfg.spot_price_limit_ratio
        try:
            user_data = launching.render_user_data(request.agent_env, pip_spec=cfg.agent_pip_spec,
                                                   venv=cfg.agent_venv)
            return launching.run_instances_params(
                offer=offer, client_token=request.client_token, tags=request.tags,
                user_data=user_data, image_id=cfg.image_for(region) or "",
                vswitch_id=cfg.vswitches[offer.zone],
                security_group_id=cfg.security_groups[region],
                spot_strategy=cfg.spot_strategy, spot_price_limit=limit,
                spot_duration_h=self.settings.spot_duration_h,
                system_disk_category=cfg.system_disk_category,
                system_disk_size_gib=cfg.system_disk_size_gib,
                internet_max_bandwidth_out_mbps=cfg.internet_max_bandwidth_out_mbps,
                key_pair_name=cfg.key_pair_name, ram_role_name=cfg.ram_role_name)
        except ValueError as exc:
            raise ProviderError(f"aliyun launch of {offer.key.series()}: {exc}",
                                provider=PROVIDER, code="InvalidLaunchRequest") from None

    def _on_demand_native(self, offer: Offer) -> float:
        """The offer's on-demand price in the account's currency (what SpotPriceLimit is in):
        the recorded native price, else the USD price converted back at the site's rate."""
        native = self.native_price(offer.key)
        if native is not None and native.on_demand_price:
            return native.on_demand_price
        if offer.on_demand_price_usd_per_hour:
            return offer.on_demand_price_usd_per_hour / self.currencies.rate(None)
        raise ProviderError(f"aliyun launch of {offer.key.series()}: SpotWithPriceLimit needs "
                            "the on-demand price, which this offer lacks", provider=PROVIDER,
                            code="InvalidLaunchRequest")

    def _find_by_token(self, region: str, client_token: str) -> Instance | None:
        """The instance launched with ``client_token`` (its tag), in whatever state, including
        one launched a moment ago and not listed yet (remembered by the tracker)."""
        for instance in self._region_instances(region,
                                               {launching.CLIENT_TOKEN_TAG: client_token}):
            if instance.client_token == client_token:
                return instance
        return None


def _raise_if_all_failed(results: dict[str, Any]) -> None:
    errors = [r for r in results.values() if isinstance(r, ProviderError)]
    if errors and len(errors) == len(results):
        raise errors[0]
