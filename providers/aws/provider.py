"""``AwsProvider``: EC2, the Price List API and the Spot Advisor as a
:class:`providers.regional.RegionalCompute` (the base fans out over regions and launches by
client token; this module answers per region).

It composes :mod:`.client` (boto3 calls) and :mod:`.translate`/:mod:`.launch` (pure), with the
TTLs below. Per poll and region:

- GPU instance types (``describe_instance_types``, cached 24 h) and the zones offering them
  (``describe_instance_type_offerings``, 1 h);
- on-demand list prices (``pricing.get_products``, 12 h);
- current spot prices (``describe_spot_price_history`` with ``StartTime`` = now: the price in
  effect in every zone) for offers, and every price change since the last poll for prices
  (AWS adds the price in effect at the start: already stored, the store ignores duplicates);
- interruption risk from the Spot Advisor (disk cache, 6 h); a type it does not rate is
  offered unrated (``interruption_risk`` None).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from core.models import Instance, Market, Offer, PriceObservation
from providers.aws import instances, translate
from providers.aws import launch as launching
from providers.aws.advisor import SpotAdvisor
from providers.aws.client import AwsClient
from providers.aws.settings import AwsSettings
from providers.base import Checked, CheckResult, LaunchRequest
from providers.cache import TTLCache
from providers.errors import ProviderError
from providers.regional import RegionalCompute
from providers.regional_api import (
    ListPrices,
    latest_prices,
    logged_skips,
)

log = logging.getLogger(__name__)
PROVIDER = "aws"
# TTLs of the caches (seconds). GPU instance types' hardware never changes and new
# types appear a few times a year: a day keeps describe_instance_types to ~10 pages/region/day.
INSTANCE_TYPES_TTL_S = 24 * 3600.0
# Which zones offer a type changes when AWS adds capacity to a zone: rare, but an hour is cheap
# (one or two describe_instance_type_offerings pages per region).
INSTANCE_TYPE_OFFERINGS_TTL_S = 3600.0
# On-demand list prices change a few times a year; Karpenter refreshes them every 12 h.
ON_DEMAND_PRICES_TTL_S = 12 * 3600.0


class AwsProvider(RegionalCompute, Checked):
    """GPU offers, prices and instances on AWS EC2 (spot and on-demand).

    - **settings**: the validated ``kind: aws`` entry (:class:`AwsSettings`).
    - **cache_dir**: folder for the Spot Advisor download (e.g. ``GA_HOME/aws``).
    - **client**: an :class:`AwsClient` to use instead of building one from ``settings``.
    - **advisor**: a :class:`SpotAdvisor` to use instead of the one built from ``settings``.
    - **clock**: aware-UTC now (default the wall clock; injectable, so recorded price
      history can be replayed).

    Every method may block on AWS API calls (botocore adaptive retries, 5 s connect / 30 s
    read timeouts per request). Launch stamps ``ClientToken``, so EC2 itself returns the first
    instance for a repeated request; terminate is ``terminate_instances``; describe includes
    terminated instances while EC2 lists them (~1 h), and a running spot instance whose request
    is ``marked-for-termination`` carries a notice (action at the mark + 2 min).
    """

    name = PROVIDER
    # A GPU instance boots, installs Python packages and the agent before its first report.
    agent_start_timeout_s = 900.0
    launch_fields = "ami, subnets, security_group_ids…"
    idempotency_codes = frozenset({"IdempotentParameterMismatch"})

    def __init__(self, settings: AwsSettings, cache_dir: Path, *,
                 client: AwsClient | None = None, advisor: SpotAdvisor | None = None,
                 clock: Callable[[], datetime] | None = None) -> None:
        super().__init__(settings, client or AwsClient(
            settings.regions, pricing_region=settings.pricing_region,
            endpoint_url=settings.endpoint_url, pricing_endpoint_url=settings.pricing_endpoint_url,
            profile=settings.profile, max_attempts=settings.max_attempts), clock=clock)
        self.settings: AwsSettings = settings
        self.client: AwsClient
        url = settings.spot_advisor_url  # its cache file is named by the URL: entries differ
        self.advisor = advisor or SpotAdvisor(url, Path(cache_dir) / (
            f"spot-advisor-{hashlib.sha256(url.encode()).hexdigest()[:10]}.json"))
        self._types: TTLCache[str, dict[str, translate.GpuInstanceType]] = TTLCache(
            "instance types", INSTANCE_TYPES_TTL_S)
        self._zones: TTLCache[str, dict[str, tuple[str, ...]]] = TTLCache(
            "instance type offerings", INSTANCE_TYPE_OFFERINGS_TTL_S)
        self._on_demand: TTLCache[str, ListPrices[float]] = TTLCache(
            "on-demand prices", ON_DEMAND_PRICES_TTL_S)

    def check(self) -> list[CheckResult]:
        """Credentials and permissions, one cheap call each: per region
        ``describe_instance_types``, ``describe_spot_price_history``, ``describe_instances``;
        once ``pricing:GetProducts``; and the Spot Advisor cache age. Never raises."""
        rows = [self._credentials_row("none in boto3's chain (env, ~/.aws, SSO, instance role)")]
        operations = ("describe_instance_types", "describe_spot_price_history",
                      "describe_instances")
        rows += [self._check_row(region, op, lambda r=region, o=op: self.client.probe(r, o))
                 for region in self.regions for op in operations]
        rows.append(self._check_row(self.settings.pricing_region, "pricing:GetProducts",
                                    lambda: self.client.probe(self.regions[0], "get_products")))
        return [*rows, CheckResult(PROVIDER, "-", "spot advisor", *self.advisor.status())]

    # ----- cached lookups --------------------------------------------------------------------
    def _gpu_types(self, region: str) -> dict[str, translate.GpuInstanceType]:
        return self._types.get_or_load(region, lambda: translate.gpu_instance_types(
            self.client.iter_instance_types(region, self.settings.instance_types)))

    def _type_zones(self, region: str, types: list[str]) -> dict[str, tuple[str, ...]]:
        return self._zones.get_or_load(region, lambda: translate.zones_by_type(
            self.client.iter_type_offerings(region, types)))

    def _on_demand_prices(self, region: str, types: list[str]) -> ListPrices[float] | None:
        """The region's list prices; None (and a warning) when the Price List API fails and
        nothing was cached: spot offers are still worth listing."""
        def load() -> ListPrices[float]:
            prices = logged_skips(translate.on_demand_prices(
                self.client.iter_price_list(region), types), f"aws pricing {region}: documents")
            return ListPrices(prices, self._clock())
        try:
            return self._on_demand.get_or_load(region, load)
        except ProviderError as exc:
            log.warning("aws on-demand prices for %s unavailable: %s", region, exc)
            return None

    # ----- per region ------------------------------------------------------------------------
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
            spot = latest_prices(prices)
        risks = self.advisor.risks(region) if spot else {}
        return translate.build_offers(
            region, types, zones, on_demand.prices if on_demand else {}, spot, risks,
            markets=self.settings.markets, observed_at=self._clock())

    def _region_prices(self, region: str, start: datetime,
                       since: datetime | None) -> list[PriceObservation]:
        types = self._gpu_types(region)
        if not types:
            return []
        names = sorted(types)
        observations: list[PriceObservation] = []
        if Market.SPOT in self.settings.markets:
            prices = logged_skips(translate.spot_prices(self.client.iter_spot_prices(
                region, names, start=start), region), f"aws spot prices {region}: records")
            observations += translate.spot_observations(prices, region)
        return observations + self._list_price_observations(
            region, since, lambda: self._on_demand_prices(region, names),
            lambda: self._type_zones(region, names))

    def _region_instances(self, region: str, tags: dict[str, str]) -> list[Instance]:
        filters = [{"Name": f"tag:{k}", "Values": [v]} for k, v in tags.items()]
        return self._instances(region, filters, with_notices=True)

    def _instances(self, region: str, filters: list[dict[str, Any]],
                   with_notices: bool) -> list[Instance]:
        raws = list(self.client.iter_instances(region, filters))
        spot_running = [r["InstanceId"] for r in raws if with_notices
                        and r.get("InstanceLifecycle") == "spot"
                        and (r.get("State") or {}).get("Name") == "running"]
        notices = {}
        if spot_running:
            now = self._clock()
            for req in self.client.spot_requests(region, spot_running):
                notice = instances.notice_from_spot_request(req, now)
                if notice is not None and req.get("InstanceId"):
                    notices[req["InstanceId"]] = notice
        out = []
        for raw in raws:
            try:
                out.append(instances.instance_from_api(raw, region,
                                                       notices.get(raw.get("InstanceId"))))
            except ValueError as exc:
                log.warning("aws describe %s: skipping an instance: %s", region, exc)
        return out

    def _find_by_token(self, region: str, client_token: str) -> Instance | None:
        filters = [{"Name": "client-token", "Values": [client_token]}]
        return next((i for i in self._instances(region, filters, with_notices=False)
                     if i.client_token == client_token), None)

    def _run_instance(self, request: LaunchRequest, region: str,
                      params: dict[str, Any]) -> Instance:
        instance = instances.instance_from_api(self.client.run_instance(region, params), region)
        if not instance.client_token:
            instance = instance.model_copy(update={"client_token": request.client_token})
        return instance

    def _terminate_in(self, region: str, instance_id: str) -> None:
        self.client.terminate_instance(region, instance_id)

    def _run_params(self, request: LaunchRequest, region: str) -> dict[str, Any]:
        cfg = self.settings.launch
        assert cfg is not None
        user_data = launching.render_user_data(request.agent_env, pip_spec=cfg.agent_pip_spec,
                                               venv=cfg.agent_venv)
        return launching.run_instances_params(
            offer=request.offer, client_token=request.client_token, tags=request.tags,
            user_data=user_data, ami=cfg.image_for(region) or "",
            subnet_id=cfg.subnets.get(request.offer.zone),
            security_group_ids=cfg.security_group_ids, key_name=cfg.key_name,
            iam_instance_profile=cfg.iam_instance_profile)

