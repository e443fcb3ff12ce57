"""Azure Resource Manager calls of the Azure adapter, through azure-mgmt-compute's
``ComputeManagementClient``: Resource SKUs and virtual machines of one subscription and
resource group. No translation happens here: every method returns the REST JSON dicts.

Credentials: azure-identity's ``DefaultAzureCredential`` unless a ``TokenCredential`` is
given; the token scope is ``<endpoint>/.default`` (sovereign clouds follow their endpoint).
Retries are azure-core's ``RetryPolicy`` (429, 5xx and connection errors; ``Retry-After``
honoured), ``max_attempts`` tries in all, 5 s connect / 30 s read timeouts.

Long-running operations are started and not waited for (``polling=False``): creating a GPU
VM takes minutes and deleting one several, while a reconcile step must stay short. The
answer of the ``PUT`` already is the VM (``provisioningState`` ``Creating``); what happens
next is read back by listing (:mod:`.instances`): an allocation failure shows as
``provisioningState`` ``Failed``.

Errors are mapped by :mod:`.errors`. The body of a create carries ``customData`` (the agent's
secrets): azure-core never logs bodies unless asked, and records that mention it are dropped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

from azure.core import MatchConditions
from azure.core.credentials import TokenCredential
from azure.core.exceptions import ClientAuthenticationError
from azure.core.rest import HttpRequest
from azure.mgmt.compute import ComputeManagementClient

from providers.azure.errors import azure_call
from providers.errors import NotFoundError, TransientError
from providers.regional_api import RequestCounter, install_log_redaction

log = logging.getLogger(__name__)
CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 30.0
# Resource SKUs answer for one location only through this filter (the only one supported).
_SKU_FILTER = "location eq '{location}'"
SKUS_API_VERSION = "2021-07-01"
# A location lists ~1,500 SKUs in pages of a few hundred; more pages than this is a loop.
MAX_SKU_PAGES = 100
_REDACTED_LOGGERS = ("azure", "azure.core.pipeline.policies.http_logging_policy",
                     "urllib3.connectionpool")


# Loggers whose words the adapter says itself, shorter: azure-core logs every request's and
# response's headers at INFO, azure-identity each failed credential of its chain at WARNING
# (the check row and the AuthError carry why). Quietened only when nobody set their level.
_QUIETENED = {"azure.core.pipeline.policies.http_logging_policy": logging.WARNING,
              "azure.identity": logging.ERROR}


def _quieten_sdk_logs() -> None:
    for name, level in _QUIETENED.items():
        logger = logging.getLogger(name)
        if logger.level == logging.NOTSET:
            logger.setLevel(level)


def _operation(method: str, url: str) -> str:
    """``GET …/virtualMachines/vm1`` → ``VirtualMachines_Get`` (the REST operation ids)."""
    path = urlsplit(url).path.rstrip("/")
    if path.endswith("/skus"):
        return "ResourceSkus_List"
    if path.endswith("/virtualMachines"):
        return "VirtualMachines_List"
    return {"GET": "VirtualMachines_Get", "PUT": "VirtualMachines_CreateOrUpdate",
            "DELETE": "VirtualMachines_Delete"}.get(method, f"VirtualMachines_{method}")


class AzureClient:
    """The Resource Manager client of one Azure adapter.

    - **subscription_id**: the subscription (UUID).
    - **resource_group**: where VMs are created and listed (None: offers only).
    - **endpoint**: the Resource Manager URL (``https://management.azure.com``).
    - **credential**: a ``TokenCredential``; default ``DefaultAzureCredential()``.
    - **verify**: CA bundle file for TLS (local fakes, private CAs); default the system's.
      Verification is never turned off.
    - **max_attempts** / **retry_base_wait_s**: tries per call and the first wait (doubling).

    Creating it makes no request. Thread-safe. ``requests`` counts every HTTP request sent
    (retries included) per REST operation.
    """

    def __init__(self, subscription_id: str, *, resource_group: str | None, endpoint: str,
                 credential: TokenCredential | None = None, verify: str | None = None,
                 max_attempts: int = 4, retry_base_wait_s: float = 0.8) -> None:
        install_log_redaction(_REDACTED_LOGGERS, ("customData",))
        _quieten_sdk_logs()
        if credential is None:
            from azure.identity import DefaultAzureCredential

            credential = DefaultAzureCredential()
        self.credential = credential
        self.subscription_id = subscription_id
        self.resource_group = resource_group
        self.scope = f"{endpoint.rstrip('/')}/.default"
        self.endpoint_host = urlsplit(endpoint).netloc
        self.requests = RequestCounter()
        options: dict[str, Any] = {"connection_verify": verify} if verify else {}
        self.compute = ComputeManagementClient(
            credential, subscription_id, base_url=endpoint, credential_scopes=[self.scope],
            retry_total=max_attempts - 1, retry_backoff_factor=retry_base_wait_s,
            retry_backoff_max=30, connection_timeout=CONNECT_TIMEOUT_S,
            read_timeout=READ_TIMEOUT_S, raw_request_hook=self._count, **options)

    def _count(self, request: Any) -> None:
        http = request.http_request
        self.requests.add(_operation(http.method, http.url))

    def credentials_source(self) -> str | None:
        """Which credential of the chain gave a token (``EnvironmentCredential``,
        ``ManagedIdentityCredential``, ``AzureCliCredential``…; the class name for a given
        credential), or None when none did. Never the token. May block on the chain."""
        try:
            self.credential.get_token(self.scope)
        except ClientAuthenticationError:
            return None
        used = getattr(self.credential, "_successful_credential", None) or self.credential
        return type(used).__name__

    # ----- sizes ----------------------------------------------------------------------------
    def iter_skus(self, location: str) -> Iterator[dict[str, Any]]:
        """Every Resource SKU of ``location`` (every resource type, ~1,500 in a large
        location; paged by ``nextLink``). Raises mapped errors.

        The raw JSON goes through the client's own pipeline (``send_request``: the same
        token, retries and logging): the typed ``resource_skus.list`` builds a model of every
        capability, 5 s for a large location against 0.8 s for the JSON."""
        request: HttpRequest | None = HttpRequest(
            "GET", f"/subscriptions/{self.subscription_id}/providers/Microsoft.Compute/skus",
            params={"api-version": SKUS_API_VERSION,
                    "$filter": _SKU_FILTER.format(location=location)})
        with azure_call("list resource SKUs", location):
            for _ in range(MAX_SKU_PAGES):
                response = self.compute.send_request(request)
                response.raise_for_status()
                page = response.json()
                yield from page.get("value") or []
                next_link = page.get("nextLink")
                if not next_link:
                    return
                # The client's pipeline puts the bearer token on every request it sends.
                if urlsplit(next_link).netloc != self.endpoint_host:
                    raise TransientError(f"azure resource SKUs for {location}: nextLink "
                                         f"leaves {self.endpoint_host}; not followed",
                                         provider="azure")
                request = HttpRequest("GET", next_link)
        raise TransientError(f"azure resource SKUs for {location}: more than {MAX_SKU_PAGES} "
                             "pages", provider="azure")

    def probe_skus(self, location: str) -> None:
        """The first page of ``location``'s SKUs (credentials and read permission). Raises
        mapped errors."""
        next(self.iter_skus(location), None)

    # ----- virtual machines -----------------------------------------------------------------
    def _group(self) -> str:
        if self.resource_group is None:
            raise ValueError("no resource_group configured")
        return self.resource_group

    def iter_vms(self) -> Iterator[dict[str, Any]]:
        """Every VM of the resource group with its instance view (``$expand=instanceView``,
        paged); none without a resource group. Raises mapped errors."""
        if self.resource_group is None:
            return
        with azure_call("list VMs", self.resource_group):
            for vm in self.compute.virtual_machines.list(self.resource_group,
                                                          expand="instanceView"):
                yield vm.as_dict()

    def get_vm(self, name: str) -> dict[str, Any] | None:
        """VM ``name`` with its instance view, or None when the resource group has none.
        Raises mapped errors."""
        try:
            with azure_call("get VM", self._group()):
                return self.compute.virtual_machines.get(self._group(), name,
                                                         expand="instanceView").as_dict()
        except NotFoundError:
            return None

    def create_vm(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """``PUT`` VM ``name`` with ``body`` only if it does not exist (``If-None-Match: *``);
        returns the VM as the ``PUT`` answered, without waiting for the operation. Raises
        mapped errors (``PreconditionFailed`` when it exists already)."""
        with azure_call("create VM", f"{self._group()}/{body.get('location')}"):
            poller = self.compute.virtual_machines.begin_create_or_update(
                self._group(), name, body, match_condition=MatchConditions.IfMissing,
                polling=False)
            return poller.result().as_dict()

    def delete_vm(self, name: str) -> None:
        """Start deleting VM ``name`` (its disk, NIC and IP go with it); returns at once.
        Raises NotFoundError when it does not exist, other mapped errors otherwise."""
        with azure_call("delete VM", self._group()):
            self.compute.virtual_machines.begin_delete(self._group(), name, polling=False)

    def close(self) -> None:
        self.compute.close()
        close: Callable[[], None] | None = getattr(self.credential, "close", None)
        if close is not None:
            close()
