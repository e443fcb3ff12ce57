"""A local fake of Vast.ai's REST API over real HTTP (http.server in a thread), so that the REAL
``vastai`` SDK builds, sends and parses every request exactly as against console.vast.ai.
Written from ``shared/data/api_examples/vastai/`` (README.md and every file) and the docs they
cite (docs.vast.ai "search offers", "create instance", "prepay instance").

Every request is authenticated first, as Vast does: ``Authorization: Bearer <key>`` must name
the fake's key, else 401 ``{"success": false, "error": …, "msg": …}``. Served:

- ``POST /api/v0/bundles/``: the query dict of the SDK (``{field: {op: value}}`` with ``eq``,
  ``neq``, ``gt``, ``gte``, ``lt``, ``lte``, ``in``, ``notin``; ``geolocation in`` matches
  country codes), ``type`` one of on-demand/bid/reserved (else 400), ``order``, ``limit``
  (an int ≥ 1, else 400; at most ``max_limit`` rows come back; without one, ``default_limit``:
  the fake's choice, Vast documents none), ``allocated_storage`` a number. ``bid`` searches
  list only asks with a ``min_bid``. Answer ``{"offers": [...]}``.
- ``PUT /api/v0/asks/{id}/`` (create): ``client_id`` "me", ``image`` 1–1,024 characters,
  ``disk`` ≥ 8, ``price`` null (on-demand) or 0.001–128 (interruptible bid), ``env`` a
  mapping, ``label`` text or null (else 400 ``invalid_args``); an unknown ask → 404
  ``no_such_ask``, a rented one → 410; no credit → 400 ``insufficient_credit``. Answers
  ``{"success": true, "new_contract": id}``. A bid below the ask's ``min_bid`` makes an
  instance that never runs (stopped: dstack's "failed to start due to insufficient bid").
- ``GET /api/v1/instances/``: ``select_filters`` (``eq``/``in``), ``order_by``, ``limit``
  (at most 25 a page), ``after_token`` → ``{"instances", "next_token", "total_instances"}``.
  A new instance is listed with ``actual_status`` null, then ``loading``, then ``running``.
- ``DELETE /api/v0/instances/{id}/``: ``{"success": true}``; unknown → 400
  ``{"success": false, "msg": "no such instance"}`` (the shape the prepay docs give).
- ``GET /api/v0/users/current``: the user with ``credit`` (and the ``api_key`` the SDK drops).

:meth:`FakeVast.outbid` stops an interruptible instance as an outbid does; :meth:`fail`
injects errors. Requests are recorded (method, path, query, body).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

INSTANCES_PAGE_MAX = 25


class VastHttpError(Exception):
    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(status)
        self.status, self.body = status, body


def _bad(status: int, error: str, msg: str, **extra: Any) -> VastHttpError:
    return VastHttpError(status, {"success": False, "error": error, "msg": msg, **extra})


@dataclass
class Injected:
    path_prefix: str
    status: int
    body: dict[str, Any]
    times: int


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, str]
    body: Any
    authorization: str | None = None


@dataclass
class FakeInstance:
    row: dict[str, Any]
    listings: int = 0
    never_runs: bool = False


def _country(geolocation: Any) -> str:
    return str(geolocation or "").split(",")[-1].strip()


def _matches(row: dict[str, Any], field_name: str, condition: Any) -> bool:
    if not isinstance(condition, dict):
        raise _bad(400, "invalid_args", f"{field_name}: a filter is {{op: value}}")
    value = row.get(field_name)
    if field_name == "geolocation":
        value = _country(value)
    elif field_name == "verified":  # rows say it as verification: "verified"
        value = row.get("verification") == "verified"
    elif value is None and isinstance(condition.get("eq"), bool):
        value = False  # the observed row has external: null and matches external = false
    for op, wanted in condition.items():
        if op in ("gt", "gte", "lt", "lte") and (value is None or wanted is None):
            return False
        test = _OPERATORS.get(op)
        if test is None:
            raise _bad(400, "invalid_args", f"{field_name}: unknown operator {op!r}")
        if not test(value, wanted):
            return False
    return True


_OPERATORS: dict[str, Callable[[Any, Any], bool]] = {
    "eq": lambda v, w: v == w, "neq": lambda v, w: v != w, "gt": lambda v, w: v > w,
    "gte": lambda v, w: v >= w, "lt": lambda v, w: v < w, "lte": lambda v, w: v <= w,
    "in": lambda v, w: v in w, "notin": lambda v, w: v not in w,
}


_QUERY_KEYS = {"order", "type", "limit", "allocated_storage", "disable_bundling"}


class FakeVast:
    """The fake (see the module docstring), serving on ``url`` until :meth:`stop`.

    - **asks**: search rows (the shape of ``search_offers_cli_raw_observed.json``), by ``id``.
    - **api_key**: the one key it accepts. **credit**: the account's credit, USD.
    """

    def __init__(self, asks: list[dict[str, Any]], *, api_key: str, credit: float = 25.0,
                 default_limit: int = 64, max_limit: int = 50_000) -> None:
        self.asks = {int(a["id"]): dict(a) for a in asks}
        self.api_key, self.credit = api_key, credit
        self.default_limit, self.max_limit = default_limit, max_limit
        self.instances: dict[int, FakeInstance] = {}
        self.requests: list[Recorded] = []
        self._injected: list[Injected] = []
        self._next_id = 30_000_000
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                fake._serve(self, "GET")

            def do_POST(self) -> None:
                fake._serve(self, "POST")

            def do_PUT(self) -> None:
                fake._serve(self, "PUT")

            def do_DELETE(self) -> None:
                fake._serve(self, "DELETE")

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True).start()

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    # ----- test controls ------------------------------------------------------------------------
    def fail(self, path_prefix: str, status: int, body: dict[str, Any], *, times: int = 1) -> None:
        """The next ``times`` requests whose path starts with ``path_prefix`` answer
        ``status`` with ``body``."""
        with self._lock:
            self._injected.append(Injected(path_prefix, status, body, times))

    def outbid(self, instance_id: int, *, still_running: bool = False) -> None:
        """Another renter outbid the instance: Vast stops it (``intended_status`` stopped),
        with no notice; ``still_running`` while the host has not stopped it yet."""
        with self._lock:
            row = self.instances[instance_id].row
            row.update(intended_status="stopped", next_state="stopped")
            if not still_running:
                row.update(actual_status="stopped", cur_state="stopped")

    def calls(self, method: str, path_prefix: str) -> list[Recorded]:
        with self._lock:
            return [r for r in self.requests if r.method == method
                    and r.path.startswith(path_prefix)]

    # ----- HTTP ---------------------------------------------------------------------------------
    def _serve(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        parts = urlsplit(handler.path)
        query = dict(parse_qsl(parts.query))
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        auth = handler.headers.get("Authorization")
        with self._lock:
            self.requests.append(Recorded(method, parts.path, query, body, auth))
        try:
            status, answer = 200, self._answer(method, parts.path, query, body, auth)
        except VastHttpError as exc:
            status, answer = exc.status, exc.body
        data = json.dumps(answer).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def _answer(self, method: str, path: str, query: dict[str, str], body: Any,
                auth: str | None) -> Any:
        if auth != f"Bearer {self.api_key}":
            raise _bad(401, "invalid_user_key", "Invalid or missing API key")
        with self._lock:
            for inj in self._injected:
                if inj.times > 0 and path.startswith(inj.path_prefix):
                    inj.times -= 1
                    raise VastHttpError(inj.status, inj.body)
        routes: list[tuple[str, str, Callable[..., Any]]] = [
            ("POST", "/api/v0/bundles/", self._search),
            ("GET", "/api/v1/instances/", self._list_instances),
            ("GET", "/api/v0/users/current", self._user),
        ]
        for verb, route, fn in routes:
            if method == verb and path == route:
                return fn(query, body)
        segments = path.strip("/").split("/")
        if method == "PUT" and segments[:3] == ["api", "v0", "asks"] and len(segments) == 4:
            return self._create(_int(segments[3]), body)
        if method == "DELETE" and segments[:3] == ["api", "v0", "instances"] and len(segments) == 4:
            return self._destroy(_int(segments[3]))
        raise VastHttpError(404, {"detail": "Not Found"})

    # ----- endpoints ----------------------------------------------------------------------------
    def _search(self, query: dict[str, str], body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise _bad(400, "invalid_args", "the query must be a JSON object")
        kind = body.get("type")
        if kind not in ("on-demand", "bid", "reserved"):
            raise _bad(400, "invalid_args", f"type {kind!r}: on-demand, bid or reserved")
        limit = body.get("limit", self.default_limit)
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise _bad(400, "invalid_args", f"limit {limit!r} must be an integer >= 1")
        if not isinstance(body.get("allocated_storage", 5.0), (int, float)):
            raise _bad(400, "invalid_args", "allocated_storage must be a number")
        filters = {k: v for k, v in body.items() if k not in _QUERY_KEYS}
        with self._lock:
            rows = [r for r in self.asks.values() if kind != "bid" or r.get("min_bid") is not None]
            rows = [r for r in rows if all(_matches(r, k, v) for k, v in filters.items())]
        for column, direction in reversed(body.get("order") or []):
            rows.sort(key=lambda r, c=column: (r.get(c) is None, r.get(c) or 0),
                      reverse=direction == "desc")
        return {"offers": [dict(r, is_bid=kind == "bid") for r in rows[:min(limit, self.max_limit)]]}

    def _create(self, ask_id: int, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict) or body.get("client_id") != "me":
            raise _bad(400, "invalid_args", "client_id must be 'me'", ask_id=ask_id)
        image, disk, price = body.get("image"), body.get("disk"), body.get("price")
        if not isinstance(image, str) or not 1 <= len(image) <= 1024:
            raise _bad(400, "invalid_args", "image: 1-1024 characters", ask_id=ask_id)
        if not isinstance(disk, (int, float)) or disk < 8:
            raise _bad(400, "invalid_args", "disk must be at least 8 GB", ask_id=ask_id)
        if price is not None and (not isinstance(price, (int, float)) or not 0.001 <= price <= 128):
            raise _bad(400, "invalid_args", "price must be 0.001-128 $/hour", ask_id=ask_id)
        env, label = body.get("env") or {}, body.get("label")
        if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
            raise _bad(400, "invalid_args", "env must map names to strings", ask_id=ask_id)
        if label is not None and not isinstance(label, str):
            raise _bad(400, "invalid_args", "label must be text", ask_id=ask_id)
        with self._lock:
            ask = self.asks.get(ask_id)
            if ask is None:
                raise _bad(404, "no_such_ask", f"Offer {ask_id} not found", ask_id=ask_id)
            if ask.get("rented"):
                raise _bad(410, "no_longer_available", "Offer no longer available", ask_id=ask_id)
            if self.credit <= 0:
                raise _bad(400, "insufficient_credit", "insufficient credit", ask_id=ask_id)
            ask["rented"] = True
            self._next_id += 1
            instance_id = self._next_id
            never_runs = price is not None and price < (ask.get("min_bid") or 0)
            self.instances[instance_id] = FakeInstance(row={
                "id": instance_id, "machine_id": ask["machine_id"], "host_id": ask.get("host_id"),
                "actual_status": None, "cur_state": "running", "next_state": "running",
                "intended_status": "stopped" if never_runs else "running", "status_msg": None,
                "label": label, "extra_env": [[k, v] for k, v in env.items()],
                "is_bid": price is not None, "min_bid": ask.get("min_bid"),
                "dph_total": price if price is not None else ask["dph_total"],
                "gpu_name": ask["gpu_name"], "num_gpus": ask["num_gpus"],
                "geolocation": ask.get("geolocation"), "image_uuid": image,
                "onstart": body.get("onstart"), "disk_space": disk, "start_date": time.time(),
                "ssh_host": "ssh4.vast.ai", "ssh_port": 18926,
            }, never_runs=never_runs)
        return {"success": True, "new_contract": instance_id}

    def _list_instances(self, query: dict[str, str], body: Any) -> dict[str, Any]:
        try:
            filters = json.loads(query.get("select_filters") or "{}")
            limit = min(int(query.get("limit") or INSTANCES_PAGE_MAX), INSTANCES_PAGE_MAX)
            after = json.loads(query.get("after_token") or "null")
        except ValueError:
            raise _bad(400, "invalid_args", "select_filters/limit/after_token unreadable") from None
        with self._lock:
            chosen = []
            for instance_id in sorted(self.instances):
                row = self.instances[instance_id].row
                if all(_matches(row, k, v) for k, v in filters.items()):
                    chosen.append(instance_id)
            page = [i for i in chosen if after is None or i > int(after)][:limit]
            rows = []
            for instance_id in page:
                fake = self.instances[instance_id]
                fake.listings += 1
                if fake.never_runs:
                    fake.row["actual_status"] = "created"
                elif fake.row["intended_status"] == "running":
                    fake.row["actual_status"] = "loading" if fake.listings == 1 else "running"
                rows.append(json.loads(json.dumps(fake.row)))
        more = bool(page) and page[-1] != chosen[-1]
        return {"instances": rows, "next_token": str(page[-1]) if more else None,
                "total_instances": len(chosen), "label_counts": {}}

    def _destroy(self, instance_id: int) -> dict[str, Any]:
        with self._lock:
            if self.instances.pop(instance_id, None) is None:
                raise VastHttpError(400, {"success": False, "msg": "no such instance"})
        return {"success": True}

    def _user(self, query: dict[str, str], body: Any) -> dict[str, Any]:
        return {"id": 4242, "email": "tests@example.com", "credit": self.credit,
                "api_key": self.api_key}


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise _bad(400, "invalid_args", f"{text!r} is not an id") from None
