"""Azure Resource Manager (and azure-core, azure-identity) errors → the
:mod:`providers.errors` tree.

ARM answers a failed call with ``{"error": {"code", "message", "details": [...]}}``; a failed
long-running operation carries the same object, often with a generic outer code
(``ResourceDeploymentFailure``, ``ResourceOperationFailure``) and the cause in ``details``
(``AllocationFailed``). The first code of the error and its details that :data:`ERRORS` names
decides the class (other HTTP 5xx are transient, anything else a plain
:class:`ProviderError`). Codes and messages are those of
``shared/data/api_examples/azure/compute_spot_error_codes_docs.json``,
``compute_errors_capacity_observed.json`` and ``compute_error_skunotavailable_assembled.json``.

``OperationNotAllowed`` is a quota error only when its message says so (Azure answers a core
quota overrun with it, "…exceeding approved … Cores quota"; the same code refuses other
operations). Parameters Azure refuses are plain errors with code ``InvalidLaunchRequest``
(what :class:`providers.regional.RegionalCompute` calls a refused launch), the cloud's code
in the message. Messages never carry request bodies (``customData`` holds the agent's
secrets) nor tokens.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from azure.core.exceptions import (
    AzureError,
    ClientAuthenticationError,
    HttpResponseError,
    ServiceRequestError,
    ServiceResponseError,
)

from providers.errors import (
    AuthError,
    CapacityError,
    NotFoundError,
    ProviderError,
    QuotaError,
    TransientError,
)
from providers.regional_api import ErrorTable, error_class

PROVIDER = "azure"
INVALID_LAUNCH = "InvalidLaunchRequest"
ERRORS: ErrorTable = (
    (CapacityError, frozenset({
        "SkuNotAvailable", "AllocationFailed", "ZonalAllocationFailed",
        "OverconstrainedAllocationRequest", "OverconstrainedZonalAllocationRequest",
        "SpotPriceGreaterThanProvidedMaxPrice", "AzureSpotIsNotSupportedForThisVMSize"}), ()),
    (QuotaError, frozenset({"QuotaExceeded", "AzureSpotFeatureNotEnabledForSubscription",
                            "ResourceQuotaExceeded"}), ()),
    (AuthError, frozenset({
        "AuthenticationFailed", "AuthorizationFailed", "InvalidAuthenticationToken",
        "InvalidAuthenticationTokenTenant", "ExpiredAuthenticationToken",
        "LinkedAuthorizationFailed", "SubscriptionNotFound", "MissingSubscription",
        "InvalidSubscriptionId"}), ()),
    (NotFoundError, frozenset({"ResourceNotFound", "NotFound", "ResourceGroupNotFound"}), ()),
    (TransientError, frozenset({
        "TooManyRequests", "ServerTimeout", "InternalServerError", "InternalExecutionError",
        "ServiceUnavailable", "GatewayTimeout", "RetryableError", "OperationPreempted"}), ()),
)
# Codes of parameters the Spot rules refuse: the launch request itself is wrong.
INVALID_LAUNCH_CODES = frozenset({
    "EvictionPolicyCanBeSetOnlyOnAzureSpotVirtualMachines", "AzureSpotVMNotSupportedInAvailabilitySet",
    "VMPriorityCannotBeApplied", "MaxPriceValueInvalid", "MaxPriceChangeNotAllowedForAllocatedVMs",
    "MaxPriceChangeNotAllowed", "AzureSpotIsNotSupportedForThisAPIVersion",
    "MaxPriceIsSupportedOnlyForAzureSpotVirtualMachines", "InvalidParameter",
    "InvalidRequestContent", "InvalidRequestFormat", "BadRequest", "PropertyChangeNotAllowed"})
_MESSAGE_MAX = 400


def _codes(error: Any) -> Iterator[tuple[str, str]]:
    """(code, message) of an ARM error object (``ODataV4Format`` or dict) and its details."""
    if error is None:
        return
    get = error.get if isinstance(error, dict) else lambda k, d=None: getattr(error, k, d)
    yield str(get("code") or ""), str(get("message") or "")
    for detail in get("details") or []:
        yield from _codes(detail)


def _named(code: str, message: str) -> type[ProviderError] | None:
    """The class a code decides by itself, or None when the table does not name it."""
    if code == "OperationNotAllowed":
        return QuotaError if "quota" in message.lower() else None
    if code in INVALID_LAUNCH_CODES:
        return ProviderError
    cls = error_class(ERRORS, code)
    return None if cls is ProviderError else cls


def classify(error: Any, status: int = 0) -> tuple[type[ProviderError], str, str]:
    """(class, code, message) of an ARM error object: its innermost code the tables name
    (the cause under a generic outer code), else its outer code (HTTP >= 500: transient)."""
    codes = [(c, m) for c, m in _codes(error) if c] or [("Unknown", "")]
    for code, message in reversed(codes):
        cls = _named(code, message)
        if cls is not None:
            return cls, code, message
    code, message = codes[0]
    return error_class(ERRORS, code, status), code, message


def map_error(exc: Exception, action: str, where: str) -> ProviderError:
    """Translate an azure-core/azure-identity exception (see the module docstring).
    ``action`` names what was attempted (``create VM``), ``where`` the location or resource
    group."""
    prefix = f"azure {action} in {where}"
    if isinstance(exc, ClientAuthenticationError) and not getattr(exc, "status_code", None):
        return AuthError(f"{prefix}: no usable Azure credential in DefaultAzureCredential's "
                         f"chain ({type(exc).__name__})", provider=PROVIDER,
                         code=type(exc).__name__)
    if isinstance(exc, HttpResponseError) and exc.status_code:
        status = int(exc.status_code)
        cls, code, message = classify(exc.error, status)
        if code == "Unknown" and status in (401, 403):
            cls, code = AuthError, f"HTTP{status}"
        if code == "Unknown" and status == 404:
            cls, code = NotFoundError, "NotFound"
        text = f"{prefix}: {code}: {message[:_MESSAGE_MAX]}".rstrip(": ") + f" (HTTP {status})"
        if cls is ProviderError and code in INVALID_LAUNCH_CODES:
            return ProviderError(text, provider=PROVIDER, code=INVALID_LAUNCH)
        return cls(text, provider=PROVIDER, code=code)
    if isinstance(exc, (ServiceRequestError, ServiceResponseError)):
        return TransientError(f"{prefix}: cannot reach the endpoint ({type(exc).__name__})",
                              provider=PROVIDER, code=type(exc).__name__)
    return ProviderError(f"{prefix}: {type(exc).__name__}: {str(exc)[:_MESSAGE_MAX]}",
                         provider=PROVIDER, code=type(exc).__name__)


@contextmanager
def azure_call(action: str, where: str) -> Iterator[None]:
    """Map any azure-core failure raised inside the block with :func:`map_error`."""
    try:
        yield
    except AzureError as exc:
        raise map_error(exc, action, where) from None
