"""``AzureProvider``: Azure Spot and pay-as-you-go VMs as a
:class:`providers.regional.RegionalCompute` (Azure's locations are the base's regions: it fans
out over them and launches by client token; this module answers per location).

It composes :mod:`.client` (Resource Manager through azure-mgmt-compute), :mod:`.prices`
(the Retail Prices API over httpx) and :mod:`.translate`/:mod:`.launch`/:mod:`.instances`
(pure), with the TTLs below. Per poll and location:

- GPU VM sizes from Resource SKUs (GPUs, vCPUs, memory, zones without restrictions; cached
  1 h);
- pay-as-you-go and Spot prices from the Retail Prices API (cached 1 h): offers for both
  markets, and for prices one observation per size and zone when the list was fetched after
  ``since``. Spot offers are unrated (``interruption_risk`` None) and carry
  ``interruption_notice_s`` 30 (Scheduled Events' Preempt notice).

Instances are the resource group's VMs tagged with a client token, listed with their instance
view; the VM name derives from the client token, so a repeated launch finds the VM it made.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any

from azure.core.credentials import TokenCredential

from core.models import Instance, Market, Offer, PriceObservation
from providers.azure import instances, translate
from providers.azure import launch as launching
from providers.azure.client import AzureClient
from providers.azure.prices import RetailPrices
from providers.azure.settings import AzureSettings
from providers.base import Checked, CheckResult, LaunchRequest
from providers.cache import TTLCache
from providers.errors import NotFoundError
from providers.regional import RegionalCompute
from providers.regional_api import ListPrices, logged_skips
from providers.regional_instances import RELEASED_INSTANCE_MEMORY_S

log = logging.getLogger(__name__)
PROVIDER = "azure"
# TTLs of the caches (seconds). Resource SKUs carry the restrictions of the subscription,
# which change when Azure grants access to a size or zone: an hour, one listing per location.
SKUS_TTL_S = 3600.0
# Retail prices: Spot prices move with capacity, at most a few times a day for a size; an hour
# keeps a location to a few pages per hour.
RETAIL_PRICES_TTL_S = 3600.0

RetailLists = tuple[ListPrices[float], ListPrices[float]]  # (spot, on-demand)


class AzureProvider(RegionalCompute, Checked):
    """GPU offers, prices and VMs on Azure (Spot and pay-as-you-go).

    - **settings**: the validated ``kind: azure`` entry (:class:`AzureSettings`) with its
      ``subscription_id`` resolved.
    - **credential**: a ``TokenCredential`` (default ``DefaultAzureCredential``).
    - **verify**: CA bundle file for TLS to both endpoints (local fakes, private CAs).
    - **clock**: aware-UTC now (default the wall clock).

    Every method may block on HTTP calls (5 s connect / 30 s read per request, retries as
    :mod:`.client` says); launch and terminate never wait for Azure's long-running operation.
    Launch creates the VM named from the client token only if it does not exist; terminate
    deletes it (gone already is done); describe lists the resource group once.
    A Spot VM Azure is evicting carries a notice and is ``preempted``; one that vanished
    without our delete was deleted by its eviction (policy ``Delete``) and is reported
    ``preempted`` too.
    """

    name = PROVIDER
    # A GPU VM boots, cloud-init installs Python packages and the agent before its first
    # report: the same 15 minutes as on EC2 and ECS.
    agent_start_timeout_s = 900.0
    launch_fields = "image, subnets, ssh_public_key…"
    idempotency_codes = frozenset({"PreconditionFailed"})

    def __init__(self, settings: AzureSettings, *, credential: TokenCredential | None = None,
                 verify: str | None = None, client: AzureClient | None = None,
                 prices: RetailPrices | None = None,
                 clock: Callable[[], datetime] | None = None) -> None:
        if settings.subscription_id is None:
            raise ValueError("subscription_id is required (or AZURE_SUBSCRIPTION_ID)")
        client = client or AzureClient(
            settings.subscription_id, resource_group=settings.resource_group,
            endpoint=settings.resource_manager_url, credential=credential, verify=verify,
            max_attempts=settings.max_attempts, retry_base_wait_s=settings.retry_base_wait_s)
        super().__init__(settings, client, clock=clock)
        self.settings: AzureSettings = settings
        self.client: AzureClient
        self.prices = prices or RetailPrices(settings.retail_prices_url, client.requests,
                                             verify=verify)
        self._sizes: TTLCache[str, dict[str, translate.GpuSize]] = TTLCache(
            "resource SKUs", SKUS_TTL_S)
        self._retail: TTLCache[str, RetailLists] = TTLCache("retail prices", RETAIL_PRICES_TTL_S)
        self._deletes_lock = threading.Lock()
        self._deleted_at: dict[str, datetime] = {}  # VM name → when we asked to delete it
        self._listing_lock = threading.Lock()
        self._listing: list[dict[str, Any]] | None = None  # the resource group, this describe

    def close(self) -> None:
        super().close()
        self.prices.close()

    def check(self) -> list[CheckResult]:
        """Credentials, then per location one page of Resource SKUs and of Retail Prices, and
        one page of the resource group's VMs when one is configured. Never raises."""
        rows = [self._credentials_row("none in DefaultAzureCredential's chain (AZURE_CLIENT_ID/"
                                      "AZURE_TENANT_ID/AZURE_CLIENT_SECRET, managed identity, "
                                      "az login)")]
        for location in self.regions:
            rows.append(self._check_row(location, "Microsoft.Compute/skus",
                                        lambda r=location: self.client.probe_skus(r)))
            rows.append(self._check_row(location, "retail prices",
                                        lambda r=location: next(self.prices.iter_items(r), None)))
        if self.settings.resource_group:
            rows.append(self._check_row("-", f"virtualMachines in {self.settings.resource_group}",
                                        lambda: next(self.client.iter_vms(), None)))
        return rows

    # ----- cached lookups --------------------------------------------------------------------
    def _gpu_sizes(self, location: str) -> dict[str, translate.GpuSize]:
        return self._sizes.get_or_load(location, lambda: logged_skips(translate.gpu_sizes(
            self.client.iter_skus(location), location, self.settings.wants_type),
            f"azure resource SKUs in {location}"))

    def _retail_lists(self, location: str, sizes: list[str]) -> RetailLists:
        def load() -> RetailLists:
            prices = logged_skips(translate.retail_prices(
                self.prices.iter_items(location), location, sizes),
                f"azure retail prices in {location}: items")
            now = self._clock()
            return (ListPrices(prices[Market.SPOT], now), ListPrices(prices[Market.ON_DEMAND], now))
        return self._retail.get_or_load(location, load)

    # ----- per location: offers and prices ---------------------------------------------------
    def _region_offers(self, region: str) -> list[Offer]:
        sizes = self._gpu_sizes(region)
        if not sizes:
            return []
        spot, on_demand = self._retail_lists(region, sorted(sizes))
        return translate.build_offers(
            region, sizes, {Market.SPOT: spot.prices, Market.ON_DEMAND: on_demand.prices},
            markets=self.settings.markets, observed_at=self._clock())

    def _region_prices(self, region: str, start: datetime,
                       since: datetime | None) -> list[PriceObservation]:
        sizes = self._gpu_sizes(region)
        if not sizes:
            return []
        spot, on_demand = self._retail_lists(region, sorted(sizes))
        observations: list[PriceObservation] = []
        if Market.SPOT in self.settings.markets and (since is None or spot.fetched_at > since):
            observations += translate.spot_observations(region, sizes, spot.prices,
                                                        spot.fetched_at)
        return observations + self._list_price_observations(
            region, since, lambda: on_demand,
            lambda: {name: translate.offer_zones(region, s) for name, s in sizes.items()})

    # ----- per location: instances -----------------------------------------------------------
    def _instance(self, vm: dict[str, Any]) -> Instance:
        name = str(vm.get("name"))
        with self._deletes_lock:
            ours = name in self._deleted_at
        since = self.memory.flagged_since(name, instances.is_being_evicted(vm) and not ours)
        return instances.instance_from_vm(vm, self._clock(), since)

    def _region_instances(self, region: str, tags: dict[str, str]) -> list[Instance]:
        listing = self._listing
        out: list[Instance] = []
        for vm in listing if listing is not None else self.client.iter_vms():
            vm_tags = vm.get("tags") or {}
            if (str(vm.get("location", "")).lower() != region
                    or instances.CLIENT_TOKEN_TAG not in vm_tags
                    or any(vm_tags.get(k) != v for k, v in tags.items())):
                continue
            try:
                out.append(self._instance(vm))
            except ValueError as exc:
                log.warning("azure describe %s: skipping a VM: %s", region, exc)
        return out

    def _describe(self, tags: dict[str, str] | None) -> list[Instance]:
        # One listing of the resource group serves every location (the base asks per
        # location); describes are serialised so that each reads its own listing.
        with self._listing_lock:
            self._listing = list(self.client.iter_vms())
            try:
                described = super()._describe(tags)
            finally:
                self._listing = None
        # Spot VMs are created with evictionPolicy Delete: one that vanished without our
        # delete was evicted, even when no listing caught it being deleted.
        return [i.model_copy(update={"terminated_reason": "preempted"})
                if i.terminated_reason == "released" and i.offer.market is Market.SPOT else i
                for i in described]

    def _find_by_token(self, region: str, client_token: str) -> Instance | None:
        vm = self.client.get_vm(launching.vm_name(client_token))
        if vm is None or (vm.get("tags") or {}).get(instances.CLIENT_TOKEN_TAG) != client_token:
            return None
        return self._instance(vm)

    def _run_params(self, request: LaunchRequest, region: str) -> dict[str, Any]:
        cfg = self.settings.launch
        assert cfg is not None
        name = launching.vm_name(request.client_token)
        script = launching.render_user_data(request.agent_env, pip_spec=cfg.agent_pip_spec,
                                            venv=cfg.agent_venv)
        return {"name": name, "body": launching.vm_body(
            offer=request.offer, client_token=request.client_token, tags=request.tags,
            custom_data=script, cfg=cfg, image=cfg.image_for(region) or "", name=name)}

    def _run_instance(self, request: LaunchRequest, region: str,
                      params: dict[str, Any]) -> Instance:
        return instances.instance_from_vm(self.client.create_vm(params["name"], params["body"]),
                                          self._clock())

    def _terminate_in(self, region: str, instance_id: str) -> None:
        now = self._clock()
        with self._deletes_lock:
            self._deleted_at = {name: at for name, at in self._deleted_at.items()
                                if (now - at).total_seconds() < RELEASED_INSTANCE_MEMORY_S}
            self._deleted_at[instance_id] = now
        try:
            self.client.delete_vm(instance_id)
        except NotFoundError:
            # The resource group holds every location's VMs: no other location to ask.
            return
