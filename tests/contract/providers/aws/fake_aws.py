"""A local fake of the AWS endpoints the adapter reads: EC2 (query protocol, XML answers) and the
Price List API (JSON 1.1), over real HTTP so that botocore signs, paginates, retries and parses
exactly as against AWS (Karpenter's ``pkg/fake``, httpx's local test servers).

Served operations and the AWS behaviour they imitate:

- ``DescribeInstanceTypes``: ``InstanceType.N`` and ``Filter`` ``instance-type`` (``*``
  wildcards), paginated by ``MaxResults``/``NextToken``.
- ``DescribeInstanceTypeOfferings``: ``LocationType=availability-zone``, ``instance-type``
  filter, paginated.
- ``DescribeSpotPriceHistory``: ``InstanceType.N``, ``ProductDescription.N``, ``StartTime``,
  ``EndTime`` (default: the fake's ``now``); records inside the window **plus, per zone, type
  and product, the last change before StartTime** (the price in effect then), as AWS
  documents; newest first; paginated.
- ``DescribeInstances``/``DescribeSpotInstanceRequests``: empty (for permission probes).
- Price List ``GetProducts``: ``TERM_MATCH`` filters on product attributes, paginated.

The region of a request is read from its SigV4 credential scope. ``page_size`` caps every page
below what the client asked (AWS may return fewer than MaxResults); ``latency_s`` delays every
answer; :meth:`FakeAws.fail` makes the next calls of an action fail with an AWS error code.
Requests are counted per (region, action).
"""

from __future__ import annotations

import fnmatch
import json
import re
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterable
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs
from xml.sax.saxutils import escape

import botocore.session

_EC2_MODEL = botocore.session.get_session().get_service_model("ec2")
_REGION_RE = re.compile(r"Credential=[^/]+/\d{8}/([a-z0-9-]+)/")
_DEFAULT_PAGE = 1000


def _iso(value: datetime | str) -> datetime:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _xml(shape: Any, value: Any) -> str:
    """Serialize ``value`` (a boto3-shaped dict/list/scalar) the way EC2 does, following the
    botocore model: member names from ``locationName``, list members as ``<item>``."""
    if shape.type_name == "structure":
        parts = []
        for name, member in shape.members.items():
            if name in value and value[name] is not None:
                tag = member.serialization.get("name") or name[0].lower() + name[1:]
                parts.append(f"<{tag}>{_xml(member, value[name])}</{tag}>")
        return "".join(parts)
    if shape.type_name == "list":
        return "".join(f"<item>{_xml(shape.member, v)}</item>" for v in value)
    if shape.type_name == "boolean":
        return "true" if value else "false"
    if shape.type_name == "timestamp":
        return _iso(value).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    return escape(str(value))


def _page(items: list[Any], params: dict[str, str], cap: int | None) -> tuple[list[Any], str | None]:
    start = int(params.get("NextToken") or 0)
    size = int(params.get("MaxResults") or _DEFAULT_PAGE)
    if cap:
        size = min(size, cap)
    end = start + size
    return items[start:end], (str(end) if end < len(items) else None)


def _indexed(params: dict[str, str], prefix: str) -> list[str]:
    """``InstanceType.1=a&InstanceType.2=b`` → ``[a, b]``."""
    keys = sorted((k for k in params if re.fullmatch(rf"{re.escape(prefix)}\.\d+", k)),
                  key=lambda k: int(k.rsplit(".", 1)[1]))
    return [params[k] for k in keys]


def _filters(params: dict[str, str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for key, name in params.items():
        match = re.fullmatch(r"Filter\.(\d+)\.Name", key)
        if match:
            out[name] = _indexed(params, f"Filter.{match.group(1)}.Value")
    return out


class FakeAws:
    """The fake endpoint; starts serving on ``127.0.0.1`` at construction (``url``).

    - **instance_types**: ``InstanceTypeInfo`` dicts (every region sees the same list), or
      region → its list.
    - **offerings**: region → ``InstanceTypeOffering`` dicts.
    - **spot_records**: region → ``SpotPrice`` dicts (``Timestamp`` datetime or ISO string).
    - **price_list**: Price List product documents (JSON strings) of every region.
    - **now**: the fake's clock for ``EndTime`` defaults (aware UTC; default: real now).
    """

    def __init__(self, *, instance_types: Iterable[dict[str, Any]] | dict[str, list[dict[str, Any]]] = (),
                 offerings: dict[str, list[dict[str, Any]]] | None = None,
                 spot_records: dict[str, list[dict[str, Any]]] | None = None,
                 price_list: Iterable[str] = (), page_size: int | None = None,
                 latency_s: float = 0.0, now: datetime | None = None) -> None:
        self.instance_types: dict[str, list[dict[str, Any]]] | list[dict[str, Any]] = (
            instance_types if isinstance(instance_types, dict) else list(instance_types))
        self.offerings = offerings or {}
        self.spot_records = {  # (time, record), newest first
            r: sorted(((_iso(x["Timestamp"]), x) for x in recs), key=lambda p: p[0], reverse=True)
            for r, recs in (spot_records or {}).items()}
        self._spot_answers: dict[tuple, list[dict[str, Any]]] = {}  # one query, all pages
        self.price_list = [(json.loads(doc)["product"]["attributes"], doc) for doc in price_list]
        self.page_size = page_size
        self.latency_s = latency_s
        self.now = now
        self.lock = threading.Lock()
        self.requests: Counter[tuple[str, str]] = Counter()
        self.last_params: dict[tuple[str, str], dict[str, Any]] = {}
        self._failures: dict[tuple[str, str | None], list[tuple[str, int]]] = {}
        owner = self

        class Handler(_Handler):
            fake = owner

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def fail(self, action: str, code: str, status: int = 400, times: int = 1,
             region: str | None = None) -> None:
        """The next ``times`` calls of ``action`` (in ``region``, or any region) answer HTTP
        ``status`` with error ``code``."""
        with self.lock:
            self._failures.setdefault((action, region), []).extend([(code, status)] * times)

    def _next_failure(self, region: str, action: str) -> tuple[str, int] | None:
        for key in ((action, region), (action, None)):
            queue = self._failures.get(key)
            if queue:
                return queue.pop(0)
        return None

    def count(self, action: str, region: str | None = None) -> int:
        with self.lock:
            return sum(n for (r, a), n in self.requests.items()
                       if a == action and (region is None or r == region))

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    # ----- operations ------------------------------------------------------------------------
    def describe_instance_types(self, region: str, params: dict[str, str]) -> dict[str, Any]:
        names = set(_indexed(params, "InstanceType"))
        patterns = _filters(params).get("instance-type")
        known = (self.instance_types.get(region, []) if isinstance(self.instance_types, dict)
                 else self.instance_types)
        items = [t for t in known
                 if (not names or t["InstanceType"] in names)
                 and (not patterns or any(fnmatch.fnmatchcase(t["InstanceType"], p)
                                          for p in patterns))]
        page, token = _page(items, params, self.page_size)
        return {"InstanceTypes": page, "NextToken": token}

    def describe_instance_type_offerings(self, region: str, params: dict[str, str]) -> dict[str, Any]:
        patterns = _filters(params).get("instance-type")
        items = [o for o in self.offerings.get(region, [])
                 if not patterns or any(fnmatch.fnmatchcase(o["InstanceType"], p) for p in patterns)]
        items = [{**o, "LocationType": "availability-zone"} for o in items]
        page, token = _page(items, params, self.page_size)
        return {"InstanceTypeOfferings": page, "NextToken": token}

    def describe_spot_price_history(self, region: str, params: dict[str, str]) -> dict[str, Any]:
        types = set(_indexed(params, "InstanceType"))
        products = set(_indexed(params, "ProductDescription"))
        start = _iso(params["StartTime"]) if params.get("StartTime") else None
        end = _iso(params["EndTime"]) if params.get("EndTime") else (
            self.now or datetime.now(UTC))
        query = (region, tuple(sorted(types)), tuple(sorted(products)), start, end)
        with self.lock:
            chosen = self._spot_answers.get(query)
        if chosen is None:
            chosen = self._spot_window(region, types, products, start, end)
            with self.lock:
                self._spot_answers[query] = chosen
        page, token = _page(chosen, params, self.page_size)
        return {"SpotPriceHistory": page, "NextToken": token}

    def _spot_window(self, region: str, types: set[str], products: set[str],
                     start: datetime | None, end: datetime) -> list[dict[str, Any]]:
        chosen, in_effect = [], set()
        for at, rec in self.spot_records.get(region, []):  # newest first
            if (types and rec["InstanceType"] not in types) or (
                    products and rec["ProductDescription"] not in products):
                continue
            if at > end:
                continue
            if start is None or at >= start:
                chosen.append(rec)
                continue
            series = (rec["AvailabilityZone"], rec["InstanceType"], rec["ProductDescription"])
            if series not in in_effect:  # the newest change before StartTime: in effect then
                in_effect.add(series)
                chosen.append(rec)
        return chosen

    def describe_instances(self, region: str, params: dict[str, str]) -> dict[str, Any]:
        return {"Reservations": []}

    def describe_spot_instance_requests(self, region: str, params: dict[str, str]) -> dict[str, Any]:
        return {"SpotInstanceRequests": []}

    def get_products(self, body: dict[str, Any]) -> dict[str, Any]:
        wanted = {f["Field"]: f["Value"] for f in body.get("Filters", [])}
        items = [doc for attrs, doc in self.price_list
                 if all(attrs.get(k) == v for k, v in wanted.items())]
        params = {"NextToken": body.get("NextToken") or "",
                  "MaxResults": str(body.get("MaxResults") or 100)}
        page, token = _page(items, params, self.page_size)
        answer: dict[str, Any] = {"FormatVersion": "aws_v1", "PriceList": page}
        if token:
            answer["NextToken"] = token
        return answer


class _Handler(BaseHTTPRequestHandler):
    fake: FakeAws
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in two writes; without this, Nagle + delayed ACK add 40 ms.
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, status: int, body: str, content_type: str) -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        fake = self.fake
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
        match = _REGION_RE.search(self.headers.get("Authorization", ""))
        region = match.group(1) if match else "unknown"
        target = self.headers.get("X-Amz-Target", "")
        if fake.latency_s:
            time.sleep(fake.latency_s)
        if target.startswith("AWSPriceListService."):
            return self._pricing(region, target.split(".", 1)[1], json.loads(raw or "{}"))
        params = {k: v[0] for k, v in parse_qs(raw, keep_blank_values=True).items()}
        action = params.get("Action", "")
        with fake.lock:
            fake.requests[(region, action)] += 1
            fake.last_params[(region, action)] = params
            failure = fake._next_failure(region, action)
        if failure:
            code, status = failure
            return self._send(status, f'<?xml version="1.0" encoding="UTF-8"?><Response><Errors>'
                                      f"<Error><Code>{code}</Code><Message>fake {code}</Message>"
                                      f"</Error></Errors><RequestID>fake</RequestID></Response>",
                              "text/xml")
        handler = getattr(fake, re.sub(r"(?<!^)([A-Z])", r"_\1", action).lower(), None)
        if handler is None or action not in _EC2_MODEL.operation_names:
            return self._send(400, "<Response><Errors><Error><Code>InvalidAction</Code>"
                                   f"<Message>{escape(action)}</Message></Error></Errors>"
                                   "</Response>", "text/xml")
        result = handler(region, params)
        shape = _EC2_MODEL.operation_model(action).output_shape
        body = (f'<?xml version="1.0" encoding="UTF-8"?><{action}Response '
                f'xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"><requestId>fake</requestId>'
                f"{_xml(shape, result)}</{action}Response>")
        self._send(200, body, "text/xml;charset=UTF-8")

    def _pricing(self, region: str, action: str, body: dict[str, Any]) -> None:
        fake = self.fake
        with fake.lock:
            fake.requests[(region, action)] += 1
            fake.last_params[(region, action)] = body
            failure = fake._next_failure(region, action)
        if failure:
            code, status = failure
            return self._send(status, json.dumps({"__type": code, "message": f"fake {code}"}),
                              "application/x-amz-json-1.1")
        if action != "GetProducts":
            return self._send(400, json.dumps({"__type": "InvalidAction", "message": action}),
                              "application/x-amz-json-1.1")
        self._send(200, json.dumps(fake.get_products(body)), "application/x-amz-json-1.1")
