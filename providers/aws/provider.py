"""``AwsProvider``: the Provider protocol over EC2, the Price List API and the Spot Advisor.

It composes :mod:`.client` (boto3 calls) and :mod:`.translate`/:mod:`.launch` (pure), with the
caches of :mod:`.cache`. Per poll and region:

- GPU instance types (``describe_instance_types``, cached 24 h) and the zones offering them
  (``describe_instance_type_offerings``, 1 h);
- on-demand list prices (``pricing.get_products``, 12 h);
- current spot prices (``describe_spot_price_history`` with ``StartTime`` = now: the price in
  effect in every zone) for :meth:`list_offers`, and every price change since the last poll
  for :meth:`poll_prices`;
- interruption risk from the Spot Advisor (disk cache, 6 h).

Regions are polled in parallel (one worker per region, at most 16). A region that fails keeps
its last good offers for up to an hour; only when every region fails does a call raise.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from providers.aws import launch as launching
from providers.aws import translate
from providers.aws.advisor import SpotAdvisor
from providers.aws.cache import (
    INSTANCE_TYPE_OFFERINGS_TTL_S,
    INSTANCE_TYPES_TTL_S,
    LAST_GOOD_OFFERS_MAX_AGE_S,
    ON_DEMAND_PRICES_TTL_S,
    UNAVAILABLE_OFFER_TTL,
)
from providers.aws.client import AwsClient
from providers.aws.settings import DEFAULT_SPOT_ADVISOR_URL, AwsSettings
from providers.base import LaunchRequest
from providers.cache import TTLCache
from providers.errors import CapacityError, NotFoundError, ProviderError
from scheduler.models import Instance, Market, Offer, OfferKey, PriceObservation, utcnow

log = logging.getLogger(__name__)
PROVIDER = "aws"
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
    prices: dict[str, float]
    fetched_at: datetime


class AwsProvider:
    """GPU offers, prices and instances on AWS EC2 (spot and on-demand).

    - **settings**: the validated ``kind: aws`` entry (:class:`AwsSettings`).
    - **cache_dir**: folder for the Spot Advisor download (e.g. ``GA_HOME/aws``).
    - **client**: an :class:`AwsClient` to use instead of building one from ``settings``.
    - **advisor**: a :class:`SpotAdvisor` to use instead of the one built from ``settings``.
    - **clock**: aware-UTC now (injectable, so recorded price history can be replayed).

    ``name`` is ``"aws"``, ``time_scale`` 1.0. Every method may block on AWS API calls (botocore
    adaptive retries, 5 s connect / 30 s read timeouts per request). Thread-safe.
    ``requests`` counts HTTP requests made per operation (for benchmarks and tests).
    """

    name = PROVIDER
    time_scale = 1.0
    # A GPU instance boots, installs Python packages and the agent before its first report.
    agent_start_timeout_s = 900.0

    def __init__(self, settings: AwsSettings, cache_dir: Path, *,
                 client: AwsClient | None = None, advisor: SpotAdvisor | None = None,
                 clock: Callable[[], datetime] = utcnow) -> None:
        self.settings = settings
        self.regions = list(settings.regions)
        self.client = client or AwsClient(
            self.regions, pricing_region=settings.pricing_region,
            endpoint_url=settings.endpoint_url, pricing_endpoint_url=settings.pricing_endpoint_url,
            profile=settings.profile, max_attempts=settings.max_attempts)
        self.advisor = advisor or SpotAdvisor(
            settings.spot_advisor_url, Path(cache_dir) / _advisor_file_name(settings.spot_advisor_url))
        self._clock = clock
        self._types: TTLCache[str, dict[str, translate.GpuInstanceType]] = TTLCache(
            "instance types", INSTANCE_TYPES_TTL_S)
        self._zones: TTLCache[str, dict[str, tuple[str, ...]]] = TTLCache(
            "instance type offerings", INSTANCE_TYPE_OFFERINGS_TTL_S)
        self._on_demand: TTLCache[str, _OnDemand] = TTLCache(
            "on-demand prices", ON_DEMAND_PRICES_TTL_S)
        self._unavailable: TTLCache[OfferKey, str] = TTLCache(
            "unavailable offers", UNAVAILABLE_OFFER_TTL)
        self._lock = threading.Lock()
        self._last_offers: dict[str, tuple[datetime, list[Offer]]] = {}
        self._missed_since: dict[str, datetime] = {}  # region → start of a failed history poll
        self._region_of: dict[str, str] = {}  # instance id → region
        self._pool = ThreadPoolExecutor(max_workers=min(MAX_REGION_WORKERS, len(self.regions)),
                                        thread_name_prefix="aws-region")

    @property
    def requests(self) -> dict[str, int]:
        return self.client.requests.snapshot()

    # ----- Provider protocol: offers and prices ----------------------------------------------
    def list_offers(self) -> list[Offer]:
        """Every GPU offer rentable now in the configured regions and markets.

        On-demand offers: each zone offering the type, at the region's list price. Spot offers:
        each zone with a current spot price, with the Spot Advisor risk. Offers that failed
        with a capacity error at a launch in the last 3 min are left out. A region that fails
        contributes its last good offers (≤ 1 h old) and a warning. Raises the first region's
        ``AuthError``/``TransientError``/``ProviderError`` only when every region failed.
        """
        results = self._per_region(self._region_offers)
        now = self._clock()
        offers: list[Offer] = []
        for region, result in results.items():
            if isinstance(result, ProviderError):
                with self._lock:
                    last = self._last_offers.get(region)
                if last and (now - last[0]).total_seconds() <= LAST_GOOD_OFFERS_MAX_AGE_S:
                    log.warning("aws offers for %s failed, keeping %d offers from %s: %s",
                                region, len(last[1]), last[0].isoformat(), result)
                    offers.extend(last[1])
                else:
                    log.warning("aws offers for %s failed: %s", region, result)
                continue
            with self._lock:
                self._last_offers[region] = (now, result)
            offers.extend(result)
        self._raise_if_all_failed(results)
        return [o for o in offers if self._unavailable.get(o.key) is None]

    def poll_prices(self, since: datetime | None = None) -> list[PriceObservation]:
        """Price observations newer than ``since`` (aware UTC).

        Spot: every ``describe_spot_price_history`` record from ``since`` (or
        ``history_lookback_h`` ago when None) to now, stamped with the time the price took
        effect; AWS adds the price in effect at ``since`` (already stored: the store ignores
        duplicates). A region that failed last time is asked again from where it missed.
        On-demand: one observation per (zone, type) when the list prices were fetched after
        ``since``. Raises like :meth:`list_offers` when every region failed.
        """
        start = since or (self._clock() - timedelta(hours=self.settings.history_lookback_h))
        results = self._per_region(lambda region: self._region_prices(region, start, since))
        observations: list[PriceObservation] = []
        for region, result in results.items():
            if isinstance(result, ProviderError):
                log.warning("aws price history for %s failed (will ask again from %s): %s",
                            region, start.isoformat(), result)
                with self._lock:
                    self._missed_since[region] = min(start, self._missed_since.get(region, start))
                continue
            with self._lock:
                self._missed_since.pop(region, None)
            observations.extend(result)
        self._raise_if_all_failed(results)
        return observations

    # ----- Provider protocol: instances ------------------------------------------------------
    def launch(self, request: LaunchRequest) -> Instance:
        """Launch one instance for ``request.offer`` (spot or on-demand) with ``run_instances``.

        Idempotent: an instance already carrying ``client_token`` (``describe_instances``
        filter ``client-token``) is returned as is, and ``ClientToken`` makes EC2 itself return
        the first instance for a repeated request. Returns the instance, usually ``pending``.
        Raises ``CapacityError`` (the offer is then reported by :meth:`unavailable_reason` for
        3 min), ``QuotaError``, ``AuthError``, ``TransientError``, or ``ProviderError`` when
        the offer is not an AWS offer of a configured region or ``launch`` is not configured.
        """
        offer = request.offer
        region = self._launch_region(offer)
        existing = self._find_by_token(region, request.client_token)
        if existing is not None:
            return existing
        params = self._run_params(request, region)
        try:
            raw = self.client.run_instance(region, params)
        except CapacityError as exc:
            self._unavailable.put(offer.key, f"no capacity ({exc.code}) at the last launch")
            raise
        except ProviderError as exc:
            if exc.code == "IdempotentParameterMismatch":
                existing = self._find_by_token(region, request.client_token)
                if existing is not None:
                    return existing
            raise
        instance = translate.instance_from_api(raw, region)
        if not instance.client_token:
            instance = instance.model_copy(update={"client_token": request.client_token})
        with self._lock:
            self._region_of[instance.id] = region
        return instance

    def terminate(self, instance_id: str) -> None:
        """Terminate ``instance_id`` (``terminate_instances``). Quiet when it is already gone
        or never existed (``InvalidInstanceID.NotFound``). The region is the one it was seen
        in; an unknown id is tried in every region. Raises ``AuthError``/``TransientError``."""
        with self._lock:
            known = self._region_of.get(instance_id)
        for region in [known] if known else self.regions:
            try:
                self.client.terminate_instance(region, instance_id)
                return
            except NotFoundError:
                continue

    def describe(self, tags: dict[str, str] | None = None) -> list[Instance]:
        """Instances in the configured regions carrying every ``tags`` key=value (all instances
        when None), terminated ones included while EC2 still lists them (~1 h). A running spot
        instance whose request is ``marked-for-termination`` carries a notice (action at the
        mark + 2 min). Raises the first failure when ANY region fails, so that no caller takes
        a missing instance for a terminated one."""
        filters = [{"Name": f"tag:{k}", "Values": [v]} for k, v in (tags or {}).items()]
        results = self._per_region(lambda region: self._region_instances(region, filters))
        out: list[Instance] = []
        for result in results.values():
            if isinstance(result, ProviderError):
                raise result
            out.extend(result)
        return out

    def unavailable_reason(self, key: OfferKey) -> str | None:
        """Why ``key`` cannot be launched now: a capacity error at a launch in the last 3 min,
        a region not configured, or a market not offered; else None. No API call."""
        if key.provider != PROVIDER or key.region not in self.regions:
            return f"region {key.region} is not configured for aws"
        if key.market not in self.settings.markets:
            return f"market {key.market.value} is not configured for aws"
        return self._unavailable.get(key)

    def close(self) -> None:
        """Stop the region workers and close the HTTP clients. Instances keep running."""
        self._pool.shutdown(wait=True, cancel_futures=True)
        self.client.close()

    # ----- beyond the protocol ---------------------------------------------------------------
    def check(self) -> list[CheckResult]:
        """Credentials and permissions, one cheap call each: per region
        ``describe_instance_types``, ``describe_spot_price_history``, ``describe_instances``;
        once ``pricing:GetProducts``; and the Spot Advisor cache age. Never raises."""
        source = self.client.credentials_source()
        rows = [CheckResult(PROVIDER, "-", "credentials", source is not None,
                            f"found via {source}" if source else
                            "none in boto3's chain (env, ~/.aws, SSO, instance role)")]
        operations = ("describe_instance_types", "describe_spot_price_history",
                      "describe_instances")
        for region in self.regions:
            for op in operations:
                rows.append(self._probe(region, op))
        rows.append(self._probe(self.regions[0], "get_products", self.settings.pricing_region))
        age = self.advisor.cache_age_s()
        if age is None:
            self.advisor.risks(self.regions[0])  # fetch it now
            age = self.advisor.cache_age_s()
        rows.append(CheckResult(
            PROVIDER, "-", "spot advisor", age is not None,
            f"cache {self.advisor.cache_path} is {_age_text(age)} old (refreshed after "
            f"{self.advisor.max_age_s / 3600:.0f} h)" if age is not None
            else f"not cached and {self.advisor.url} unreachable"))
        return rows

    # ----- per region ------------------------------------------------------------------------
    def _per_region(self, fn: Callable[[str], T]) -> dict[str, T | ProviderError]:
        futures = {region: self._pool.submit(fn, region) for region in self.regions}
        results: dict[str, T | ProviderError] = {}
        for region, future in futures.items():
            try:
                results[region] = future.result()
            except ProviderError as exc:
                results[region] = exc
        return results

    @staticmethod
    def _raise_if_all_failed(results: dict[str, Any]) -> None:
        errors = [r for r in results.values() if isinstance(r, ProviderError)]
        if errors and len(errors) == len(results):
            raise errors[0]

    def _gpu_types(self, region: str) -> dict[str, translate.GpuInstanceType]:
        return self._types.get_or_load(region, lambda: translate.gpu_instance_types(
            self.client.iter_instance_types(region, self.settings.instance_types)))

    def _type_zones(self, region: str, types: list[str]) -> dict[str, tuple[str, ...]]:
        return self._zones.get_or_load(region, lambda: translate.zones_by_type(
            self.client.iter_type_offerings(region, types)))

    def _on_demand_prices(self, region: str, types: list[str]) -> _OnDemand | None:
        """The region's list prices; None (and a warning) when the Price List API fails and
        nothing was cached: spot offers are still worth listing."""
        def load() -> _OnDemand:
            prices, skipped = translate.on_demand_prices(self.client.iter_price_list(region),
                                                         types)
            if skipped:
                log.warning("aws pricing %s: skipped %d malformed product documents",
                            region, skipped)
            return _OnDemand(prices, self._clock())
        try:
            return self._on_demand.get_or_load(region, load)
        except ProviderError as exc:
            log.warning("aws on-demand prices for %s unavailable: %s", region, exc)
            return None

    def _region_offers(self, region: str) -> list[Offer]:
        types = self._gpu_types(region)
        if not types:
            return []
        names = sorted(types)
        zones = self._type_zones(region, names)
        on_demand = self._on_demand_prices(region, names)  # spot offers show it too
        spot: dict[tuple[str, str], translate.SpotPrice] = {}
        if Market.SPOT in self.settings.markets:
            prices, _ = translate.spot_prices(
                self.client.iter_spot_prices(region, names, start=self._clock()), region)
            spot = translate.latest_spot_prices(prices)
        risks = self.advisor.risks(region) if spot else {}
        return translate.build_offers(
            region, types, zones, on_demand.prices if on_demand else {}, spot, risks,
            markets=self.settings.markets,
            unknown_risk=self.settings.unknown_interruption_risk, observed_at=self._clock())

    def _region_prices(self, region: str, start: datetime,
                       since: datetime | None) -> list[PriceObservation]:
        types = self._gpu_types(region)
        if not types:
            return []
        names = sorted(types)
        with self._lock:
            missed = self._missed_since.get(region)
        observations: list[PriceObservation] = []
        if Market.SPOT in self.settings.markets:
            prices, skipped = translate.spot_prices(self.client.iter_spot_prices(
                region, names, start=min(start, missed) if missed else start), region)
            if skipped:
                log.warning("aws spot prices %s: skipped %d malformed records", region, skipped)
            observations += translate.spot_observations(prices, region)
        if Market.ON_DEMAND in self.settings.markets:
            on_demand = self._on_demand_prices(region, names)
            if on_demand and (since is None or on_demand.fetched_at > since):
                observations += translate.on_demand_observations(
                    region, self._type_zones(region, names), on_demand.prices,
                    on_demand.fetched_at)
        return observations

    def _region_instances(self, region: str, filters: list[dict[str, Any]],
                          with_notices: bool = True) -> list[Instance]:
        raws = list(self.client.iter_instances(region, filters))
        spot_running = [r["InstanceId"] for r in raws if with_notices
                        and r.get("InstanceLifecycle") == "spot"
                        and (r.get("State") or {}).get("Name") == "running"]
        notices = {}
        if spot_running:
            now = self._clock()
            for req in self.client.spot_requests(region, spot_running):
                notice = translate.notice_from_spot_request(req, now)
                if notice is not None and req.get("InstanceId"):
                    notices[req["InstanceId"]] = notice
        out = []
        for raw in raws:
            try:
                inst = translate.instance_from_api(raw, region, notices.get(raw.get("InstanceId")))
            except ValueError as exc:
                log.warning("aws describe %s: skipping an instance: %s", region, exc)
                continue
            out.append(inst)
        with self._lock:
            self._region_of.update({i.id: region for i in out})
        return out

    # ----- launch helpers --------------------------------------------------------------------
    def _launch_region(self, offer: Offer) -> str:
        if offer.provider != PROVIDER or offer.region not in self.regions:
            raise ProviderError(f"aws cannot launch {offer.key.series()}: region "
                                f"{offer.region} is not configured", provider=PROVIDER)
        if self.settings.launch is None:
            raise ProviderError("aws launch is not configured: add a 'launch' section (ami, "
                                "subnets, security_group_ids…) to the aws provider entry",
                                provider=PROVIDER, code="LaunchNotConfigured")
        return offer.region

    def _run_params(self, request: LaunchRequest, region: str) -> dict[str, Any]:
        cfg = self.settings.launch
        assert cfg is not None
        ami = cfg.ami_for(region)
        if ami is None:
            raise ProviderError(f"aws launch: no AMI configured for {region}", provider=PROVIDER,
                                code="LaunchNotConfigured")
        try:
            user_data = launching.render_user_data(request.agent_env, pip_spec=cfg.agent_pip_spec,
                                                   venv=cfg.agent_venv)
            return launching.run_instances_params(
                offer=request.offer, client_token=request.client_token, tags=request.tags,
                user_data=user_data, ami=ami, subnet_id=cfg.subnets.get(request.offer.zone),
                security_group_ids=cfg.security_group_ids, key_name=cfg.key_name,
                iam_instance_profile=cfg.iam_instance_profile)
        except ValueError as exc:
            raise ProviderError(f"aws launch of {request.offer.key.series()}: {exc}",
                                provider=PROVIDER, code="InvalidLaunchRequest") from None

    def _find_by_token(self, region: str, client_token: str) -> Instance | None:
        filters = [{"Name": "client-token", "Values": [client_token]}]
        for inst in self._region_instances(region, filters, with_notices=False):
            if inst.client_token == client_token:
                return inst
        return None

    def _probe(self, region: str, operation: str, where: str | None = None) -> CheckResult:
        label = f"{operation}" if operation != "get_products" else "pricing:GetProducts"
        try:
            self.client.probe(region, operation)
        except ProviderError as exc:
            return CheckResult(PROVIDER, where or region, label, False,
                               f"{type(exc).__name__}: {exc}")
        return CheckResult(PROVIDER, where or region, label, True, "ok")


def _advisor_file_name(url: str) -> str:
    """``spot-advisor-data.json`` for AWS's URL, else a name keyed by the URL's hash (two
    entries with different URLs must not share a cache file)."""
    if url == DEFAULT_SPOT_ADVISOR_URL:
        return "spot-advisor-data.json"
    return f"spot-advisor-{hashlib.sha256(url.encode()).hexdigest()[:10]}.json"


def _age_text(age_s: float) -> str:
    if age_s < 120:
        return f"{age_s:.0f} s"
    if age_s < 7200:
        return f"{age_s / 60:.0f} min"
    return f"{age_s / 3600:.1f} h"
