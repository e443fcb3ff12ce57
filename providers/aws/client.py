"""boto3 calls of the AWS adapter: clients, pagination, retries and error-code mapping.

No translation happens here: every method returns (or yields) the API's own dicts. Retries are
botocore's **adaptive** mode (token-bucket client-side rate limiting plus exponential backoff
on throttling and 5xx), so a call that still fails after ``max_attempts`` is final for this
pass and maps to :class:`TransientError`.

Errors: a ``ClientError`` code maps through :data:`ERRORS` (other HTTP 5xx are transient,
anything else a plain :class:`ProviderError`); missing credentials are :class:`AuthError`,
connection failures and timeouts :class:`TransientError`.

Messages name the action, the region, the AWS error code and AWS's message, never request
parameters (user data carries the agent's secrets) and never credentials.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import boto3
import botocore.loaders
import botocore.session
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    CredentialRetrievalError,
    NoCredentialsError,
    PartialCredentialsError,
)
from botocore.exceptions import (
    ConnectionError as BotoConnectionError,
)
from botocore.utils import parse_timestamp

from providers import errors
from providers.regional_api import (
    ErrorTable,
    RequestCounter,
    aware_utc,
    chunks,
    error_class,
    install_log_redaction,
)

PROVIDER = "aws"
CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 30.0
# Page sizes: the maximum each API allows, so a poll makes as few requests as possible.
INSTANCE_TYPES_PAGE = 100
OFFERINGS_PAGE = 1000
SPOT_PRICES_PAGE = 1000
INSTANCES_PAGE = 1000
PRICING_PAGE = 100
# Values per filter / InstanceTypes list in one request (EC2 caps filter values at 200).
VALUES_PER_REQUEST = 100
SPOT_PRODUCT_DESCRIPTION = "Linux/UNIX"

ERRORS: ErrorTable = (
    (errors.CapacityError, frozenset({
        "InsufficientInstanceCapacity", "InsufficientCapacity", "InsufficientHostCapacity",
        "InsufficientReservedInstanceCapacity", "InsufficientFreeAddressesInSubnet",
        "MaxSpotInstanceCountExceeded", "SpotMaxPriceTooLow", "Unsupported",
        "UnfulfillableCapacity", "InsufficientCapacityOnOutpost"}), ()),
    (errors.QuotaError, frozenset({
        "VcpuLimitExceeded", "InstanceLimitExceeded", "ResourceLimitExceeded",
        "MaxIOPSLimitExceeded", "VolumeLimitExceeded", "AddressLimitExceeded"}), ()),
    (errors.AuthError, frozenset({
        "AuthFailure", "UnauthorizedOperation", "OptInRequired", "InvalidClientTokenId",
        "SignatureDoesNotMatch", "ExpiredToken", "ExpiredTokenException", "AccessDenied",
        "AccessDeniedException", "UnrecognizedClientException", "Blocked",
        "PendingVerification"}), ()),
    (errors.NotFoundError, frozenset({"InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed"}), ()),
    (errors.TransientError, frozenset({
        "RequestLimitExceeded", "Throttling", "ThrottlingException", "RequestThrottled",
        "TooManyRequestsException", "InternalError", "InternalFailure", "ServiceUnavailable",
        "Unavailable", "InternalErrorException", "ServiceUnavailableException"}), ()),
)
_MESSAGE_MAX = 400

log = logging.getLogger(__name__)


# botocore DEBUG records that print request parameters (RunInstances' UserData holds the
# agent's token and store credentials) are dropped.
_REDACTED_LOGGERS = ("botocore.endpoint", "botocore.client", "botocore.hooks", "botocore.parsers",
                     "botocore.httpsession", "urllib3.connectionpool")


def map_error(exc: Exception, action: str, region: str) -> errors.ProviderError:
    """Translate a botocore exception into the :mod:`providers.errors` tree (see module
    docstring). ``action`` names what was attempted (``"run_instances"``); ``region`` where."""
    where = f"aws {action} in {region}"
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        code = str(error.get("Code") or "Unknown")
        message = str(error.get("Message") or "")[:_MESSAGE_MAX]
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
        text = f"{where}: {code}: {message}".rstrip(": ")
        return error_class(ERRORS, code, status)(text, provider=PROVIDER, code=code)
    if isinstance(exc, (NoCredentialsError, PartialCredentialsError, CredentialRetrievalError)):
        return errors.AuthError(f"{where}: no usable AWS credentials in boto3's standard chain "
                                f"({type(exc).__name__})", provider=PROVIDER,
                                code=type(exc).__name__)
    if isinstance(exc, BotoConnectionError):
        return errors.TransientError(f"{where}: cannot reach the endpoint "
                                     f"({type(exc).__name__})", provider=PROVIDER,
                                     code=type(exc).__name__)
    return errors.ProviderError(f"{where}: {type(exc).__name__}: {str(exc)[:_MESSAGE_MAX]}",
                                provider=PROVIDER, code=type(exc).__name__)


@contextmanager
def aws_call(action: str, region: str) -> Iterator[None]:
    """Map any botocore failure raised inside the block with :func:`map_error`."""
    try:
        yield
    except (ClientError, BotoCoreError) as exc:
        raise map_error(exc, action, region) from None


@functools.cache
def _shared_loader() -> Any:
    """One botocore data loader for every client of the process: it caches the parsed service
    models (EC2's is several MB of JSON, ~0.8 s to load), which a fresh session reloads."""
    return botocore.loaders.create_loader()


def fast_timestamp(value: str | float) -> datetime:
    """botocore's timestamp parser, with a fast path for ISO-8601 (what EC2 sends: aware UTC by
    :func:`providers.regional_api.aware_utc`): 50× faster than dateutil, which dominated
    parsing of long spot price histories."""
    try:
        return aware_utc(value) if isinstance(value, str) else parse_timestamp(value)
    except ValueError:
        return parse_timestamp(value)


class AwsClient:
    """The boto3 clients of one AWS adapter: one EC2 client per region, one Price List client.

    - **regions**: EC2 regions.
    - **pricing_region**: region of the Price List endpoint (``us-east-1`` by default).
    - **endpoint_url** / **pricing_endpoint_url**: override the endpoints (local fakes).
    - **profile**: shared-config profile name; credentials come from boto3's standard chain.
    - **max_attempts**: attempts per call in botocore's adaptive retry mode.
    - **max_pool_connections**: HTTP connections per client (the adapter fans out per region,
      one thread per region, so a handful suffices).

    Creating the clients makes no request. boto3 clients are thread-safe; this object is too.
    ``requests`` counts every HTTP request sent (retries included), per operation.
    """

    def __init__(self, regions: Iterable[str], *, pricing_region: str = "us-east-1",
                 endpoint_url: str | None = None, pricing_endpoint_url: str | None = None,
                 profile: str | None = None, max_attempts: int = 8,
                 max_pool_connections: int = 10) -> None:
        install_log_redaction(_REDACTED_LOGGERS, ("UserData",))
        core = botocore.session.get_session()
        core.register_component("data_loader", _shared_loader())
        core.get_component("response_parser_factory").set_parser_defaults(
            timestamp_parser=fast_timestamp)
        self.session = boto3.session.Session(profile_name=profile, botocore_session=core)
        # total_max_attempts counts the first try (botocore's "max_attempts" would not).
        config = Config(retries={"mode": "adaptive", "total_max_attempts": max_attempts},
                        connect_timeout=CONNECT_TIMEOUT_S, read_timeout=READ_TIMEOUT_S,
                        max_pool_connections=max_pool_connections,
                        user_agent_extra="gpu-arbiter")
        self.requests = RequestCounter()
        self.ec2: dict[str, Any] = {}
        for region in regions:
            client = self.session.client("ec2", region_name=region, endpoint_url=endpoint_url,
                                         config=config)
            client.meta.events.register("before-send", self._count)
            self.ec2[region] = client
        self.pricing_region = pricing_region
        self.pricing = self.session.client("pricing", region_name=pricing_region,
                                           endpoint_url=pricing_endpoint_url, config=config)
        self.pricing.meta.events.register("before-send", self._count)

    def _count(self, event_name: str = "", **_: Any) -> None:
        # event_name: "before-send.ec2.DescribeSpotPriceHistory"
        self.requests.add(event_name.split(".", 1)[1] if "." in event_name else event_name)

    def credentials_source(self) -> str | None:
        """How boto3 found credentials (``env``, ``shared-credentials-file``, ``iam-role``,
        ``sso``, …), or None when the chain has none. Never the credentials themselves."""
        try:
            creds = self.session.get_credentials()
        except BotoCoreError:
            return None
        return getattr(creds, "method", "unknown") if creds is not None else None

    def _pages(self, region: str | None, operation: str, key: str, page_size: int,
               **kwargs: Any) -> Iterator[dict[str, Any]]:
        """Every ``key`` item of ``operation``'s pages in ``region`` (None: the Price List
        endpoint), ``page_size`` per page; empty ``Filters`` are left out. Raises mapped errors."""
        client = self.ec2[region] if region else self.pricing
        if not kwargs.get("Filters", True):
            del kwargs["Filters"]
        with aws_call(operation if region else f"pricing {operation}",
                      region or self.pricing_region):
            for page in client.get_paginator(operation).paginate(
                    **kwargs, PaginationConfig={"PageSize": page_size}):
                yield from page.get(key, [])

    # ----- offers and prices ----------------------------------------------------------------
    def iter_instance_types(self, region: str, patterns: list[str]) -> Iterator[dict[str, Any]]:
        """Every ``InstanceTypeInfo`` of ``region`` (``describe_instance_types``, paginated,
        100 per page), or only those matching ``patterns`` (``*`` wildcards) when given.
        Raises mapped errors."""
        filters = [{"Name": "instance-type", "Values": patterns}] if patterns else []
        yield from self._pages(region, "describe_instance_types", "InstanceTypes",
                               INSTANCE_TYPES_PAGE, Filters=filters)

    def iter_type_offerings(self, region: str,
                            instance_types: Iterable[str]) -> Iterator[dict[str, Any]]:
        """``{"InstanceType", "Location"}`` per (type, availability zone) of ``region``
        (``describe_instance_type_offerings``, ``LocationType=availability-zone``, paginated).
        Raises mapped errors."""
        for batch in chunks(instance_types, VALUES_PER_REQUEST):
            yield from self._pages(region, "describe_instance_type_offerings",
                                   "InstanceTypeOfferings", OFFERINGS_PAGE,
                                   LocationType="availability-zone",
                                   Filters=[{"Name": "instance-type", "Values": batch}])

    def iter_spot_prices(self, region: str, instance_types: Iterable[str], start: datetime,
                         end: datetime | None = None) -> Iterator[dict[str, Any]]:
        """Spot price records (``describe_spot_price_history``, Linux/UNIX, paginated 1,000 per
        page) of ``instance_types`` in ``region`` between ``start`` and ``end`` (aware UTC;
        ``end`` None = now). As AWS documents, the answer also holds, per zone and type, the
        last change before ``start`` (the price in effect at ``start``), so ``start=now``
        gives the current price of every zone. Raises mapped errors."""
        window: dict[str, Any] = {"StartTime": start} | ({"EndTime": end} if end else {})
        for batch in chunks(instance_types, VALUES_PER_REQUEST):
            yield from self._pages(region, "describe_spot_price_history", "SpotPriceHistory",
                                   SPOT_PRICES_PAGE, InstanceTypes=batch,
                                   ProductDescriptions=[SPOT_PRODUCT_DESCRIPTION], **window)

    def iter_price_list(self, region: str) -> Iterator[str]:
        """Price List product documents (JSON strings) of on-demand Linux EC2 instances in
        ``region``: ``get_products`` on the pricing endpoint with the filters regionCode,
        operatingSystem=Linux, tenancy=Shared, preInstalledSw=NA, capacitystatus=Used
        (paginated, 100 per page). Raises mapped errors."""
        filters = [{"Type": "TERM_MATCH", "Field": field, "Value": value} for field, value in (
            ("regionCode", region), ("operatingSystem", "Linux"), ("tenancy", "Shared"),
            ("preInstalledSw", "NA"), ("capacitystatus", "Used"))]
        yield from self._pages(None, "get_products", "PriceList", PRICING_PAGE,
                               ServiceCode="AmazonEC2", Filters=filters, FormatVersion="aws_v1")

    # ----- instances ------------------------------------------------------------------------
    def run_instance(self, region: str, params: dict[str, Any]) -> dict[str, Any]:
        """``run_instances(**params)`` (exactly one instance); returns its ``Instance`` dict.
        Raises mapped errors (``IdempotentParameterMismatch`` is a plain ProviderError)."""
        with aws_call("run_instances", region):
            answer = self.ec2[region].run_instances(**params)
        return answer["Instances"][0]

    def terminate_instance(self, region: str, instance_id: str) -> None:
        """``terminate_instances`` for one id. Raises NotFoundError when ``region`` has no such
        instance, other mapped errors otherwise."""
        with aws_call("terminate_instances", region):
            self.ec2[region].terminate_instances(InstanceIds=[instance_id])

    def iter_instances(self, region: str,
                       filters: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        """Every ``Instance`` dict of ``region`` matching ``filters`` (``describe_instances``,
        paginated; recently terminated instances included, as AWS keeps them ~1 h).
        Raises mapped errors."""
        for reservation in self._pages(region, "describe_instances", "Reservations",
                                       INSTANCES_PAGE, Filters=filters):
            yield from reservation.get("Instances", [])

    def spot_requests(self, region: str, instance_ids: list[str]) -> list[dict[str, Any]]:
        """``SpotInstanceRequest`` dicts of the given instances
        (``describe_spot_instance_requests`` filtered on ``instance-id``). Raises mapped errors."""
        out: list[dict[str, Any]] = []
        with aws_call("describe_spot_instance_requests", region):
            for batch in chunks(instance_ids, VALUES_PER_REQUEST):
                answer = self.ec2[region].describe_spot_instance_requests(
                    Filters=[{"Name": "instance-id", "Values": batch}])
                out.extend(answer.get("SpotInstanceRequests", []))
        return out

    # ----- checks ---------------------------------------------------------------------------
    def probe(self, region: str, operation: str) -> None:
        """One cheap read to test credentials and one permission in ``region``:
        ``describe_instance_types`` / ``describe_spot_price_history`` / ``describe_instances``
        (5 results at most) or ``get_products`` (1 result). Raises mapped errors."""
        client = self.ec2[region] if operation != "get_products" else self.pricing
        kwargs: dict[str, Any] = {"MaxResults": 5}
        if operation == "describe_spot_price_history":
            kwargs["ProductDescriptions"] = [SPOT_PRODUCT_DESCRIPTION]
        if operation == "get_products":
            kwargs = {"ServiceCode": "AmazonEC2", "MaxResults": 1, "FormatVersion": "aws_v1",
                      "Filters": [{"Type": "TERM_MATCH", "Field": "regionCode", "Value": region}]}
        with aws_call(operation, region):
            getattr(client, operation)(**kwargs)

    def close(self) -> None:
        for client in [*self.ec2.values(), self.pricing]:
            client.close()
