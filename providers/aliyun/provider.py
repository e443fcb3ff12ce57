"""``AliyunProvider``: Alibaba Cloud ECS as a :class:`providers.regional.RegionalCompute` (the
base fans out over regions and launches by client token; this module answers per region).

It composes :mod:`.client` (SDK calls) with :mod:`.translate`/:mod:`.launch` (pure) and the
TTLs below. Per poll and region:

- the region exists (``DescribeRegions``, cached 24 h);
- GPU instance types (``DescribeInstanceTypes``, 24 h);
- zones with stock per market (``DescribeAvailableResource``, 2 min);
- on-demand list prices (``DescribePrice`` per type, 12 h);
- spot prices (``DescribeSpotPriceHistory`` per type, every zone): the last 3 h for offers,
  everything since the last poll (never beyond ECS's 30 days) for prices, each record both a
  spot (``SpotPrice``) and an on-demand (``OriginPrice``) observation;
- interruption risk (``DescribeSpotAdvice``, 1 h); a type it does not rate is offered
  unrated (``interruption_risk`` None).

Prices arrive in the account's currency and are converted to USD (``exchange_rates_usd``);
``AliyunProvider.native_prices`` (a :class:`providers.regional_api.NativePrices`) keeps what
ECS said.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from core.models import Instance, Market, Offer, PriceObservation
from providers.aliyun import instances, translate
from providers.aliyun import launch as launching
from providers.aliyun.client import SPOT_HISTORY_MAX_DAYS, AliyunClient
from providers.aliyun.settings import AliyunSettings
from providers.base import Checked, CheckResult, LaunchRequest
from providers.cache import TTLCache
from providers.errors import AuthError, ProviderError, TransientError
from providers.regional import RegionalCompute
from providers.regional_api import (
    Currencies,
    ListPrices,
    NativePrices,
    latest_prices,
    logged_skips,
)
from providers.regional_instances import pending_instance

log = logging.getLogger(__name__)
PROVIDER = "aliyun"
# TTLs of the caches (seconds). The region list changes when Alibaba opens a region: a day
# keeps DescribeRegions to one call.
REGIONS_TTL_S = 24 * 3600.0
# GPU instance types' hardware never changes; new types appear a few times a year.
INSTANCE_TYPES_TTL_S = 24 * 3600.0
# Stock (DescribeAvailableResource) moves within minutes; two calls per region (spot and
# on-demand) every two minutes is cheap and keeps sold-out zones out of the offers.
AVAILABLE_RESOURCES_TTL_S = 120.0
# Pay-as-you-go list prices change a few times a year (as AWS's; Karpenter refreshes them
# every 12 h). One DescribePrice per type and region.
ON_DEMAND_PRICES_TTL_S = 12 * 3600.0
# DescribeSpotAdvice rates are 30-day averages: refreshing hourly changes nothing that matters.
SPOT_ADVICE_TTL_S = 3600.0
# The current spot price is the latest DescribeSpotPriceHistory record of the last 3 hours:
# the API's own default window, and ECS writes a record per zone at least hourly.
CURRENT_SPOT_WINDOW_S = 3 * 3600.0


class AliyunProvider(RegionalCompute, Checked):
    """GPU offers, prices and instances on Alibaba Cloud ECS (spot and pay-as-you-go).

    - **settings**: the validated ``kind: aliyun`` entry (:class:`AliyunSettings`).
    - **client**: an :class:`AliyunClient` to use instead of building one from ``settings``.
    - **clock**: aware-UTC now (default the wall clock; injectable for tests).

    Every method may block on ECS calls (5 s connect / 30 s read timeouts per request,
    ``max_attempts`` tries on throttling). With ``launch`` configured, zones without a vSwitch
    are neither offered nor launched in. Launch is ``RunInstances`` with ``ClientToken`` (also
    recorded as a tag, which ECS lets us look up); terminate is ``DeleteInstance`` with
    ``Force``. A ``Recycling`` spot instance carries a notice (action five minutes after it was
    first listed so); describe adds, for an hour, instances ECS released and no longer lists
    (:mod:`providers.regional_instances`).
    """

    name = PROVIDER
    # The same boot as on EC2: a GPU VM starts, pip-installs Python packages and the agent
    # before its first report; ECS images are no faster, so the same 15 minutes.
    agent_start_timeout_s = 900.0
    launch_fields = "image_id, vswitches, security_groups…"
    idempotency_codes = frozenset({"IdempotentParameterMismatch", "IdempotentProcessing"})
    history_max_days = SPOT_HISTORY_MAX_DAYS

    def __init__(self, settings: AliyunSettings, *, client: AliyunClient | None = None,
                 clock: Callable[[], datetime] | None = None) -> None:
        super().__init__(settings, client or AliyunClient(
            settings.regions, endpoint_url=settings.endpoint_url,
            ecs_ram_role=settings.ecs_ram_role, max_attempts=settings.max_attempts,
            retry_base_wait_s=settings.retry_base_wait_s,
            retry_max_wait_s=settings.retry_max_wait_s), clock=clock)
        self.settings: AliyunSettings = settings
        self.client: AliyunClient
        self.currencies = Currencies(settings.default_currency, dict(settings.exchange_rates_usd))
        self._region_ids: TTLCache[str, frozenset[str]] = TTLCache("regions", REGIONS_TTL_S)
        self._types: TTLCache[str, dict[str, translate.GpuInstanceType]] = TTLCache(
            "instance types", INSTANCE_TYPES_TTL_S)
        self._zones: TTLCache[tuple[str, Market], dict[str, tuple[str, ...]]] = TTLCache(
            "available resources", AVAILABLE_RESOURCES_TTL_S)
        self._on_demand: TTLCache[str, ListPrices[tuple[float, str]]] = TTLCache(
            "on-demand prices", ON_DEMAND_PRICES_TTL_S)
        self._advice: TTLCache[str, dict[tuple[str | None, str], float]] = TTLCache(
            "spot advice", SPOT_ADVICE_TTL_S)
        self.native_prices = NativePrices(PROVIDER)

    def check(self) -> list[CheckResult]:
        """Credentials and permissions, one cheap call each: ``DescribeRegions`` (and whether
        every configured region exists), then per region ``DescribeAvailableResource`` and
        ``DescribeInstances``. Never raises."""
        rows = [self._credentials_row(
            "none: set ALIBABA_CLOUD_ACCESS_KEY_ID/_SECRET or ecs_ram_role")]
        rows.append(self._check_row("-", "DescribeRegions",
                                    lambda: self._check_regions(self.regions, fresh=True)))
        probes: dict[str, Callable[[str], Any]] = {
            "DescribeAvailableResource": lambda r: self.client.available_zones(r, spot=True),
            "DescribeInstances": lambda r: self.client.call(r, "DescribeInstances",
                                                            {"MaxResults": 1}),
        }
        return rows + [self._check_row(region, label, lambda r=region, p=probe: p(r))
                       for region in self.regions for label, probe in probes.items()]

    # ----- cached lookups --------------------------------------------------------------------
    def _check_regions(self, regions: list[str], fresh: bool = False) -> None:
        """Raises ``UnknownRegion`` naming the regions DescribeRegions does not list (its
        cached answer unless ``fresh``)."""
        def load() -> frozenset[str]:
            return frozenset(str(r.get("RegionId"))
                             for r in self.client.describe_regions(self.regions[0]))
        known = load() if fresh else self._region_ids.get_or_load("all", load)
        unknown = [r for r in regions if r not in known]
        if unknown:
            raise ProviderError(f"aliyun region {', '.join(unknown)} is not in DescribeRegions "
                                f"({', '.join(sorted(known)) or 'none'})", provider=PROVIDER,
                                code="UnknownRegion")

    def _gpu_types(self, region: str) -> dict[str, translate.GpuInstanceType]:
        return self._types.get_or_load(region, lambda: logged_skips(translate.gpu_instance_types(
            self.client.iter_instance_types(region), self.settings.wants_type),
            f"aliyun {region}: GPU instance types"))

    def _market_zones(self, region: str, market: Market) -> dict[str, tuple[str, ...]]:
        """type → zones with stock, for the GPU types this entry wants."""
        types = self._gpu_types(region)
        zones = self._zones.get_or_load((region, market), lambda: translate.zones_by_type(
            self.client.available_zones(region, spot=market is Market.SPOT,
                                        spot_duration_h=self.settings.spot_duration_h)))
        return {t: z for t, z in zones.items() if t in types}

    def _sold(self, region: str) -> list[str]:
        """GPU types with stock in any configured market of ``region``."""
        return sorted({t for m in self.settings.markets for t in self._market_zones(region, m)})

    def _on_demand_prices(self, region: str,
                          types: list[str]) -> ListPrices[tuple[float, str]]:
        """List prices of ``types``; a type ECS has no price for (or that fails with anything
        but auth/transient errors) is left out with a warning."""
        def load() -> ListPrices[tuple[float, str]]:
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
            return ListPrices(prices, self._clock())
        return self._on_demand.get_or_load(region, load)

    def _spot_records(self, region: str, types: list[str], start: datetime
                      ) -> list[translate.SpotPrice]:
        prices: list[translate.SpotPrice] = []
        for itype in types:
            records = self.client.iter_spot_prices(region, itype, start,
                                                   spot_duration_h=self.settings.spot_duration_h)
            prices += logged_skips(translate.spot_prices(records, region, self.currencies),
                                   f"aliyun spot prices of {itype} in {region}: records")
        return prices

    def _risks(self, region: str, types: list[str]) -> dict[tuple[str | None, str], float]:
        try:
            return self._advice.get_or_load(region, lambda: translate.advice_risks(
                self.client.spot_advice(region, types)))
        except (AuthError, TransientError):
            raise
        except ProviderError as exc:
            log.warning("aliyun spot advice for %s unavailable (offers unrated): %s",
                        region, exc)
            return {}

    # ----- per region: offers and prices -----------------------------------------------------
    def _region_offers(self, region: str) -> list[Offer]:
        self._check_regions([region])
        zones = {m: self._market_zones(region, m) for m in self.settings.markets}
        sold = self._sold(region)
        if not sold:
            return []
        on_demand = self._on_demand_prices(region, sold)
        spot_types = sorted(zones.get(Market.SPOT, {}))
        now = self._clock()
        spot = latest_prices(self._spot_records(
            region, spot_types, now - timedelta(seconds=CURRENT_SPOT_WINDOW_S)))
        risks = self._risks(region, spot_types) if spot_types else {}
        launch = self.settings.launch
        pairs, warnings = translate.build_offers(
            region, self._gpu_types(region), zones, on_demand.prices, spot, risks,
            self.currencies, observed_at=now,
            launchable_zones=list(launch.vswitches) if launch else None)
        for warning in warnings:
            log.warning("aliyun offers in %s: %s", region, warning)
        return self.native_prices.record(region, pairs)

    def _region_prices(self, region: str, start: datetime,
                       since: datetime | None) -> list[PriceObservation]:
        self._check_regions([region])
        sold = self._sold(region)
        if not sold:
            return []
        observations, no_rate = translate.price_observations(
            self._spot_records(region, sold, start), region, self.currencies,
            self.settings.markets)
        if no_rate:
            log.warning("aliyun prices in %s: %d records left out, no exchange rate for their "
                        "currency", region, no_rate)
        return observations + self._list_price_observations(
            region, since, lambda: self.currencies.usd_prices(self._on_demand_prices(region, sold)),
            lambda: self._market_zones(region, Market.ON_DEMAND))

    # ----- per region: instances -------------------------------------------------------------
    def _region_instances(self, region: str, tags: dict[str, str],
                          instance_ids: list[str] | None = None) -> list[Instance]:
        out: list[Instance] = []
        for raw in self.client.iter_instances(region, tags, instance_ids):
            try:
                since = self.memory.flagged_since(str(raw.get("InstanceId")),
                                                  instances.is_recycling(raw))
                out.append(instances.instance_from_api(
                    raw, region, client_token_tag=launching.CLIENT_TOKEN_TAG,
                    notice=instances.recycling_notice(since, self._clock()) if since else None))
            except ValueError as exc:
                log.warning("aliyun describe %s: skipping an instance: %s", region, exc)
        return out

    def _find_by_token(self, region: str, client_token: str) -> Instance | None:
        """The listed instance launched with ``client_token`` (its tag), in whatever state."""
        return next((i for i in self._region_instances(
            region, {launching.CLIENT_TOKEN_TAG: client_token}) if i.client_token == client_token),
            None)

    def _launch_region(self, offer: Offer) -> str:
        region = super()._launch_region(offer)
        if offer.zone not in self.settings.launch.vswitches:  # type: ignore[union-attr]
            raise ProviderError(f"aliyun launch: no vSwitch configured for zone {offer.zone} "
                                "(launch.vswitches)", provider=PROVIDER,
                                code="LaunchNotConfigured")
        return region

    def _run_instance(self, request: LaunchRequest, region: str,
                      params: dict[str, Any]) -> Instance:
        """The new instance as listed, else (ECS lists it a moment later) ``pending``."""
        instance_id = self.client.run_instance(region, params)
        listed = self._region_instances(region, {}, instance_ids=[instance_id])
        return listed[0] if listed else pending_instance(
            instance_id, request, self._clock(), {launching.CLIENT_TOKEN_TAG: request.client_token})

    def _terminate_in(self, region: str, instance_id: str) -> None:
        self.client.delete_instance(region, instance_id)

    def _run_params(self, request: LaunchRequest, region: str) -> dict[str, Any]:
        cfg = self.settings.launch
        assert cfg is not None
        offer = request.offer
        limit = None
        if offer.market is Market.SPOT and cfg.spot_strategy == "SpotWithPriceLimit":
            limit = self._on_demand_native(offer) * cfg.spot_price_limit_ratio
        user_data = launching.render_user_data(request.agent_env, pip_spec=cfg.agent_pip_spec,
                                               venv=cfg.agent_venv)
        return launching.run_instances_params(
            offer=offer, client_token=request.client_token, tags=request.tags,
            user_data=user_data, image_id=cfg.image_for(region) or "",
            vswitch_id=cfg.vswitches[offer.zone], security_group_id=cfg.security_groups[region],
            spot_strategy=cfg.spot_strategy, spot_price_limit=limit,
            spot_duration_h=self.settings.spot_duration_h,
            system_disk_category=cfg.system_disk_category,
            system_disk_size_gib=cfg.system_disk_size_gib,
            internet_max_bandwidth_out_mbps=cfg.internet_max_bandwidth_out_mbps,
            key_pair_name=cfg.key_pair_name, ram_role_name=cfg.ram_role_name)

    def _on_demand_native(self, offer: Offer) -> float:
        """The offer's on-demand price in the account's currency (what SpotPriceLimit is in):
        the recorded native price, else the USD price converted back at the site's rate."""
        native = self.native_prices.get(offer.key)
        if native is not None and native.on_demand_price:
            return native.on_demand_price
        if offer.on_demand_price_usd_per_hour:
            return offer.on_demand_price_usd_per_hour / self.currencies.rate(None)
        raise ProviderError(f"aliyun launch of {offer.key.series()}: SpotWithPriceLimit needs "
                            "the on-demand price, which this offer lacks", provider=PROVIDER,
                            code="InvalidLaunchRequest")
