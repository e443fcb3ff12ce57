"""A local fake of the Alibaba Cloud ECS endpoint (RPC style, API 2014-05-26, JSON answers),
over real HTTP (http.server in a thread), so that the REAL SDK (aliyun-python-sdk-core's
``AcsClient`` with aliyun-python-sdk-ecs requests) signs, sends and parses exactly as against
ECS (Karpenter's ``pkg/fake``, httpx's local test servers).

Every request is authenticated first, as ECS does: the common parameters must be present
(``Version=2014-05-26``, ``SignatureMethod=HMAC-SHA1``, ``SignatureVersion=1.0``), the
``AccessKeyId`` known (else 404 ``InvalidAccessKeyId.NotFound``), the ``Timestamp`` within 15
minutes (else ``InvalidTimeStamp.Expired``), the ``SignatureNonce`` unused (else
``SignatureNonceUsed``) and the ``Signature`` the one :mod:`.signature` computes from the docs
(else 400 ``SignatureDoesNotMatch``, echoing the string to sign as ECS does).

Served actions, in the documented answer shapes (``shared/data/api_examples/aliyun_ecs``):

- ``DescribeRegions``; ``DescribeInstanceTypes`` (``MinimumGPUAmount``, paged by
  ``MaxResults``/``NextToken``); ``DescribeAvailableResource`` (``DestinationResource=
  InstanceType``, by ``SpotStrategy``);
- ``DescribeSpotPriceHistory``: one ``InstanceType`` (required, with ``NetworkType``), records
  of every zone between ``StartTime`` (default: 3 h before ``EndTime``; at most 30 days
  before) and ``EndTime`` (default: the fake's ``now``), oldest first, paged by
  ``Offset``/``NextOffset``, ``Currency``;
- ``DescribePrice`` (``PriceNotFound`` for unknown types); ``DescribeSpotAdvice``
  (``InstanceTypes.N``, N ≤ 10);
- ``RunInstances`` (``ClientToken`` idempotent; stock checked per zone and market →
  ``OperationDenied.NoStock``; ``UserData`` must be Base64); ``DeleteInstance`` (``Force``
  needed for a running instance; ``InvalidInstanceId.NotFound``); ``DescribeInstances``
  (``Tag.N.Key/Value``, ``InstanceIds``, paged by ``MaxResults``/``NextToken``). A new instance
  is ``Pending`` and ``Running`` from the next describe; :meth:`FakeEcs.reclaim` puts the
  ``Recycling`` lock on it, :meth:`FakeEcs.release` drops it.

:meth:`FakeEcs.fail` makes the next calls of an action fail with an ECS error (throttling
included). Requests are recorded (action, region, parameters without the signature).
"""

from __future__ import annotations

import base64
import binascii
import json
import secrets
import threading
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from tests.contract.providers.aliyun import signature

API_VERSION = "2014-05-26"
TIMESTAMP_SKEW = timedelta(minutes=15)
SPOT_HISTORY_MAX = timedelta(days=30)


class EcsError(Exception):
    def __init__(self, status: int, code: str, message: str = "") -> None:
        super().__init__(code)
        self.status, self.code, self.message = status, code, message or code


@dataclass
class Injected:
    status: int
    code: str
    message: str
    times: int
    region: str | None = None


@dataclass
class FakeInstance:
    instance_id: str
    region: str
    zone: str
    instance_type: str
    spot_strategy: str
    client_token: str
    tags: dict[str, str]
    params: dict[str, str]
    created_at: datetime
    status: str = "Pending"
    locks: list[str] = field(default_factory=list)
    hidden_for: int = 0  # DescribeInstances answers that do not list it yet

    def view(self) -> dict[str, Any]:
        return {
            "InstanceId": self.instance_id, "InstanceName": self.params.get("InstanceName", ""),
            "RegionId": self.region, "ZoneId": self.zone, "InstanceType": self.instance_type,
            "Status": self.status, "SpotStrategy": self.spot_strategy,
            "InstanceChargeType": "PostPaid", "ImageId": self.params.get("ImageId", ""),
            "CreationTime": self.created_at.strftime("%Y-%m-%dT%H:%MZ"),
            "Tags": {"Tag": [{"TagKey": k, "TagValue": v} for k, v in self.tags.items()]},
            "OperationLocks": {"LockReason": [{"LockReason": r} for r in self.locks]},
            "VpcAttributes": {"VSwitchId": self.params.get("VSwitchId", "")},
        }


@dataclass
class Catalog:
    """What the fake sells. ``stock[region][market][zone][type]`` = (Status, StatusCategory)
    with market ``spot`` | ``on-demand``; ``spot_history[region]`` = ``SpotPriceType`` dicts;
    ``prices[(region, type)]`` = ``PriceInfo.Price`` dict without ``Currency``;
    ``advice[region]`` = ``AvailableSpotZone`` dicts; ``currency`` of every price."""

    regions: list[str]
    instance_types: list[dict[str, Any]]
    stock: dict[str, dict[str, dict[str, dict[str, tuple[str, str]]]]]
    spot_history: dict[str, list[dict[str, Any]]]
    prices: dict[tuple[str, str], dict[str, Any]]
    advice: dict[str, list[dict[str, Any]]]
    currency: str = "CNY"


def _parse_time(text: str, field_name: str) -> datetime:
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise EcsError(400, f"InvalidParams.{field_name}", f"{field_name} {text!r}") from None


class _Handler(BaseHTTPRequestHandler):
    fake: FakeEcs

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def _handle(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode() if length else ""
        params = dict(parse_qsl(urlsplit(self.path).query, keep_blank_values=True))
        if body and "x-www-form-urlencoded" in (self.headers.get("Content-Type") or ""):
            params.update(parse_qsl(body, keep_blank_values=True))
        request_id = str(uuid.uuid4()).upper()
        try:
            answer = self.fake.dispatch(method, params)
            status = 200
        except EcsError as exc:
            answer = {"Code": exc.code, "Message": exc.message, "HostId": "ecs.aliyuncs.com",
                      "Recommend": "https://api.aliyun.com/troubleshoot"}
            status = exc.status
        data = json.dumps({"RequestId": request_id, **answer}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json;charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class FakeEcs:
    """The fake endpoint on ``url`` (``http://127.0.0.1:PORT``).

    - **catalog**: what it sells (:class:`Catalog`).
    - **credentials**: AccessKeyId → secret it accepts.
    - **page_size**: caps every page below what the client asked.
    - **now**: the fake's clock for price history windows (default: wall clock).
    - **hide_new_instances**: how many DescribeInstances answers leave out a new instance
      (ECS lists a new instance a moment after RunInstances answered).
    """

    def __init__(self, catalog: Catalog, credentials: dict[str, str], *, page_size: int = 100,
                 now: Callable[[], datetime] | None = None, hide_new_instances: int = 0) -> None:
        self.catalog = catalog
        self.credentials = dict(credentials)
        self.page_size = page_size
        self.now = now or (lambda: datetime.now(UTC))
        self.hide_new_instances = hide_new_instances
        self.lock = threading.Lock()
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.counts: Counter[str] = Counter()
        self.rejected: list[str] = []  # codes of requests refused by authentication
        self.instances: dict[str, FakeInstance] = {}
        self.tokens: dict[str, str] = {}
        self._nonces: set[str] = set()
        self._injected: dict[str, list[Injected]] = {}
        handler = type("Handler", (_Handler,), {"fake": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True).start()

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    # ----- test controls ------------------------------------------------------------------
    def fail(self, action: str, code: str, *, status: int = 400, message: str = "",
             times: int = 1, region: str | None = None) -> None:
        """The next ``times`` authenticated calls of ``action`` (in ``region``, when given)
        fail with ``code``."""
        with self.lock:
            self._injected.setdefault(action, []).append(
                Injected(status, code, message, times, region))

    def reclaim(self, instance_id: str) -> None:
        """ECS starts reclaiming the spot instance: the ``Recycling`` operation lock."""
        with self.lock:
            self.instances[instance_id].locks.append("Recycling")

    def release(self, instance_id: str) -> None:
        """ECS releases the instance: it disappears from DescribeInstances."""
        with self.lock:
            self.instances.pop(instance_id, None)

    def calls(self, action: str) -> list[dict[str, str]]:
        with self.lock:
            return [p for a, _, p in self.requests if a == action]

    # ----- request handling ---------------------------------------------------------------
    def dispatch(self, method: str, params: dict[str, str]) -> dict[str, Any]:
        self._authenticate(method, params)
        action = params.get("Action", "")
        region = params.get("RegionId", "")
        with self.lock:
            self.requests.append((action, region, {k: v for k, v in params.items()
                                                   if k != "Signature"}))
            self.counts[action] += 1
            queue = self._injected.get(action) or []
            injected = next((i for i in queue if i.region in (None, region)), None)
            if injected is not None:
                injected.times -= 1
                if injected.times <= 0:
                    queue.remove(injected)
                raise EcsError(injected.status, injected.code, injected.message)
        handler = getattr(self, f"_{action}", None)
        if handler is None:
            raise EcsError(404, "InvalidAction.NotFound", f"action {action!r}")
        if region not in self.catalog.regions and action != "DescribeRegions":
            raise EcsError(404, "InvalidRegionId.NotFound", f"region {region!r}")
        return handler(region, params)

    def _authenticate(self, method: str, params: dict[str, str]) -> None:
        def refuse(status: int, code: str, message: str = "") -> EcsError:
            with self.lock:
                self.rejected.append(code)
            return EcsError(status, code, message)

        required = ("Action", "Version", "Format", "AccessKeyId", "SignatureMethod",
                    "SignatureVersion", "SignatureNonce", "Timestamp", "Signature")
        missing = [name for name in required if not params.get(name)]
        if missing:
            raise refuse(400, "IncompleteSignature", f"missing {missing}")
        if params["Version"] != API_VERSION:
            raise refuse(400, "InvalidVersion", f"Version {params['Version']!r}")
        if params["SignatureMethod"] != "HMAC-SHA1" or params["SignatureVersion"] != "1.0":
            raise refuse(400, "IncompleteSignature", "unsupported signature method")
        secret = self.credentials.get(params["AccessKeyId"])
        if secret is None:
            raise refuse(404, "InvalidAccessKeyId.NotFound", "Specified access key is not found.")
        stamp = _parse_time(params["Timestamp"], "Timestamp")
        if abs(datetime.now(UTC) - stamp) > TIMESTAMP_SKEW:
            raise refuse(400, "InvalidTimeStamp.Expired", "Specified time stamp or date value "
                         "is expired.")
        if not signature.verify(secret, method, params):
            raise refuse(400, "SignatureDoesNotMatch", "Specified signature is not matched with "
                         "our calculation. server string to sign is:"
                         + signature.string_to_sign(method, params))
        with self.lock:
            reused = params["SignatureNonce"] in self._nonces
            self._nonces.add(params["SignatureNonce"])
        if reused:
            raise refuse(400, "SignatureNonceUsed", "Specified signature nonce was used already.")

    def _page(self, items: list[Any], params: dict[str, str]) -> tuple[list[Any], str | None]:
        size = min(int(params.get("MaxResults") or 10), self.page_size)
        start = int(params.get("NextToken") or 0)
        end = start + size
        return items[start:end], (str(end) if end < len(items) else None)

    # ----- offers ---------------------------------------------------------------------------
    def _DescribeRegions(self, region: str, params: dict[str, str]) -> dict[str, Any]:
        return {"Regions": {"Region": [
            {"RegionId": r, "LocalName": r, "RegionEndpoint": "ecs.aliyuncs.com",
             "Status": "available"} for r in self.catalog.regions]}}

    def _DescribeInstanceTypes(self, region: str, params: dict[str, str]) -> dict[str, Any]:
        minimum = int(params.get("MinimumGPUAmount") or 0)
        types = [t for t in self.catalog.instance_types if int(t.get("GPUAmount") or 0) >= minimum]
        page, token = self._page(types, params)
        answer: dict[str, Any] = {"InstanceTypes": {"InstanceType": page}}
        if token:
            answer["NextToken"] = token
        return answer

    def _DescribeAvailableResource(self, region: str, params: dict[str, str]) -> dict[str, Any]:
        if params.get("DestinationResource") != "InstanceType":
            raise EcsError(404, "Invalid.DestinationResource",
                           "The specified DestinationResource is not valid.")
        strategy = params.get("SpotStrategy", "NoSpot")
        if strategy not in ("NoSpot", "SpotAsPriceGo", "SpotWithPriceLimit"):
            raise EcsError(404, "Invalid.SpotStrategy", "The specified SpotStrategy is not valid.")
        market = "on-demand" if strategy == "NoSpot" else "spot"
        zones = []
        for zone, types in sorted(self.catalog.stock.get(region, {}).get(market, {}).items()):
            supported = [{"Status": s, "Value": t, "StatusCategory": c}
                         for t, (s, c) in sorted(types.items())]
            zones.append({
                "Status": "Available", "RegionId": region, "ZoneId": zone,
                "StatusCategory": "WithStock",
                "AvailableResources": {"AvailableResource": [
                    {"Type": "InstanceType", "SupportedResources": {"SupportedResource":
                                                                    supported}}]}})
        return {"AvailableZones": {"AvailableZone": zones}}

    def _DescribeSpotPriceHistory(self, region: str, params: dict[str, str]) -> dict[str, Any]:
        for name in ("InstanceType", "NetworkType"):
            if not params.get(name):
                raise EcsError(400, "MissingParameter", f"{name} is mandatory")
        end = _parse_time(params["EndTime"], "EndTime") if params.get("EndTime") else self.now()
        start = (_parse_time(params["StartTime"], "StartTime") if params.get("StartTime")
                 else end - timedelta(hours=3))
        if start < end - SPOT_HISTORY_MAX:
            raise EcsError(400, "InvalidParams.StartTime", "StartTime is more than 30 days "
                           "before EndTime")
        records = sorted(
            (r for r in self.catalog.spot_history.get(region, [])
             if r["InstanceType"] == params["InstanceType"]
             and (not params.get("ZoneId") or r["ZoneId"] == params["ZoneId"])
             and start <= _parse_time(r["Timestamp"], "Timestamp") <= end),
            key=lambda r: (r["Timestamp"], r["ZoneId"]))
        offset = int(params.get("Offset") or 0)
        page = records[offset:offset + self.page_size]
        answer: dict[str, Any] = {"SpotPrices": {"SpotPriceType": page},
                                  "Currency": self.catalog.currency}
        if offset + self.page_size < len(records):
            answer["NextOffset"] = offset + self.page_size
        return answer

    def _DescribePrice(self, region: str, params: dict[str, str]) -> dict[str, Any]:
        price = self.catalog.prices.get((region, params.get("InstanceType", "")))
        if params.get("ResourceType", "instance") != "instance" or price is None:
            raise EcsError(400, "PriceNotFound", "The price of your queried resource is not "
                           "available now, please try other resources.")
        return {"PriceInfo": {"Price": {"Currency": self.catalog.currency, **price},
                              "Rules": {"Rule": []}}}

    def _DescribeSpotAdvice(self, region: str, params: dict[str, str]) -> dict[str, Any]:
        wanted = [v for k, v in params.items() if k.startswith("InstanceTypes.")]
        if len(wanted) > 10:
            raise EcsError(400, "InvalidParameter", "InstanceTypes.N: N is 1 to 10")
        zones = []
        for entry in self.catalog.advice.get(region, []):
            resources = [r for r in (entry.get("AvailableSpotResources") or {}).get(
                "AvailableSpotResource", []) if not wanted or r["InstanceType"] in wanted]
            zones.append({**entry, "AvailableSpotResources": {"AvailableSpotResource":
                                                              resources}})
        return {"AvailableSpotZones": {"AvailableSpotZone": zones}, "RegionId": region}

    # ----- instances ------------------------------------------------------------------------
    def _RunInstances(self, region: str, params: dict[str, str]) -> dict[str, Any]:
        for name in ("InstanceType", "ImageId", "VSwitchId", "SecurityGroupId"):
            if not params.get(name):
                raise EcsError(400, "MissingParameter", f"{name} is mandatory")
        token = params.get("ClientToken", "")
        with self.lock:
            if token and token in self.tokens:
                return {"InstanceIdSets": {"InstanceIdSet": [self.tokens[token]]}}
        strategy = params.get("SpotStrategy", "NoSpot")
        if strategy == "SpotWithPriceLimit" and not params.get("SpotPriceLimit"):
            raise EcsError(400, "InvalidSpotPriceLimit.Missing", "SpotPriceLimit is mandatory")
        try:
            base64.b64decode(params.get("UserData", ""), validate=True)
        except (binascii.Error, ValueError):
            raise EcsError(400, "InvalidUserData.Base64FormatInvalid",
                           "The specified UserData is not valid Base64.") from None
        zone, itype = params.get("ZoneId", ""), params["InstanceType"]
        market = "on-demand" if strategy == "NoSpot" else "spot"
        status = self.catalog.stock.get(region, {}).get(market, {}).get(zone, {}).get(itype)
        if status is None or status[0] != "Available" or status[1] not in (
                "WithStock", "ClosedWithStock"):
            raise EcsError(403, "OperationDenied.NoStock", "Sales of this resource are "
                           "temporarily suspended in the specified region; please try again "
                           "later.")
        tags = {}
        for i in range(1, 21):
            if f"Tag.{i}.Key" in params:
                tags[params[f"Tag.{i}.Key"]] = params.get(f"Tag.{i}.Value", "")
        instance = FakeInstance(
            instance_id=f"i-{secrets.token_hex(10)}", region=region, zone=zone,
            instance_type=itype, spot_strategy=strategy, client_token=token, tags=tags,
            params=params, created_at=datetime.now(UTC),
            hidden_for=self.hide_new_instances)
        with self.lock:
            self.instances[instance.instance_id] = instance
            if token:
                self.tokens[token] = instance.instance_id
        return {"InstanceIdSets": {"InstanceIdSet": [instance.instance_id]},
                "TradePrice": 0.0, "OrderId": secrets.token_hex(6)}

    def _DeleteInstance(self, region: str, params: dict[str, str]) -> dict[str, Any]:
        with self.lock:
            instance = self.instances.get(params.get("InstanceId", ""))
            if instance is None or instance.region != region:
                raise EcsError(404, "InvalidInstanceId.NotFound",
                               "The specified InstanceId does not exist.")
            if instance.status == "Running" and params.get("Force") != "true":
                raise EcsError(403, "IncorrectInstanceStatus",
                               "The current status of the resource does not support this "
                               "operation.")
            del self.instances[instance.instance_id]
        return {}

    def _DescribeInstances(self, region: str, params: dict[str, str]) -> dict[str, Any]:
        wanted_tags = {params[f"Tag.{i}.Key"]: params.get(f"Tag.{i}.Value", "")
                       for i in range(1, 21) if f"Tag.{i}.Key" in params}
        ids = set(json.loads(params["InstanceIds"])) if params.get("InstanceIds") else None
        with self.lock:
            hidden = [i for i in self.instances.values() if i.hidden_for > 0]
            for instance in hidden:
                instance.hidden_for -= 1
            found = [i for i in self.instances.values() if i.region == region
                     and all(i.tags.get(k) == v for k, v in wanted_tags.items())
                     and (ids is None or i.instance_id in ids) and i not in hidden]
            found.sort(key=lambda i: i.instance_id)
            page, token = self._page(found, params)
            views = [i.view() for i in page]
            for instance in page:  # Pending until the first describe, then Running
                if instance.status == "Pending":
                    instance.status = "Running"
        answer: dict[str, Any] = {"Instances": {"Instance": views}, "TotalCount": len(found)}
        if token:
            answer["NextToken"] = token
        return answer
