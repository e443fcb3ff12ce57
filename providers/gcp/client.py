"""Google Cloud SDK calls of the GCP adapter: ``google-cloud-compute`` and
``google-cloud-billing`` over their REST transports, paging, retries, operation waits and
error mapping.

No translation happens here: every method returns (or yields) the API's resources as REST
JSON dicts (lowerCamelCase, as the API documents them and as
``shared/data/api_examples/gcp`` records them).

Credentials are Application Default Credentials (``google.auth.default``), resolved at the
first call, or the ones passed in. Reads are retried by ``google.api_core`` on 429/500/503 and
connection errors (exponential backoff, at most :data:`RETRY_DEADLINE_S`); an insert is not
retried here (a 429 there may be a stockout), and its ``requestId`` makes a retry by the
controller safe.

Errors: a Google error (HTTP, or a failed operation's ``error.errors[].code``) maps through
:data:`ERRORS` by its reason or code (the ``ErrorInfo`` reason, else the legacy
``errors[].reason``); then 401/403 are :class:`AuthError`, 404 :class:`NotFoundError`, 429
and 5xx :class:`TransientError`, anything else a plain :class:`ProviderError` with the code.
Missing or refused credentials are :class:`AuthError`. Messages carry the action, the zone,
the code and Google's message, never request bodies (the startup script carries the agent's
secrets) and never credentials.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import google.auth
import requests
from google.api_core import exceptions as gexc
from google.api_core import retry as gretry
from google.auth import exceptions as auth_exceptions
from google.auth.credentials import Credentials
from google.cloud import billing_v1, compute_v1

from providers import errors
from providers.gcp.pricing import COMPUTE_ENGINE_SERVICE, priced_here
from providers.gcp.settings import CLOUD_PLATFORM_SCOPE
from providers.regional_api import ErrorTable, RequestCounter, error_class

PROVIDER = "gcp"
TIMEOUT_S = 30.0
RETRY_DEADLINE_S = 60.0
# Pages: the most each list allows (Compute 500, the Billing Catalog 5000).
COMPUTE_PAGE = 500
SKUS_PAGE = 5000
# zoneOperations.wait answers when the operation is DONE or after at most ~2 minutes; one
# wait call is asked for at most this long before it is asked again.
OPERATION_WAIT_CALL_S = 60.0
OPERATION_REPOLL_S = 1.0
_MESSAGE_MAX = 400

ERRORS: ErrorTable = (
    (errors.CapacityError, frozenset({
        "ZONE_RESOURCE_POOL_EXHAUSTED", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
        "RESOURCE_AVAILABILITY", "resource_availability"}), ()),
    (errors.QuotaError, frozenset({"QUOTA_EXCEEDED", "quotaExceeded"}), ()),
    (errors.AuthError, frozenset({
        "forbidden", "insufficientPermissions", "authError", "accessNotConfigured",
        "SERVICE_DISABLED", "ACCESS_TOKEN_EXPIRED", "CREDENTIALS_MISSING", "required",
        "IAM_PERMISSION_DENIED"}), ()),
    (errors.NotFoundError, frozenset({"notFound", "RESOURCE_NOT_FOUND"}), ()),
    (errors.TransientError, frozenset({
        "RESOURCE_NOT_READY", "RESOURCE_OPERATION_RATE_EXCEEDED", "rateLimitExceeded",
        "RATE_LIMIT_EXCEEDED", "userRateLimitExceeded", "backendError", "internalError"}), ()),
)
_BY_STATUS: dict[int, type[errors.ProviderError]] = {
    401: errors.AuthError, 403: errors.AuthError, 404: errors.NotFoundError,
    429: errors.TransientError}
_RETRIED = gretry.if_exception_type(gexc.TooManyRequests, gexc.InternalServerError,
                                    gexc.ServiceUnavailable, gexc.BadGateway,
                                    requests.ConnectionError, requests.Timeout)


class _DropPayloads(logging.Filter):
    """Drops the Google clients' DEBUG records that carry a request or response
    (``httpRequest``/``httpResponse`` extras): an insert's payload and an instance's metadata
    hold the startup script with the agent's secrets, and the structured formatter that
    ``GOOGLE_SDK_PYTHON_LOGGING_SCOPE`` turns on prints them."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (hasattr(record, "httpRequest") or hasattr(record, "httpResponse"))


_PAYLOAD_FILTER = _DropPayloads()
_SDK_LOGGERS = ("google.cloud.compute_v1", "google.cloud.billing_v1", "google.auth.transport")


def install_payload_filter() -> None:
    """Attach :class:`_DropPayloads` to every logger of the two SDKs (each module logs on its
    own logger, and a parent's filters do not apply to a child's records). Idempotent."""
    for name in list(logging.root.manager.loggerDict):
        if name.startswith(_SDK_LOGGERS):
            logger = logging.getLogger(name)
            if _PAYLOAD_FILTER not in logger.filters:
                logger.addFilter(_PAYLOAD_FILTER)


def error_for(code: str, http_status: int, text: str) -> errors.ProviderError:
    """The :mod:`providers.errors` exception for a Google error ``code`` (reason) with HTTP
    ``http_status`` (0 when unknown), carrying ``text`` (see the module docstring)."""
    cls = error_class(ERRORS, code, http_status)
    if cls is errors.ProviderError:
        cls = _BY_STATUS.get(http_status, errors.ProviderError)
    return cls(text, provider=PROVIDER, code=code or None)


def map_error(exc: Exception, where: str) -> errors.ProviderError:
    """A Google SDK exception → the :mod:`providers.errors` tree. ``where``: ``"gcp insert in
    us-central1-a"``."""
    if isinstance(exc, gexc.GoogleAPICallError):
        legacy = exc.errors[0].get("reason") if exc.errors and isinstance(exc.errors[0], dict) else None
        code = str(exc.reason or legacy or getattr(exc, "grpc_status_code", "") or "")
        status = int(exc.code or 0)
        return error_for(code, status, f"{where}: {code or status}: "
                                       f"{str(exc.message)[:_MESSAGE_MAX]}")
    if isinstance(exc, auth_exceptions.GoogleAuthError):
        return errors.AuthError(f"{where}: credentials missing, refused or not refreshable "
                                f"({type(exc).__name__})", provider=PROVIDER,
                                code=type(exc).__name__)
    if isinstance(exc, (requests.ConnectionError, requests.Timeout, gexc.RetryError)):
        return errors.TransientError(f"{where}: cannot reach the endpoint ({type(exc).__name__})",
                                     provider=PROVIDER, code=type(exc).__name__)
    return errors.ProviderError(f"{where}: {type(exc).__name__}: {str(exc)[:_MESSAGE_MAX]}",
                                provider=PROVIDER, code=type(exc).__name__)


def operation_error(operation: dict[str, Any], where: str) -> errors.ProviderError | None:
    """The error of a DONE operation (``error.errors[0].code``, ``httpErrorStatusCode``), or
    None when it succeeded."""
    found = ((operation.get("error") or {}).get("errors") or [])
    if not found:
        return None
    first = found[0]
    code = str(first.get("code") or "")
    text = "; ".join(str(e.get("message") or "") for e in found)[:_MESSAGE_MAX]
    return error_for(code, int(operation.get("httpErrorStatusCode") or 0),
                     f"{where}: {code}: {text}")


@contextmanager
def gcp_call(action: str, place: str) -> Iterator[None]:
    """Map any SDK, auth or connection failure raised inside the block with :func:`map_error`."""
    try:
        yield
    except (gexc.GoogleAPICallError, gexc.RetryError, auth_exceptions.GoogleAuthError,
            requests.RequestException) as exc:
        raise map_error(exc, f"gcp {action} in {place}") from None


def as_json(message: Any) -> dict[str, Any]:
    """A proto-plus message → its REST JSON dict (lowerCamelCase)."""
    return type(message).to_dict(message, preserving_proto_field_name=False,
                                 use_integers_for_enums=False)


def sku_json(sku: Any) -> dict[str, Any]:
    """A Billing Catalog ``Sku`` message → the REST JSON fields :mod:`providers.gcp.pricing`
    reads; ``pricingInfo`` only for SKUs that can price a shape
    (:func:`providers.gcp.pricing.priced_here`). Converting the whole of every SKU is ~3× as
    slow (5,000 SKUs, 90 % not Compute: 1.35 s against 0.50 s on a loaded 2-core machine)."""
    category = {"resourceFamily": sku.category.resource_family,
                "resourceGroup": sku.category.resource_group,
                "usageType": sku.category.usage_type}
    out: dict[str, Any] = {"skuId": sku.sku_id, "description": sku.description,
                           "category": category, "serviceRegions": list(sku.service_regions)}
    if priced_here(category):
        out["pricingInfo"] = [as_json(sku.pricing_info[0])] if sku.pricing_info else []
    return out


class GcpClient:
    """The SDK clients of one GCP adapter: Compute Engine (instances, zone operations, machine
    and accelerator types, regions) and the Cloud Billing Catalog, all over REST.

    - **project**: the project id every Compute call names.
    - **api_endpoint** / **billing_api_endpoint**: ``http(s)://host[:port]`` (local fakes);
      default Google's.
    - **credentials**: ``google.auth`` credentials to use instead of Application Default
      Credentials.

    Creating it makes no request; the clients are built at the first call. Thread-safe.
    ``requests`` counts HTTP requests per action (every page is one).
    """

    def __init__(self, project: str, *, api_endpoint: str | None = None,
                 billing_api_endpoint: str | None = None,
                 credentials: Credentials | None = None) -> None:
        self.project = project
        self._endpoints = (api_endpoint, billing_api_endpoint)
        self._given = credentials
        self._lock = threading.Lock()
        self._clients: dict[str, Any] | None = None
        self.requests = RequestCounter()
        install_payload_filter()

    # ----- construction -----------------------------------------------------------------------
    def _credentials(self) -> Credentials:
        if self._given is not None:
            return self._given
        credentials, _ = google.auth.default(scopes=[CLOUD_PLATFORM_SCOPE])
        return credentials

    def _build(self) -> dict[str, Any]:
        with self._lock:
            if self._clients is None:
                compute, billing = self._endpoints
                creds = self._credentials()
                options = {"api_endpoint": compute} if compute else None
                kwargs: dict[str, Any] = {"credentials": creds, "transport": "rest",
                                          "client_options": options}
                self._clients = {
                    "instances": compute_v1.InstancesClient(**kwargs),
                    "operations": compute_v1.ZoneOperationsClient(**kwargs),
                    "machine_types": compute_v1.MachineTypesClient(**kwargs),
                    "accelerator_types": compute_v1.AcceleratorTypesClient(**kwargs),
                    "regions": compute_v1.RegionsClient(**kwargs),
                    "billing": billing_v1.CloudCatalogClient(
                        credentials=creds, transport="rest",
                        client_options={"api_endpoint": billing} if billing else None),
                }
                install_payload_filter()  # loggers of modules the clients imported just now
            return self._clients

    def _client(self, name: str) -> Any:
        return self._build()[name]

    def credentials_source(self) -> str | None:
        """Where the credentials come from (``GOOGLE_APPLICATION_CREDENTIALS``, gcloud's
        application-default login, the metadata server's service account), or None when
        Application Default Credentials find none. Never the credentials themselves."""
        if self._given is not None:
            return f"credentials passed in ({type(self._given).__name__})"
        try:
            creds = self._credentials()
        except auth_exceptions.GoogleAuthError:
            return None
        kind = type(creds).__name__
        if os.environ.get("GOOGLE_APPLICATION_CREDENTIALS"):
            return f"GOOGLE_APPLICATION_CREDENTIALS ({kind})"
        if type(creds).__module__.startswith("google.auth.compute_engine"):
            return "the metadata server's service account"
        return f"gcloud application-default credentials ({kind})"

    # ----- paging -----------------------------------------------------------------------------
    def _pages(self, action: str, place: str, call: Callable[[], Any], field: str,
               convert: Callable[[Any], dict[str, Any]] = as_json) -> Iterator[dict[str, Any]]:
        with gcp_call(action, place):
            self.requests.add(action)
            pager = call()
            first = True
            for page in pager.pages:
                if not first:
                    self.requests.add(action)
                first = False
                for item in getattr(page, field):
                    yield convert(item)

    def _read(self, action: str, place: str, call: Callable[[], Any]) -> Any:
        with gcp_call(action, place):
            self.requests.add(action)
            return call()

    @staticmethod
    def _retry() -> gretry.Retry:
        return gretry.Retry(predicate=_RETRIED, initial=0.5, maximum=8.0, multiplier=2.0,
                            timeout=RETRY_DEADLINE_S)

    # ----- types, zones, prices ---------------------------------------------------------------
    def region_zones(self, region: str) -> list[str]:
        """The zone names of ``region`` (``regions.get``). Raises mapped errors."""
        answer = self._read("regions.get", region, lambda: self._client("regions").get(
            project=self.project, region=region, retry=self._retry(), timeout=TIMEOUT_S))
        return sorted(str(url).rsplit("/", 1)[-1] for url in answer.zones)

    def iter_machine_types(self, zone: str) -> Iterator[dict[str, Any]]:
        """Every ``MachineType`` of ``zone`` (``machineTypes.list``, 500 per page)."""
        yield from self._pages("machineTypes.list", zone, lambda: self._client(
            "machine_types").list(request={"project": self.project, "zone": zone,
                                           "max_results": COMPUTE_PAGE},
                                  retry=self._retry(), timeout=TIMEOUT_S), "items")

    def iter_accelerator_types(self, zone: str) -> Iterator[dict[str, Any]]:
        """Every ``AcceleratorType`` of ``zone`` (``acceleratorTypes.list``, paged)."""
        yield from self._pages("acceleratorTypes.list", zone, lambda: self._client(
            "accelerator_types").list(request={"project": self.project, "zone": zone,
                                               "max_results": COMPUTE_PAGE},
                                      retry=self._retry(), timeout=TIMEOUT_S), "items")

    def iter_skus(self) -> Iterator[dict[str, Any]]:
        """Every Compute Engine SKU of the Cloud Billing Catalog in USD
        (``services.skus.list``, 5000 per page, following ``nextPageToken``), as
        :func:`sku_json`."""
        yield from self._pages("skus.list", "billing", lambda: self._client("billing").list_skus(
            request={"parent": COMPUTE_ENGINE_SERVICE, "currency_code": "USD",
                     "page_size": SKUS_PAGE}, retry=self._retry(), timeout=TIMEOUT_S), "skus",
                                   sku_json)

    # ----- instances --------------------------------------------------------------------------
    def iter_instances(self, zone: str, filter_: str = "") -> Iterator[dict[str, Any]]:
        """Every ``Instance`` of ``zone`` matching ``filter_`` (``instances.list``, paged)."""
        request = {"project": self.project, "zone": zone, "max_results": COMPUTE_PAGE}
        if filter_:
            request["filter"] = filter_
        yield from self._pages("instances.list", zone, lambda: self._client("instances").list(
            request=request, retry=self._retry(), timeout=TIMEOUT_S), "items")

    def get_instance(self, zone: str, name: str) -> dict[str, Any] | None:
        """``instances.get``; None when ``zone`` has no such instance."""
        try:
            return as_json(self._read("instances.get", zone, lambda: self._client(
                "instances").get(project=self.project, zone=zone, instance=name,
                                 retry=self._retry(), timeout=TIMEOUT_S)))
        except errors.NotFoundError:
            return None

    def insert_instance(self, zone: str, body: dict[str, Any], request_id: str) -> dict[str, Any]:
        """``instances.insert`` of ``body`` (REST JSON) with ``requestId``; returns the
        Operation. A 409 ``alreadyExists`` is a :class:`ProviderError` with that code."""
        resource = compute_v1.Instance.from_json(json.dumps(body))
        return as_json(self._read("instances.insert", zone, lambda: self._client(
            "instances").insert_unary(request=compute_v1.InsertInstanceRequest(
                project=self.project, zone=zone, instance_resource=resource,
                request_id=request_id), timeout=TIMEOUT_S)))

    def delete_instance(self, zone: str, name: str) -> dict[str, Any]:
        """``instances.delete``; returns the Operation. Raises :class:`NotFoundError` when
        ``zone`` has no such instance."""
        return as_json(self._read("instances.delete", zone, lambda: self._client(
            "instances").delete_unary(project=self.project, zone=zone, instance=name,
                                      retry=self._retry(), timeout=TIMEOUT_S)))

    def wait_operation(self, zone: str, operation: dict[str, Any],
                       bound_s: float) -> dict[str, Any]:
        """``operation`` once DONE (``zoneOperations.wait``, asked again until DONE), or as
        last seen when ``bound_s`` seconds passed first."""
        deadline = time.monotonic() + bound_s
        first = True
        while operation.get("status") != "DONE":
            left = deadline - time.monotonic()
            if left <= 0:
                break
            if not first:  # a wait answered early, not DONE: do not spin
                time.sleep(min(OPERATION_REPOLL_S, left))
            first = False
            name = str(operation["name"])
            operation = as_json(self._read("zoneOperations.wait", zone, lambda n=name, t=left:
                                           self._client("operations").wait(
                                               project=self.project, zone=zone, operation=n,
                                               timeout=min(t, OPERATION_WAIT_CALL_S) + 5)))
        return operation

    def iter_operations(self, zone: str, filter_: str) -> Iterator[dict[str, Any]]:
        """The zone's operations matching ``filter_`` (``zoneOperations.list``, paged)."""
        yield from self._pages("zoneOperations.list", zone, lambda: self._client(
            "operations").list(request={"project": self.project, "zone": zone,
                                        "filter": filter_, "max_results": COMPUTE_PAGE},
                               retry=self._retry(), timeout=TIMEOUT_S), "items")

    def probe(self, action: str, place: str) -> None:
        """One cheap read testing credentials and one permission: the first page (one item)
        of ``machineTypes.list`` / ``instances.list`` in zone ``place`` or of ``skus.list``.
        Raises mapped errors."""
        calls: dict[str, Callable[[], Any]] = {
            "machineTypes.list": lambda: self._client("machine_types").list(
                request={"project": self.project, "zone": place, "max_results": 1},
                timeout=TIMEOUT_S),
            "instances.list": lambda: self._client("instances").list(
                request={"project": self.project, "zone": place, "max_results": 1},
                timeout=TIMEOUT_S),
            "skus.list": lambda: self._client("billing").list_skus(
                request={"parent": COMPUTE_ENGINE_SERVICE, "page_size": 1}, timeout=TIMEOUT_S),
        }
        self._read(action, place, calls[action])

    def close(self) -> None:
        with self._lock:
            clients, self._clients = self._clients, None
        for client in (clients or {}).values():
            client.transport.close()
