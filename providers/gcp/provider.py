"""``GcpProvider``: Compute Engine Spot and on-demand GPU VMs as a
:class:`providers.regional.RegionalCompute` (GCP regions, zones inside them: the base fans out
over regions and launches by client token; this module answers per region).

It composes :mod:`.client` (SDK calls) with :mod:`.machines`, :mod:`.pricing`, :mod:`.launch`
and :mod:`.instances` (pure), with the TTLs below. Per poll and region:

- the region's zones (``regions.get``, cached 24 h), narrowed to ``zones`` when configured;
- per zone, machine and accelerator types (``machineTypes.list``, ``acceleratorTypes.list``,
  24 h) → the GPU shapes of :mod:`.machines`;
- prices of every region at once from the Cloud Billing Catalog (``services.skus.list``, 12 h)
  → whole-instance USD/hour of :mod:`.pricing`. Google publishes no spot price history and
  changes Spot prices at most once a month, so a price poll yields the catalog's prices as
  observations stamped when they were fetched, once per fetch.

Spot offers are unrated (``interruption_risk`` None: Google rates none) with a 30 s notice.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any

from core.models import Instance, Offer, PriceObservation
from providers.base import Checked, CheckResult, LaunchRequest
from providers.cache import TTLCache
from providers.errors import NotFoundError
from providers.gcp import instances, launch, machines, pricing
from providers.gcp.client import GcpClient, operation_error
from providers.gcp.settings import GcpSettings
from providers.regional import RegionalCompute
from providers.regional_api import logged_skips
from providers.regional_instances import has_tags, pending_instance

log = logging.getLogger(__name__)
PROVIDER = "gcp"
# TTLs of the caches (seconds). A region's zones change when Google opens one: rare.
ZONES_TTL_S = 24 * 3600.0
# Machine and accelerator types' hardware never changes; new ones appear a few times a year.
TYPES_TTL_S = 24 * 3600.0
# Billing Catalog prices: Spot prices change at most once every 30 days, on-demand a few
# times a year; the whole catalog is a handful of 5000-SKU pages, twice a day is cheap.
PRICES_TTL_S = 12 * 3600.0
# How long a launch waits for its insert operation: GPU VMs are usually created within a
# minute; past this the launch answers pending and describe follows the VM.
OPERATION_WAIT_S = 90.0
# Instance names whose zone is remembered (terminate then needs no search); older ones are
# looked up zone by zone.
MAX_REMEMBERED = 10000
_PREEMPTED_FILTER = f'operationType = "{instances.PREEMPTED_OPERATION}"'


def label_filter(tags: dict[str, str]) -> str:
    """The ``instances.list`` filter selecting ``tags``' labels (exact tags are checked on the
    listed VMs' metadata: labels are lossy)."""
    return " AND ".join(f'(labels.{k} = "{v}")' for k, v in sorted(launch.labels(tags).items()))


class GcpProvider(RegionalCompute, Checked):
    """GPU offers, prices and Spot/on-demand VMs on Google Compute Engine.

    - **settings**: the validated ``kind: gcp`` entry (:class:`GcpSettings`).
    - **client**: a :class:`GcpClient` to use instead of building one from ``settings``.
    - **clock**: aware-UTC now (default the wall clock; injectable for tests).

    Every method may block on Google API calls (30 s per request, reads retried for up to
    60 s). Launch is ``instances.insert`` under a name derived from the client token (a
    repeat finds the first VM) and waits up to :data:`OPERATION_WAIT_S` for the operation,
    whose failure maps to Capacity/Quota/Transient errors; terminate is ``instances.delete``
    (a missing VM is done). Describe lists each zone of the region by our labels; a spot VM
    ``STOPPING`` carries a notice (30 s after it was first listed so), a preempted one is
    ``terminated`` with reason ``preempted``.
    """

    name = PROVIDER
    # A GPU VM boots, installs Python packages and the agent before its first report; Deep
    # Learning VM images install the NVIDIA driver at first boot too.
    agent_start_timeout_s = 900.0
    launch_fields = "image, network, subnetworks, service_account…; an empty {} takes defaults"
    idempotency_codes = frozenset({"alreadyExists"})

    def __init__(self, settings: GcpSettings, *, client: GcpClient | None = None,
                 clock: Callable[[], datetime] | None = None) -> None:
        super().__init__(settings, client or GcpClient(
            settings.project, api_endpoint=settings.api_endpoint,
            billing_api_endpoint=settings.billing_api_endpoint), clock=clock)
        self.settings: GcpSettings = settings
        self.client: GcpClient
        self._zones: TTLCache[str, tuple[str, ...]] = TTLCache("zones", ZONES_TTL_S)
        self._shapes: TTLCache[str, dict[str, machines.GcpShape]] = TTLCache(
            "machine and accelerator types", TYPES_TTL_S)
        self._prices: TTLCache[str, tuple[pricing.PriceBook, datetime]] = TTLCache(
            "billing catalog prices", PRICES_TTL_S)
        self._prices_lock = threading.Lock()
        self._place_lock = threading.Lock()
        self._zone_of: dict[str, str] = {}  # instance name → zone (at most MAX_REMEMBERED)
        self._spot_seen: dict[str, Instance] = {}  # spot VMs listed running, until gone

    def check(self) -> list[CheckResult]:
        """Credentials and permissions, one cheap call each: per region ``regions.get``, then
        in its first zone ``machineTypes.list`` and ``instances.list``; once ``skus.list``
        of the Billing Catalog. Never raises."""
        rows = [self._credentials_row("none in Application Default Credentials: set "
                                      "GOOGLE_APPLICATION_CREDENTIALS, run 'gcloud auth "
                                      "application-default login', or run on a GCE VM "
                                      "with a service account")]
        for region in self.regions:
            rows.append(self._check_row(region, "regions.get", lambda r=region: self._zones.put(
                r, tuple(self.client.region_zones(r)))))
            zones = self._offer_zones(region) if rows[-1].ok else []  # cached just now
            for action in ("machineTypes.list", "instances.list"):
                if zones:
                    rows.append(self._check_row(region, action, lambda a=action, z=zones[0]:
                                                self.client.probe(a, z)))
        rows.append(self._check_row("-", "billing skus.list",
                                    lambda: self.client.probe("skus.list", "billing")))
        return rows

    # ----- cached lookups ---------------------------------------------------------------------
    def _region_zones(self, region: str) -> tuple[str, ...]:
        """Every zone of ``region`` (describe and terminate look in all of them)."""
        return self._zones.get_or_load(region, lambda: tuple(self.client.region_zones(region)))

    def _offer_zones(self, region: str) -> list[str]:
        wanted = self.settings.zones
        return [z for z in self._region_zones(region) if not wanted or z in wanted]

    def _zone_shapes(self, zone: str) -> dict[str, machines.GcpShape]:
        return self._shapes.get_or_load(zone, lambda: machines.zone_shapes(
            list(self.client.iter_machine_types(zone)),
            list(self.client.iter_accelerator_types(zone)),
            wants_type=self.settings.wants_type,
            wants_accelerator=self.settings.wants_accelerator))

    def _price_book(self) -> tuple[pricing.PriceBook, datetime]:
        def load() -> tuple[pricing.PriceBook, datetime]:
            book = logged_skips(pricing.sku_prices(self.client.iter_skus()),
                                "gcp billing catalog: SKUs")
            return book, self._clock()
        # One catalog for every region: the region workers wait for one fetch, not one each.
        with self._prices_lock:
            return self._prices.get_or_load("compute", load)

    # ----- per region -------------------------------------------------------------------------
    def _offers_at(self, region: str, observed_at: datetime | None) -> list[Offer]:
        book, fetched_at = self._price_book()
        at = observed_at or fetched_at
        return [offer for zone in self._offer_zones(region)
                for offer in pricing.zone_offers(region, zone, self._zone_shapes(zone), book,
                                                 self.settings.markets, at)]

    def _region_offers(self, region: str) -> list[Offer]:
        return self._offers_at(region, self._clock())

    def _region_prices(self, region: str, start: datetime,
                       since: datetime | None) -> list[PriceObservation]:
        _, fetched_at = self._price_book()
        if since is not None and fetched_at <= since:
            return []  # these prices were observed by an earlier poll
        return [PriceObservation(series=o.key.series(), observed_at=fetched_at,
                                 price_usd_per_hour=o.price_usd_per_hour)
                for o in self._offers_at(region, None)]

    def _zone_instances(self, zone: str, filter_: str) -> list[tuple[dict[str, Any], Instance]]:
        out = []
        for raw in self.client.iter_instances(zone, filter_):
            name = str(raw.get("name"))
            since = self.memory.flagged_since(name, raw.get("status") == "STOPPING"
                                              and instances.is_spot(raw))
            try:
                out.append((raw, instances.instance_from_api(
                    raw, instances.stopping_notice(raw, since) if since else None)))
            except ValueError as exc:
                log.warning("gcp describe %s: skipping an instance: %s", zone, exc)
        return out

    def _region_instances(self, region: str, tags: dict[str, str]) -> list[Instance]:
        wanted = has_tags(tags)
        found: list[Instance] = []
        for zone in self._region_zones(region):
            listed = self._zone_instances(zone, label_filter(tags) if tags else "")
            self._note_preemptions(zone, {i.id for _, i in listed}, wanted)
            with self._place_lock:
                for raw, instance in listed:
                    self._remember_zone(instance.id, zone)
                    if instances.is_spot(raw) and not instance.state.is_gone():
                        self._spot_seen[instance.id] = instance
                    else:
                        self._spot_seen.pop(instance.id, None)
            found += [i for _, i in listed if wanted(i)]
        return found

    def _remember_zone(self, name: str, zone: str) -> None:
        """Hold ``self._place_lock``. Keeps the newest :data:`MAX_REMEMBERED` names."""
        self._zone_of.pop(name, None)
        self._zone_of[name] = zone
        while len(self._zone_of) > MAX_REMEMBERED:
            del self._zone_of[next(iter(self._zone_of))]

    def _note_preemptions(self, zone: str, listed: set[str],
                          wanted: Callable[[Instance], bool]) -> None:
        """Flag in the memory every spot VM seen running in ``zone`` that this listing
        (selecting ``wanted``) should show and does not, when the zone's
        ``compute.instances.preempted`` operations name it (one request, only then)."""
        with self._place_lock:
            missing = {n for n, i in self._spot_seen.items()
                       if i.offer.zone == zone and wanted(i) and n not in listed}
            for name in missing:
                del self._spot_seen[name]
        if missing:
            preempted = instances.preempted_names(self.client.iter_operations(
                zone, _PREEMPTED_FILTER))
            for name in missing & preempted:
                self.memory.flagged_since(name, True)

    def _find_by_token(self, region: str, client_token: str) -> Instance | None:
        name = launch.instance_name(client_token)
        for zone in self._region_zones(region):
            for _, instance in self._zone_instances(zone, f'name = "{name}"'):
                if instance.client_token == client_token:
                    return instance
        return None

    def _run_params(self, request: LaunchRequest, region: str) -> dict[str, Any]:
        cfg = self.settings.launch
        assert cfg is not None
        script = launch.render_startup_script(request.agent_env, pip_spec=cfg.agent_pip_spec,
                                              venv=cfg.agent_venv)
        return {"zone": request.offer.zone,
                "request_id": launch.request_id(request.client_token),
                "body": launch.insert_body(offer=request.offer, client_token=request.client_token,
                                           tags=request.tags, startup_script=script,
                                           launch=cfg)}

    def _run_instance(self, request: LaunchRequest, region: str,
                      params: dict[str, Any]) -> Instance:
        zone, name = params["zone"], params["body"]["name"]
        operation = self.client.insert_instance(zone, params["body"], params["request_id"])
        operation = self.client.wait_operation(zone, operation, OPERATION_WAIT_S)
        failed = operation_error(operation, f"gcp insert of {name} in {zone}")
        if failed is not None:
            raise failed
        with self._place_lock:
            self._remember_zone(name, zone)
        raw = self.client.get_instance(zone, name) if operation.get("status") == "DONE" else None
        if raw is None:
            return pending_instance(name, request, self._clock(), {})
        return instances.instance_from_api(raw)

    def _terminate_in(self, region: str, instance_id: str) -> None:
        with self._place_lock:
            known = self._zone_of.get(instance_id)
        zones = self._region_zones(region)
        for zone in ([known] if known in zones else []) + [z for z in zones if z != known]:
            try:
                self.client.delete_instance(zone, instance_id)
            except NotFoundError:
                if zone != known:
                    continue
                # Names are unique per zone and the VM was seen here: 404 means it is gone.
            with self._place_lock:
                self._spot_seen.pop(instance_id, None)
            return
        raise NotFoundError(f"gcp: no instance {instance_id} in {region}", provider=PROVIDER,
                            code="notFound")
