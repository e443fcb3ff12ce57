"""ECS calls of the Alibaba Cloud adapter (aliyun-python-sdk-core + aliyun-python-sdk-ecs):
credentials, endpoints, paging and retries; errors map through :mod:`.errors`.

No translation happens here: every method returns (or yields) the API's own dicts, parsed from
its JSON answers. The SDK's own retry is off; calls that fail with a :class:`TransientError`
(throttling, 5xx, connection errors, timeouts) are retried with exponential backoff and jitter
(tenacity), ``max_attempts`` tries in all. Retrying is safe: reads are reads,
``RunInstances`` carries a ``ClientToken`` and ``DeleteInstance`` of a gone instance is "not
found", which is success.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from aliyunsdkcore.acs_exception.exceptions import ClientException, ServerException
from aliyunsdkcore.auth.credentials import EcsRamRoleCredential, StsTokenCredential
from aliyunsdkcore.client import AcsClient
from aliyunsdkcore.request import RpcRequest
from aliyunsdkecs.endpoint import endpoint_data
from tenacity import (
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_random_exponential,
)

from providers.aliyun.errors import map_error
from providers.errors import AuthError, ProviderError, TransientError
from providers.regional_api import RequestCounter, chunks, install_log_redaction

PROVIDER = "aliyun"
CONNECT_TIMEOUT_S = 5
READ_TIMEOUT_S = 30
# Page sizes: DescribeInstanceTypes and DescribeInstances take MaxResults (≤ 100 is accepted by
# every API version); DescribeSpotPriceHistory pages by Offset/NextOffset with a server size.
INSTANCE_TYPES_PAGE = 100
INSTANCES_PAGE = 100
# DescribeSpotAdvice takes at most 10 InstanceTypes.N per request (its documented N range).
ADVICE_TYPES_PER_REQUEST = 10
# DescribeSpotPriceHistory only reaches 30 days back (documented StartTime limit).
SPOT_HISTORY_MAX_DAYS = 30
NETWORK_TYPE = "vpc"
IO_OPTIMIZED = "optimized"
OS_TYPE = "linux"
ACCESS_KEY_ENV = (("ALIBABA_CLOUD_ACCESS_KEY_ID", "ALIBABA_CLOUD_ACCESS_KEY_SECRET"),
                  ("ALIYUN_ACCESS_KEY_ID", "ALIYUN_ACCESS_KEY_SECRET"))
SECURITY_TOKEN_ENV = "ALIBABA_CLOUD_SECURITY_TOKEN"
ECS_API_VERSION = "2014-05-26"


def ecs_request(action: str) -> RpcRequest:
    """The SDK request of ECS ``action``, as aliyunsdkecs's per-action classes build it (a POST
    with ECS's endpoint map and regional endpoints)."""
    request = RpcRequest("Ecs", ECS_API_VERSION, action, "ecs")
    request.set_method("POST")
    request.endpoint_map = endpoint_data.getEndpointMap()
    request.endpoint_regional = endpoint_data.getEndpointRegional()
    return request


# SDK records that would print request parameters or URLs are dropped: ``UserData`` (the
# agent's token and store credentials), ``AccessKeyId`` and ``Signature``.
_REDACTED_LOGGERS = ("aliyunsdkcore.client", "aliyunsdkcore.http.http_response",
                     "aliyunsdkcore.vendored.requests.packages.urllib3.connectionpool")
_REDACTED_WORDS = ("UserData", "AccessKeyId", "Signature=")


def _retryable(exc: BaseException) -> bool:
    return isinstance(exc, TransientError)


def ecs_time(value: datetime) -> str:
    """An aware datetime → ``yyyy-MM-ddTHH:mm:ssZ`` (UTC), the format ECS time parameters take."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class AliyunClient:
    """The ECS API of one Alibaba Cloud adapter: one SDK ``AcsClient`` per region.

    - **regions**: region ids the clients are for.
    - **endpoint_url**: ``http(s)://host[:port]`` every request goes to (a local fake, a VPC
      endpoint); None = the SDK's endpoint of each region, over HTTPS.
    - **ecs_ram_role**: RAM role of the ECS instance to take credentials from when none are in
      the environment (see :func:`credentials_from_env`).
    - **max_attempts**, **retry_base_wait_s**, **retry_max_wait_s**: tenacity's retry of
      transient failures (tries in all; first wait; longest wait, seconds).
    - **environ**: where to read credentials (default ``os.environ``); **sleep**: the wait
      function (tests pass a recorder).

    Creating it makes no request and reads no credentials; the first call does (missing
    credentials → :class:`AuthError` then). Thread-safe. ``requests`` counts every HTTP request
    sent, retries included, per action.
    """

    def __init__(self, regions: Iterable[str], *, endpoint_url: str | None = None,
                 ecs_ram_role: str | None = None, max_attempts: int = 5,
                 retry_base_wait_s: float = 0.5, retry_max_wait_s: float = 20.0,
                 environ: Mapping[str, str] | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        install_log_redaction(_REDACTED_LOGGERS, _REDACTED_WORDS)
        self.regions = list(regions)
        self.ecs_ram_role = ecs_ram_role
        self._environ = environ if environ is not None else os.environ
        self._endpoint: tuple[str, str] | None = None
        if endpoint_url:
            parts = urlsplit(endpoint_url)
            self._endpoint = (parts.netloc, parts.scheme)
        self._retrying: dict[str, Any] = {
            "stop": stop_after_attempt(max_attempts),
            "wait": wait_random_exponential(multiplier=retry_base_wait_s, max=retry_max_wait_s),
            "retry": retry_if_exception(_retryable), "reraise": True, "sleep": sleep}
        self._lock = threading.Lock()
        self._clients: dict[str, AcsClient] = {}
        self.requests = RequestCounter()

    # ----- credentials and transport ---------------------------------------------------------
    def credentials_source(self) -> str | None:
        """Where credentials come from (``env ALIBABA_CLOUD_ACCESS_KEY_ID``, ``env … + STS
        token``, ``ecs ram role NAME``), or None when there are none. Never the credentials."""
        for id_name, secret_name in ACCESS_KEY_ENV:
            if self._environ.get(id_name) and self._environ.get(secret_name):
                sts = " + STS token" if self._environ.get(SECURITY_TOKEN_ENV) else ""
                return f"env {id_name}{sts}"
        return f"ecs ram role {self.ecs_ram_role}" if self.ecs_ram_role else None

    def _new_acs_client(self, region: str) -> AcsClient:
        common: dict[str, Any] = {"region_id": region, "auto_retry": False,
                                  "connect_timeout": CONNECT_TIMEOUT_S,
                                  "timeout": READ_TIMEOUT_S, "pool_size": 8,
                                  "user_agent": "gpu-arbiter"}
        for id_name, secret_name in ACCESS_KEY_ENV:
            key_id, secret = self._environ.get(id_name), self._environ.get(secret_name)
            if key_id and secret:
                token = self._environ.get(SECURITY_TOKEN_ENV)
                if token:
                    return AcsClient(credential=StsTokenCredential(key_id, secret, token),
                                     **common)
                return AcsClient(ak=key_id, secret=secret, **common)
        if self.ecs_ram_role:
            return AcsClient(credential=EcsRamRoleCredential(self.ecs_ram_role), **common)
        raise AuthError(f"aliyun in {region}: no credentials: set ALIBABA_CLOUD_ACCESS_KEY_ID and "
                        "ALIBABA_CLOUD_ACCESS_KEY_SECRET (and ALIBABA_CLOUD_SECURITY_TOKEN for "
                        "STS), or ecs_ram_role when the daemon runs on ECS",
                        provider=PROVIDER, code="NoCredentials")

    def _acs(self, region: str) -> AcsClient:
        with self._lock:
            client = self._clients.get(region)
            if client is None:
                client = self._clients[region] = self._new_acs_client(region)
            return client

    def call(self, region: str, action: str, params: Mapping[str, Any] | None = None
             ) -> dict[str, Any]:
        """One ECS action in ``region`` with ``params`` (query parameters; ``RegionId`` is
        added), retried on transient failures. Returns the parsed JSON answer. Raises mapped
        errors (see the module docstring)."""
        for attempt in Retrying(**self._retrying):
            with attempt:
                return self._call_once(region, action, params or {})
        raise AssertionError("unreachable")  # pragma: no cover (reraise=True)

    def _call_once(self, region: str, action: str, params: Mapping[str, Any]) -> dict[str, Any]:
        request = ecs_request(action)
        request.add_query_param("RegionId", region)
        for key, value in params.items():
            if value is not None:
                request.add_query_param(key, _param_text(value))
        if self._endpoint is not None:
            request.set_endpoint(self._endpoint[0])
            request.set_protocol_type(self._endpoint[1])
        else:
            request.set_protocol_type("https")
        client = self._acs(region)
        self.requests.add(action)
        try:
            body = client.do_action_with_exception(request)
        except (ServerException, ClientException) as exc:
            raise map_error(exc, action, region) from None
        try:
            answer = json.loads(body)
        except (TypeError, ValueError):
            raise ProviderError(f"aliyun {action} in {region}: the answer is not JSON",
                                provider=PROVIDER, code="BadResponse") from None
        if not isinstance(answer, dict):
            raise ProviderError(f"aliyun {action} in {region}: the answer is not an object",
                                provider=PROVIDER, code="BadResponse")
        return answer

    # ----- regions, instance types, availability ----------------------------------------------
    def describe_regions(self, region: str) -> list[dict[str, Any]]:
        """``DescribeRegions`` (asked in ``region``): ``[{"RegionId", "LocalName",
        "RegionEndpoint", "Status"}, …]``. Raises mapped errors."""
        answer = self.call(region, "DescribeRegions", {"AcceptLanguage": "en-US"})
        return list((answer.get("Regions") or {}).get("Region") or [])

    def iter_instance_types(self, region: str) -> Iterator[dict[str, Any]]:
        """Every ``InstanceType`` dict with at least one GPU (``DescribeInstanceTypes``,
        ``MinimumGPUAmount=1``, paged by ``MaxResults``/``NextToken``). Endpoints that ignore
        the filter return CPU types too (``GPUAmount`` 0); the caller skips them."""
        yield from self._pages(region, "DescribeInstanceTypes", {
            "MinimumGPUAmount": 1, "MaxResults": INSTANCE_TYPES_PAGE}, "InstanceTypes",
            "InstanceType")

    def _pages(self, region: str, action: str, params: dict[str, Any], outer: str,
               inner: str) -> Iterator[dict[str, Any]]:
        """Every ``answer[outer][inner]`` item of ``action``, paged by ``NextToken``."""
        token: str | None = None
        while True:
            answer = self.call(region, action, {**params, "NextToken": token})
            yield from (answer.get(outer) or {}).get(inner) or []
            token = answer.get("NextToken") or None
            if not token:
                return

    def available_zones(self, region: str, spot: bool, spot_duration_h: int = 1
                        ) -> list[dict[str, Any]]:
        """``AvailableZone`` dicts of ``DescribeAvailableResource`` for pay-as-you-go instance
        types (``DestinationResource=InstanceType``, I/O optimized, VPC), spot
        (``SpotAsPriceGo``) or on-demand (``NoSpot``). Raises mapped errors."""
        params: dict[str, Any] = {
            "DestinationResource": "InstanceType", "InstanceChargeType": "PostPaid",
            "SpotStrategy": "SpotAsPriceGo" if spot else "NoSpot", "IoOptimized": IO_OPTIMIZED,
            "NetworkCategory": NETWORK_TYPE, "ResourceType": "instance"}
        if spot:
            params["SpotDuration"] = spot_duration_h
        answer = self.call(region, "DescribeAvailableResource", params)
        return list((answer.get("AvailableZones") or {}).get("AvailableZone") or [])

    # ----- prices and advice ----------------------------------------------------------------
    def iter_spot_prices(self, region: str, instance_type: str, start: datetime,
                         end: datetime | None = None, *, spot_duration_h: int = 1
                         ) -> Iterator[tuple[dict[str, Any], str | None]]:
        """(``SpotPriceType`` record, the answer's ``Currency``) for every zone of ``region``
        (``DescribeSpotPriceHistory``, Linux, VPC, I/O optimized), from ``start`` (clamped to
        ECS's 30 days) to ``end`` (None = now), paged with ``Offset``/``NextOffset``. Raises
        mapped errors."""
        params: dict[str, Any] = {
            "InstanceType": instance_type, "NetworkType": NETWORK_TYPE,
            "IoOptimized": IO_OPTIMIZED, "OSType": OS_TYPE, "SpotDuration": spot_duration_h,
            "StartTime": ecs_time(start)}
        if end is not None:
            params["EndTime"] = ecs_time(end)
        offset = 0
        while True:
            answer = self.call(region, "DescribeSpotPriceHistory", {**params, "Offset": offset})
            records = (answer.get("SpotPrices") or {}).get("SpotPriceType") or []
            currency = answer.get("Currency")
            for record in records:
                yield record, currency
            next_offset = answer.get("NextOffset")
            if not records or next_offset in (None, "", 0) or int(next_offset) <= offset:
                return
            offset = int(next_offset)

    def describe_price(self, region: str, instance_type: str) -> dict[str, Any]:
        """``PriceInfo.Price`` of ``DescribePrice`` for one hour of a pay-as-you-go
        ``instance_type`` in ``region`` (Linux, VPC, I/O optimized): ``{"Currency",
        "OriginalPrice", "DiscountPrice", "TradePrice"}``. Raises mapped errors (no price:
        ``PriceNotFound`` → :class:`ProviderError`)."""
        answer = self.call(region, "DescribePrice", {
            "ResourceType": "instance", "InstanceType": instance_type,
            "PriceUnit": "Hour", "Period": 1, "Amount": 1, "IoOptimized": IO_OPTIMIZED,
            "InstanceNetworkType": NETWORK_TYPE, "Platform": OS_TYPE})
        return dict((answer.get("PriceInfo") or {}).get("Price") or {})

    def spot_advice(self, region: str, instance_types: Iterable[str]) -> list[dict[str, Any]]:
        """``AvailableSpotZone`` dicts of ``DescribeSpotAdvice`` for ``instance_types`` (10 per
        request): per zone, ``AvailableSpotResources.AvailableSpotResource[]`` with
        ``InstanceType``, ``InterruptionRate`` (percent), ``InterruptRateDesc``,
        ``AverageSpotDiscount``. Raises mapped errors."""
        zones: list[dict[str, Any]] = []
        for batch in chunks(sorted(set(instance_types)), ADVICE_TYPES_PER_REQUEST):
            params = {f"InstanceTypes.{i}": t for i, t in enumerate(batch, start=1)}
            answer = self.call(region, "DescribeSpotAdvice", params)
            zones += (answer.get("AvailableSpotZones") or {}).get("AvailableSpotZone") or []
        return zones

    # ----- instances ------------------------------------------------------------------------
    def run_instance(self, region: str, params: Mapping[str, Any]) -> str:
        """``RunInstances`` with ``params`` (from :func:`providers.aliyun.launch.run_instances_params`,
        ``ClientToken`` included); returns the instance id. Raises mapped errors, or
        :class:`ProviderError` when the answer names no instance."""
        answer = self.call(region, "RunInstances", params)
        ids = (answer.get("InstanceIdSets") or {}).get("InstanceIdSet") or []
        if not ids:
            raise ProviderError(f"aliyun RunInstances in {region}: no instance id in the answer",
                                provider=PROVIDER, code="BadResponse")
        return str(ids[0])

    def delete_instance(self, region: str, instance_id: str) -> None:
        """``DeleteInstance`` with ``Force=true`` (releases a running instance). Raises mapped
        errors; :class:`NotFoundError` when ``region`` has no such instance."""
        self.call(region, "DeleteInstance", {"InstanceId": instance_id, "Force": True})

    def iter_instances(self, region: str, tags: Mapping[str, str] | None = None,
                       instance_ids: Iterable[str] | None = None) -> Iterator[dict[str, Any]]:
        """``Instance`` dicts of ``DescribeInstances`` in ``region`` carrying every tag of
        ``tags`` (``Tag.N.Key``/``Tag.N.Value``, at most 20) and, when given, with one of
        ``instance_ids`` (100 per request), paged by ``MaxResults``/``NextToken``."""
        base: dict[str, Any] = {"MaxResults": INSTANCES_PAGE}
        for i, (key, value) in enumerate((tags or {}).items(), start=1):
            base[f"Tag.{i}.Key"], base[f"Tag.{i}.Value"] = key, value
        batches: Iterable[list[str] | None] = (
            chunks(instance_ids, INSTANCES_PAGE) if instance_ids is not None else [None])
        for batch in batches:
            params = dict(base, InstanceIds=json.dumps(batch) if batch is not None else None)
            yield from self._pages(region, "DescribeInstances", params, "Instances", "Instance")

    def close(self) -> None:
        """Close the HTTP sessions of the regions' clients."""
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            client.session.close()


def _param_text(value: Any) -> str:
    """A query parameter as ECS expects it: booleans ``true``/``false``, numbers as text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.10g}"
    return str(value)
