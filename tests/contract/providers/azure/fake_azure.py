"""A local fake of the Azure Resource Manager (Microsoft.Compute skus and virtualMachines)
and of the Retail Prices API, over real HTTPS (a ``trustme`` CA; azure-core's bearer-token
policy refuses plain http), so that the REAL SDK (azure-mgmt-compute's
``ComputeManagementClient``) and httpx send and parse exactly as against Azure.

What it checks, as Azure does (shapes from ``shared/data/api_examples/azure``):

- Resource Manager: ``Authorization: Bearer <the test token>`` (else 401
  ``InvalidAuthenticationToken``), the ``api-version`` query (else 400
  ``MissingApiVersionParameter``), the subscription (else 404 ``SubscriptionNotFound``);
  errors as ``{"error": {"code", "message"[, "details"]}}``.
- ``GET …/skus?$filter=location eq '<l>'``: that location's SKUs, paged by ``nextLink``.
- ``PUT …/virtualMachines/{name}``: ``location``, ``properties.hardwareProfile.vmSize`` (a
  size of the location, not restricted there or in the zone, else 409 ``SkuNotAvailable``),
  ``storageProfile.imageReference``, ``osProfile`` (``computerName``, ``adminUsername``, an
  SSH key or password, ``customData`` base64 ≤ 87,380), ``networkProfile`` (interfaces, or
  interface configurations with ``networkApiVersion``); Spot rules: ``evictionPolicy`` and
  ``billingProfile.maxPrice`` only on Spot (``EvictionPolicyCanBeSetOnlyOnAzureSpotVirtual
  Machines``, ``MaxPriceIsSupportedOnlyForAzureSpotVirtualMachines``), ``maxPrice`` -1 or
  > 0 (``MaxPriceValueInvalid``) and not below the Spot price
  (``SpotPriceGreaterThanProvidedMaxPrice``); ``If-None-Match: *`` on an existing VM → 412
  ``PreconditionFailed``. Answers 201 + ``Azure-AsyncOperation`` (an operation that stays
  ``InProgress`` until :meth:`FakeAzure.finish`) with ``provisioningState`` ``Creating``, or
  with ``sync_create`` 200 ``Succeeded``. ``customData`` is never returned.
- ``GET …/virtualMachines[?$expand=instanceView]`` (paged) and ``…/{name}``; ``DELETE``
  (202 + ``Azure-AsyncOperation`` + ``Location``; a missing VM: 204, or ``missing_delete``);
  ``POST …/{name}/simulateEviction`` (204: a Spot VM starts being evicted).
- Retail Prices (no credentials; an ``Authorization`` header is recorded as a leak):
  ``$filter`` of ``field eq 'value'`` joined by ``and`` over ``serviceName``,
  ``armRegionName``, ``armSkuName``, ``priceType`` (the item's ``type``), case-sensitive;
  ``currencyCode='XXX'`` (default USD); pages of ``price_page_size`` linked by
  ``NextPageLink`` with ``$skip`` (without ``currencyCode``, as Azure's own example link).

:meth:`FakeAzure.fail` makes the next calls of a method fail with an ARM error; a VM created
with :meth:`fail_allocation` armed ends ``Failed`` with ``ProvisioningState/failed/<code>``.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import ssl
import threading
import uuid
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, urlsplit

import trustme

CUSTOM_DATA_MAX = 87380
_FILTER_TERM = re.compile(r"^(\w+) eq '([^']*)'$")
_VM_PATH = re.compile(r"^/subscriptions/([^/]+)/resourceGroups/([^/]+)/providers/"
                      r"Microsoft\.Compute/virtualMachines(?:/([^/]+))?(?:/(\w+))?$")
_SKU_PATH = re.compile(r"^/subscriptions/([^/]+)/providers/Microsoft\.Compute/skus$")
_OP_PATH = re.compile(r"^/subscriptions/([^/]+)/providers/Microsoft\.Compute/locations/"
                      r"([^/]+)/operations/([^/]+)$")


class ArmError(Exception):
    def __init__(self, status: int, code: str, message: str = "",
                 details: list[dict[str, Any]] | None = None) -> None:
        super().__init__(code)
        self.status, self.code, self.message = status, code, message or code
        self.details = details

    def body(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details:
            error["details"] = self.details
        return {"error": error}


@dataclass
class FakeVm:
    name: str
    body: dict[str, Any]
    created_at: str
    provisioning: str = "Creating"
    power: str | None = None
    failure: str | None = None

    def view(self, sub: str, group: str, expand: bool) -> dict[str, Any]:
        out = json.loads(json.dumps(self.body))
        props = out.setdefault("properties", {})
        props.get("osProfile", {}).pop("customData", None)
        props.update(provisioningState=self.provisioning, vmId=str(uuid.uuid5(
            uuid.NAMESPACE_URL, self.name)), timeCreated=self.created_at)
        out.update(name=self.name, type="Microsoft.Compute/virtualMachines", id=(
            f"/subscriptions/{sub}/resourceGroups/{group}/providers/Microsoft.Compute/"
            f"virtualMachines/{self.name}"))
        if expand:
            statuses = [{"code": f"ProvisioningState/{self.provisioning.lower()}"
                         + (f"/{self.failure}" if self.failure else ""), "level": "Info"}]
            if self.power:
                statuses.append({"code": f"PowerState/{self.power}", "level": "Info"})
            props["instanceView"] = {"statuses": statuses}
        return out


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any = None


@dataclass
class FakeAzure:
    """The fake on ``url`` (``https://127.0.0.1:PORT``); its CA certificate at ``ca_file``.

    - **skus** / **retail_items**: what it lists (see :mod:`.data`).
    - **token**: the bearer token it accepts.
    - **spot_prices**: VM size → current Spot price (USD/hour) for the max-price check.
    - page sizes of SKUs, VMs and retail prices; **sync_create**: answer a create 200
      ``Succeeded`` instead of 201 ``Creating``; **missing_delete**: the status of a DELETE
      of a missing VM (204 as ARM does, or 404).
    """

    skus: list[dict[str, Any]]
    retail_items: list[dict[str, Any]]
    token: str
    workdir: Path
    subscription: str
    spot_prices: dict[str, float] = field(default_factory=dict)
    sku_page_size: int = 2
    vm_page_size: int = 2
    price_page_size: int = 3
    sync_create: bool = False
    missing_delete: int = 204
    vms: dict[str, FakeVm] = field(default_factory=dict)
    requests: list[Recorded] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    operations: dict[str, str] = field(default_factory=dict)
    _injected: dict[str, list[ArmError]] = field(default_factory=dict)
    # statuses the next price pages fail with (None: that page is served)
    price_failures: list[int | None] = field(default_factory=list)
    _allocation_failure: str | None = None

    def __post_init__(self) -> None:
        self.lock = threading.RLock()
        ca = trustme.CA()
        self.ca_file = str(self.workdir / "fake-azure-ca.pem")
        ca.cert_pem.write_to_path(self.ca_file)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert("127.0.0.1", "localhost").configure_cert(context)
        handler = type("Handler", (_Handler,), {"fake": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._httpd.socket = context.wrap_socket(self._httpd.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self._httpd.server_address[1]}"
        threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True).start()

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    # ----- test controls ----------------------------------------------------------------
    def fail(self, method: str, code: str, *, status: int = 409, message: str = "",
             details: list[dict[str, Any]] | None = None, times: int = 1) -> None:
        """The next ``times`` authenticated ``method`` (``PUT``, ``GET``…) calls fail."""
        with self.lock:
            self._injected.setdefault(method, []).extend(
                ArmError(status, code, message, details) for _ in range(times))

    def fail_allocation(self, code: str) -> None:
        """The next VM created is accepted and then fails with ``code`` (async)."""
        self._allocation_failure = code

    def finish(self) -> None:
        """Every pending operation ends: new VMs run (or fail), deleted VMs are gone."""
        with self.lock:
            for name, vm in list(self.vms.items()):
                if vm.provisioning == "Deleting":
                    del self.vms[name]
                elif vm.provisioning == "Creating":
                    vm.provisioning, vm.power = ("Failed", None) if vm.failure else (
                        "Succeeded", "running")
            self.operations = {k: "Succeeded" for k in self.operations}

    # ----- dispatch ---------------------------------------------------------------------
    def handle(self, method: str, path: str, query: dict[str, str], headers: dict[str, str],
               body: Any) -> tuple[int, dict[str, str], Any]:
        with self.lock:
            self.requests.append(Recorded(method, path, query, headers, body))
            if path.rstrip("/") == "/api/retail/prices":
                self.counts["RetailPrices"] += 1
                status = self.price_failures.pop(0) if self.price_failures else None
                if status is not None:
                    return status, {}, {"Error": {"Code": f"HTTP{status}",
                                                  "Message": "injected"}}
                return 200, {}, self._prices(query)
            self.counts[f"{method} {path.rsplit('/', 1)[-1]}"] += 1
            self._authenticate(path, query, headers)
            injected = self._injected.get(method)
            if injected:
                raise injected.pop(0)
            if (match := _SKU_PATH.match(path)) and method == "GET":
                return 200, {}, self._skus(query)
            if match := _OP_PATH.match(path):
                return 200, {}, {"name": match.group(3), "status": self.operations.get(
                    match.group(3), "InProgress"), "startTime": "2026-12-01T12:00:00+00:00"}
            if match := _VM_PATH.match(path):
                return self._vms(method, match.group(2), match.group(3), match.group(4),
                                 query, headers, body)
            raise ArmError(404, "InvalidResourceType", f"no route {method} {path}")

    def _authenticate(self, path: str, query: dict[str, str], headers: dict[str, str]) -> None:
        if headers.get("authorization") != f"Bearer {self.token}":
            raise ArmError(401, "InvalidAuthenticationToken",
                           "The access token is invalid.")
        if "api-version" not in query:
            raise ArmError(400, "MissingApiVersionParameter",
                           "The api-version query parameter (?api-version=) is required for "
                           "all requests.")
        if not path.startswith(f"/subscriptions/{self.subscription}/"):
            raise ArmError(404, "SubscriptionNotFound", "The subscription could not be found.")

    def _page(self, items: list[Any], query: dict[str, str], size: int, path: str,
              extra: dict[str, str]) -> dict[str, Any]:
        start = int(query.get("$skiptoken") or 0)
        page: dict[str, Any] = {"value": items[start:start + size]}
        if start + size < len(items):
            params = {**extra, "api-version": query["api-version"], "$skiptoken": str(start + size)}
            page["nextLink"] = f"{self.url}{path}?" + "&".join(
                f"{k}={quote(v)}" for k, v in params.items())
        return page

    def _skus(self, query: dict[str, str]) -> dict[str, Any]:
        match = re.match(r"^location eq '([^']+)'$", query.get("$filter", ""))
        if not match:
            raise ArmError(400, "InvalidFilter", "Only location filter is supported")
        location = match.group(1)
        items = [s for s in self.skus if location in [str(x).lower() for x in s["locations"]]]
        path = f"/subscriptions/{self.subscription}/providers/Microsoft.Compute/skus"
        return self._page(items, query, self.sku_page_size, path, {"$filter": query["$filter"]})

    # ----- virtual machines -------------------------------------------------------------
    def _vms(self, method: str, group: str, name: str | None, action: str | None,
             query: dict[str, str], headers: dict[str, str], body: Any
             ) -> tuple[int, dict[str, str], Any]:
        expand = query.get("$expand") == "instanceView"
        if name is None and method == "GET":
            items = [vm.view(self.subscription, group, expand) for vm in self.vms.values()]
            path = (f"/subscriptions/{self.subscription}/resourceGroups/{group}/providers/"
                    "Microsoft.Compute/virtualMachines")
            extra = {"$expand": "instanceView"} if expand else {}
            return 200, {}, self._page(items, query, self.vm_page_size, path, extra)
        assert name is not None
        vm = self.vms.get(name)
        if action == "simulateEviction" and method == "POST":
            if vm is None:
                raise ArmError(404, "ResourceNotFound", f"VM {name} not found")
            self._evict(vm)
            return 204, {}, None
        if method == "GET":
            if vm is None:
                raise ArmError(404, "ResourceNotFound",
                               f"The Resource 'Microsoft.Compute/virtualMachines/{name}' under "
                               f"resource group '{group}' was not found.")
            return 200, {}, vm.view(self.subscription, group, expand)
        if method == "DELETE":
            if vm is None:
                if self.missing_delete == 404:
                    raise ArmError(404, "ResourceNotFound", f"VM {name} not found")
                return 204, {}, None
            vm.provisioning = "Deleting"
            return 202, self._operation(vm, location=True), None
        if method == "PUT":
            return self._create(group, name, vm, headers, body)
        raise ArmError(405, "MethodNotAllowed", method)

    def _operation(self, vm: FakeVm, location: bool = False) -> dict[str, str]:
        op = str(uuid.uuid4())
        self.operations[op] = "InProgress"
        url = (f"{self.url}/subscriptions/{self.subscription}/providers/Microsoft.Compute/"
               f"locations/{vm.body['location']}/operations/{op}?api-version=2024-07-01")
        headers = {"Azure-AsyncOperation": url}
        if location:
            headers["Location"] = url.replace("?", "?monitor=true&")
        return headers

    def _evict(self, vm: FakeVm) -> None:
        if vm.body["properties"].get("priority") != "Spot":
            raise ArmError(409, "OperationNotAllowed", "simulateEviction is for Spot VMs")
        if vm.body["properties"].get("evictionPolicy") == "Deallocate":
            vm.power = "deallocated"
        else:
            vm.provisioning = "Deleting"

    def _create(self, group: str, name: str, vm: FakeVm | None, headers: dict[str, str],
                body: Any) -> tuple[int, dict[str, str], Any]:
        if headers.get("if-none-match") == "*" and vm is not None:
            raise ArmError(412, "PreconditionFailed",
                           f"The resource '{name}' already exists (If-None-Match: *).")
        self._validate(body)
        new = FakeVm(name, body, "2026-12-01T12:00:00+00:00")
        if self._allocation_failure:
            new.failure, self._allocation_failure = self._allocation_failure, None
        if self.sync_create:
            new.provisioning, new.power = "Succeeded", "running"
        self.vms[name] = new
        if self.sync_create:
            return 200, {}, new.view(self.subscription, group, False)
        return 201, self._operation(new), new.view(self.subscription, group, False)

    def _validate(self, body: Any) -> None:
        def need(ok: Any, what: str) -> None:
            if not ok:
                raise ArmError(400, "InvalidParameter", f"Required parameter '{what}' is "
                               "missing (null).")
        need(isinstance(body, dict), "body")
        props = body.get("properties") or {}
        location = body.get("location")
        need(location, "location")
        size = (props.get("hardwareProfile") or {}).get("vmSize")
        need(size, "hardwareProfile.vmSize")
        need((props.get("storageProfile") or {}).get("imageReference"),
             "storageProfile.imageReference")
        os_profile = props.get("osProfile") or {}
        need(os_profile.get("computerName"), "osProfile.computerName")
        need(os_profile.get("adminUsername"), "osProfile.adminUsername")
        need(os_profile.get("adminPassword") or (os_profile.get("linuxConfiguration") or {})
             .get("ssh", {}).get("publicKeys"), "osProfile.linuxConfiguration.ssh.publicKeys")
        self._check_custom_data(os_profile.get("customData"))
        network = props.get("networkProfile") or {}
        need(network.get("networkInterfaces") or (network.get("networkInterfaceConfigurations")
                                                  and network.get("networkApiVersion")),
             "networkProfile")
        self._check_size(location, size, body.get("zones") or [])
        self._check_spot(props, size)

    def _check_custom_data(self, value: Any) -> None:
        if value is None:
            return
        try:
            base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise ArmError(400, "InvalidParameter", "customData must be base64") from None
        if len(value) > CUSTOM_DATA_MAX:
            raise ArmError(400, "InvalidParameter", "customData is too long")

    def _check_size(self, location: str, size: str, zones: list[str]) -> None:
        sku = next((s for s in self.skus if s["name"] == size and location in s["locations"]),
                   None)
        unavailable = ArmError(409, "SkuNotAvailable", (
            f"The requested VM size for resource 'Following SKUs have failed for Capacity "
            f"Restrictions: {size}' is currently not available in location '{location}'. "
            "Please try another size or deploy to a different location or different zone. "
            "See https://aka.ms/azureskunotavailable for details."))
        if sku is None:
            raise unavailable
        for r in sku.get("restrictions") or []:
            info = r.get("restrictionInfo") or {}
            if r["type"] == "Location" and location in info.get("locations", []):
                raise unavailable
            if r["type"] == "Zone" and set(zones) & set(info.get("zones", [])):
                raise unavailable

    def _check_spot(self, props: dict[str, Any], size: str) -> None:
        spot = props.get("priority") == "Spot"
        if props.get("evictionPolicy") and not spot:
            raise ArmError(400, "EvictionPolicyCanBeSetOnlyOnAzureSpotVirtualMachines",
                           "Eviction policy can be set only on Azure Spot Virtual Machines.")
        if not spot:
            if props.get("billingProfile"):
                raise ArmError(400, "MaxPriceIsSupportedOnlyForAzureSpotVirtualMachines",
                               "Max price is supported only for Azure Spot Virtual Machines.")
            return
        if props.get("evictionPolicy") not in ("Deallocate", "Delete"):
            raise ArmError(400, "InvalidParameter", "evictionPolicy must be Deallocate or Delete")
        price = (props.get("billingProfile") or {}).get("maxPrice", -1)
        if not isinstance(price, (int, float)) or (price != -1 and price <= 0) or \
                round(price, 5) != price:
            raise ArmError(400, "MaxPriceValueInvalid", (
                "Invalid max price value. The only supported values for max price are -1 or a "
                "decimal greater than zero."))
        current = self.spot_prices.get(size)
        if price != -1 and current is not None and price < current:
            raise ArmError(409, "SpotPriceGreaterThanProvidedMaxPrice", (
                f"Unable to perform operation 'Create VM' since the provided max price "
                f"'{price} USD' is lower than the current spot price '{current} USD' for "
                f"Azure Spot Virtual Machine size '{size}'."))

    # ----- retail prices ----------------------------------------------------------------
    def _prices(self, query: dict[str, str]) -> dict[str, Any]:
        terms: dict[str, str] = {}
        for term in filter(None, query.get("$filter", "").split(" and ")):
            match = _FILTER_TERM.match(term.strip())
            if not match:
                raise ArmError(400, "InvalidFilter", f"unsupported filter term {term!r}")
            terms["type" if match.group(1) == "priceType" else match.group(1)] = match.group(2)
        currency = query.get("currencyCode", "'USD'").strip("'")
        items = [i for i in self.retail_items if i.get("currencyCode") == currency
                 and all(str(i.get(k)) == v for k, v in terms.items())]
        skip = int(query.get("$skip") or 0)
        page = items[skip:skip + self.price_page_size]
        next_link = ""
        if skip + self.price_page_size < len(items):
            next_link = (f"{self.url}/api/retail/prices?$filter={quote(query.get('$filter', ''))}"
                         f"&$skip={skip + self.price_page_size}")
        return {"BillingCurrency": currency, "CustomerEntityId": "Default",
                "CustomerEntityType": "Retail", "Items": page, "NextPageLink": next_link,
                "Count": len(page)}


class _Handler(BaseHTTPRequestHandler):
    fake: FakeAzure

    def log_message(self, *args: Any) -> None:
        pass

    def _handle(self) -> None:
        parts = urlsplit(self.path)
        query = dict(parse_qsl(parts.query, keep_blank_values=True))
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        try:
            body = json.loads(raw) if raw else None
            status, extra, answer = self.fake.handle(self.command, parts.path, query, headers, body)
        except ArmError as exc:
            status, extra, answer = exc.status, {}, exc.body()
        except ValueError:
            status, extra, answer = 400, {}, ArmError(400, "InvalidRequestContent").body()
        data = json.dumps(answer).encode() if answer is not None else b""
        self.send_response(status)
        for key, value in extra.items():
            self.send_header(key, value)
        self.send_header("x-ms-request-id", str(uuid.uuid4()))
        if data:
            self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_PUT = do_DELETE = do_POST = _handle
