"""A local fake of the Google endpoints the GCP adapter calls: Compute Engine v1 (REST JSON)
and the Cloud Billing Catalog v1, plus an OAuth token endpoint, over real HTTP so that the real
SDKs (google-cloud-compute, google-cloud-billing, google-auth) build, page, retry and parse
exactly as against Google.

Written from ``shared/data/api_examples/gcp`` (see its README: several bodies there are
assembled from the documented schema) and the Compute/Billing references it cites. What the
real service checks and this fake checks too:

- ``Authorization: Bearer <token>`` on every API call (401 ``UNAUTHENTICATED``, reason
  ``required``/``authError``, otherwise): a token of :attr:`FakeGcp.tokens`, one issued by
  ``POST /token`` (refresh-token or JWT-bearer grant), or a JWT signed by the key of a
  service account in :attr:`FakeGcp.service_accounts` (Google accepts self-signed JWTs);
- the project in the path (404 ``notFound``);
- ``instances.insert``: ``name`` (RFC 1035), ``machineType`` known in the zone, ``disks``
  with one boot disk with ``initializeParams.sourceImage``, ``networkInterfaces``; GPUs
  (the machine type's or ``guestAccelerators``, known and within ``maximumCardsPerInstance``)
  need ``scheduling.onHostMaintenance`` ``TERMINATE``; Spot needs ``automaticRestart`` false
  and ``instanceTerminationAction`` STOP/DELETE; labels follow GCP's rules; a taken name is
  409 ``alreadyExists``; a repeated ``requestId`` answers the first operation;
- ``requestId`` is a UUID;
- paging: ``maxResults`` (0–500, else 400; :attr:`FakeGcp.page_cap` lowers the page) / ``pageToken`` /
  ``nextPageToken`` (Compute), ``pageSize`` / ``pageToken`` / ``nextPageToken`` ``""`` on
  the last page (Billing);
- ``filter`` on lists: ``FIELD = "VALUE"`` terms joined by ``AND`` (``name``,
  ``labels.KEY``, ``operationType``); anything else is 400 ``invalid``;
- errors in Google's JSON shape ``{"error": {"code", "message", "status", "errors":
  [{"reason", "domain", "message"}], "details"?}}``.

Operations: an insert or delete answers a ``PENDING`` operation; ``zoneOperations.get`` and
``.wait`` answer it ``DONE`` after :attr:`FakeGcp.operation_polls` reads (the VM is created
then, ``RUNNING``), or with the ``error`` of the body given to :meth:`FakeGcp.fail_next_insert`
(the ``operation_*`` example files). :meth:`FakeGcp.preempt` does what Compute Engine does to
a Spot VM: STOP → ``TERMINATED`` with ``lastStopTimestamp``, DELETE → gone; both record a
``compute.instances.preempted`` operation.
"""

from __future__ import annotations

import copy
import itertools
import json
import re
import threading
import uuid
from collections import Counter
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from google.auth import jwt

API = "https://www.googleapis.com/compute/v1"
_NAME_RE = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
_LABEL_KEY_RE = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
_LABEL_VALUE_RE = re.compile(r"^[a-z0-9_-]{0,63}$")
_TERM_RE = re.compile(r'^\(?\s*([A-Za-z][\w.-]*)\s*=\s*"([^"]*)"\s*\)?$')
_STATUS_NAMES = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
                 404: "NOT_FOUND", 409: "ALREADY_EXISTS", 429: "RESOURCE_EXHAUSTED",
                 503: "UNAVAILABLE"}


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str, body: dict | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.body = code, reason, body

    def payload(self) -> dict[str, Any]:
        if self.body is not None:
            return self.body
        return {"error": {"code": self.code, "message": str(self), "status":
                          _STATUS_NAMES.get(self.code, "UNKNOWN"),
                          "errors": [{"message": str(self), "domain": "global",
                                      "reason": self.reason}]}}


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def _matches(item: dict[str, Any], filter_: str) -> bool:
    if not filter_.strip():
        return True
    for term in re.split(r"\s+AND\s+", filter_.strip()):
        match = _TERM_RE.match(term.strip())
        if not match:
            raise ApiError(400, "invalid", f"Invalid value for field 'filter': '{filter_}'.")
        value: Any = item
        for part in match.group(1).split(".", 1) if match.group(1).startswith("labels.") \
                else [match.group(1)]:
            value = (value or {}).get(part) if isinstance(value, dict) else None
        if value != match.group(2):
            return False
    return True


class FakeGcp:
    """The fake (see the module docstring). ``zones``: region → zone names;
    ``machine_types`` / ``accelerator_types``: zone → REST JSON items; ``skus``: Billing
    Catalog SKUs. Thread-safe; ``requests`` counts (method, resource kind) served;
    ``inserts`` keeps every accepted insert body."""

    def __init__(self, *, project: str, zones: dict[str, list[str]],
                 machine_types: dict[str, list[dict]], accelerator_types: dict[str, list[dict]],
                 skus: list[dict], tokens: tuple[str, ...] = ("test-access-token",),
                 refresh_tokens: tuple[str, ...] = ()) -> None:
        self.project, self.zones = project, zones
        self.machine_types, self.accelerator_types, self.skus = (
            machine_types, accelerator_types, skus)
        self.tokens = set(tokens)
        self.refresh_tokens = set(refresh_tokens)
        self.service_accounts: dict[str, str] = {}  # client_email → public key PEM
        self.lock = threading.Lock()
        self.instances: dict[tuple[str, str], dict[str, Any]] = {}
        self.operations: dict[tuple[str, str], dict[str, Any]] = {}
        self._polls: dict[tuple[str, str], int] = {}
        self._pending: dict[tuple[str, str], dict[str, Any]] = {}  # op → VM it creates
        self._by_request_id: dict[str, dict[str, Any]] = {}
        self._insert_errors: list[dict[str, Any]] = []
        self._http_errors: list[tuple[str, str, ApiError]] = []
        self._hidden: set[str] = set()
        self._ids = itertools.count(1000)
        self.operation_polls = 1
        self.page_cap: int | None = None
        self.requests: Counter[tuple[str, str]] = Counter()
        self.inserts: list[dict[str, Any]] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # ----- test controls ----------------------------------------------------------------------
    def fail_next_insert(self, operation_example: dict[str, Any]) -> None:
        """The next insert's operation ends DONE with this example's ``error`` (and
        ``httpErrorStatusCode``/``httpErrorMessage``)."""
        with self.lock:
            self._insert_errors.append(operation_example)

    def fail_next(self, method: str, path_part: str, code: int,
                  body: dict[str, Any] | None = None, reason: str = "backendError") -> None:
        """The next ``method`` request whose path contains ``path_part`` answers ``code`` with
        ``body`` (a Google error JSON, e.g. the AIP-193 stockout example)."""
        with self.lock:
            self._http_errors.append((method, path_part, ApiError(code, reason, "injected",
                                                                  body)))

    def hide_from_next_list(self, name: str) -> None:
        """The next instance listing leaves ``name`` out (listings lag behind inserts)."""
        with self.lock:
            self._hidden.add(name)

    def forget_request_ids(self) -> None:
        """As after an hour: Compute Engine no longer remembers earlier requestIds."""
        with self.lock:
            self._by_request_id.clear()

    def preempt(self, zone: str, name: str) -> None:
        with self.lock:
            vm = self.instances[(zone, name)]
            if vm["scheduling"].get("instanceTerminationAction") == "STOP":
                vm.update(status="TERMINATED", lastStopTimestamp=_now())
            else:
                del self.instances[(zone, name)]
            op = self._operation(zone, name, "compute.instances.preempted", "DONE")
            self.operations[(zone, op["name"])] = op

    def set_status(self, zone: str, name: str, status: str) -> None:
        with self.lock:
            self.instances[(zone, name)]["status"] = status

    # ----- serving ----------------------------------------------------------------------------
    def handle(self, method: str, path: str, query: dict[str, str], body: bytes,
               headers: Any) -> tuple[int, dict[str, Any]]:
        if method == "POST" and path == "/token":
            return self._token(body)
        token = (headers.get("Authorization") or "").removeprefix("Bearer ")
        if not headers.get("Authorization"):
            raise ApiError(401, "required", "Request is missing required authentication "
                           "credential. Expected OAuth 2 access token.")
        with self.lock:
            if token not in self.tokens and not self._signed_by_service_account(token):
                raise ApiError(401, "authError", "Invalid Credentials")
            for i, (verb, part, error) in enumerate(self._http_errors):
                if verb == method and part in path:
                    del self._http_errors[i]
                    self.requests[(method, "injected")] += 1
                    raise error
        if path.startswith("/v1/services/"):
            return self._skus(path, query)
        prefix = f"/compute/v1/projects/{self.project}/"
        if not path.startswith(prefix):
            raise ApiError(404, "notFound", f"The resource '{path}' was not found")
        parts = path[len(prefix):].split("/")
        with self.lock:
            return self._compute(method, parts, query, body)

    def _signed_by_service_account(self, token: str) -> bool:
        """Whether ``token`` is a JWT signed by a registered service account's key (a
        self-signed JWT, or a token-endpoint assertion)."""
        if token.count(".") != 2:
            return False
        try:
            issuer = jwt.decode(token, verify=False).get("iss")
            jwt.decode(token, certs=self.service_accounts[issuer], audience=None)
        except (ValueError, KeyError):
            return False
        return True

    def _token(self, body: bytes) -> tuple[int, dict[str, Any]]:
        form = {k: v[0] for k, v in parse_qs(body.decode()).items()}
        with self.lock:
            granted = (
                form.get("grant_type") == "refresh_token"
                and form.get("refresh_token") in self.refresh_tokens) or (
                form.get("grant_type") == "urn:ietf:params:oauth:grant-type:jwt-bearer"
                and self._signed_by_service_account(form.get("assertion", "")))
            if not granted:
                return 400, {"error": "invalid_grant", "error_description": "Bad Request"}
            token = f"access-{next(self._ids)}"
            self.tokens.add(token)
        return 200, {"access_token": token, "expires_in": 3600, "token_type": "Bearer"}

    def _page(self, items: list[Any], query: dict[str, str], size_key: str, default: int,
              cap: int) -> tuple[list[Any], str | None]:
        start = int(query.get("pageToken") or 0)
        asked = int(query.get(size_key) or default)
        if not 0 <= asked <= cap:
            raise ApiError(400, "invalid", f"Invalid value for field '{size_key}': {asked}. "
                           f"Must be between 0 and {cap}.")
        size = min(asked or default, self.page_cap or cap)
        end = start + size
        return items[start:end], (str(end) if end < len(items) else None)

    def _skus(self, path: str, query: dict[str, str]) -> tuple[int, dict[str, Any]]:
        if path != "/v1/services/6F81-5844-456A/skus":
            raise ApiError(404, "notFound", f"Service not found: {path}")
        with self.lock:
            self.requests[("GET", "skus")] += 1
            page, token = self._page(self.skus, query, "pageSize", 5000, 5000)
        return 200, {"skus": page, "nextPageToken": token or ""}

    def _list(self, kind: str, items: list[dict], query: dict[str, str]) -> dict[str, Any]:
        chosen = [i for i in items if _matches(i, query.get("filter", ""))]
        page, token = self._page(chosen, query, "maxResults", 500, 500)
        out: dict[str, Any] = {"kind": f"compute#{kind}List", "items": page}
        if token:
            out["nextPageToken"] = token
        return out

    def _compute(self, method: str, parts: list[str], query: dict[str, str],
                 body: bytes) -> tuple[int, dict[str, Any]]:
        if parts[0] == "regions" and len(parts) == 2 and method == "GET":
            self.requests[("GET", "regions")] += 1
            if parts[1] not in self.zones:
                raise ApiError(404, "notFound", f"The resource 'regions/{parts[1]}' was not found")
            return 200, {"kind": "compute#region", "name": parts[1], "status": "UP", "zones": [
                f"{API}/projects/{self.project}/zones/{z}" for z in self.zones[parts[1]]]}
        if parts[0] != "zones" or len(parts) < 3:
            raise ApiError(404, "notFound", f"The resource '{'/'.join(parts)}' was not found")
        zone, kind, rest = parts[1], parts[2], parts[3:]
        if not any(zone in zs for zs in self.zones.values()):
            raise ApiError(404, "notFound", f"The resource 'zones/{zone}' was not found")
        self.requests[(method, kind)] += 1
        if kind == "machineTypes" and not rest:
            return 200, self._list("machineType", self.machine_types.get(zone, []), query)
        if kind == "acceleratorTypes" and not rest:
            return 200, self._list("acceleratorType", self.accelerator_types.get(zone, []), query)
        if kind == "operations":
            return 200, self._operations(zone, rest, query)
        if kind == "instances":
            return self._instances(method, zone, rest, query, body)
        raise ApiError(404, "notFound", f"The resource '{kind}' was not found")

    # ----- operations -------------------------------------------------------------------------
    def _operation(self, zone: str, name: str, op_type: str, status: str) -> dict[str, Any]:
        link = f"{API}/projects/{self.project}/zones/{zone}"
        op_name = f"operation-{next(self._ids)}"
        return {"kind": "compute#operation", "id": str(next(self._ids)), "name": op_name,
                "zone": link, "operationType": op_type, "targetLink": f"{link}/instances/{name}",
                "status": status, "progress": 100 if status == "DONE" else 0,
                "insertTime": _now(), "selfLink": f"{link}/operations/{op_name}"}

    def _operations(self, zone: str, rest: list[str], query: dict[str, str]) -> dict[str, Any]:
        if not rest:
            ops = [op for (z, _), op in self.operations.items() if z == zone]
            return self._list("operation", ops, query)
        key = (zone, rest[0])
        if key not in self.operations:
            raise ApiError(404, "notFound", f"The resource 'operations/{rest[0]}' was not found")
        op = self.operations[key]
        if op["status"] != "DONE":
            self._polls[key] = self._polls.get(key, 0) + 1
            if self._polls[key] >= self.operation_polls:
                self._finish(key, op)
        return op

    def _finish(self, key: tuple[str, str], op: dict[str, Any]) -> None:
        op.update(status="DONE", progress=100, endTime=_now())
        vm = self._pending.pop(key, None)
        failure = vm.pop("_failure", None) if vm else None
        if failure is not None:
            op.update({k: failure[k] for k in ("error", "httpErrorStatusCode",
                                                "httpErrorMessage") if k in failure})
        elif vm is not None:
            self.instances[(key[0], vm["name"])] = vm

    # ----- instances --------------------------------------------------------------------------
    def _instances(self, method: str, zone: str, rest: list[str], query: dict[str, str],
                   body: bytes) -> tuple[int, dict[str, Any]]:
        if method == "GET" and not rest:
            vms = [vm for (z, name), vm in sorted(self.instances.items())
                   if z == zone and name not in self._hidden]
            self._hidden.clear()
            return 200, self._list("instance", vms, query)
        if method == "POST" and not rest:
            return 200, self._insert(zone, json.loads(body or b"{}"), query.get("requestId"))
        name = rest[0] if rest else ""
        if (zone, name) not in self.instances:
            raise ApiError(404, "notFound", f"The resource 'projects/{self.project}/zones/"
                           f"{zone}/instances/{name}' was not found")
        if method == "GET":
            return 200, self.instances[(zone, name)]
        if method == "DELETE":
            del self.instances[(zone, name)]
            op = self._operation(zone, name, "delete", "DONE")
            self.operations[(zone, op["name"])] = op
            return 200, op
        raise ApiError(400, "invalid", f"{method} not supported here")

    def _insert(self, zone: str, vm: dict[str, Any], request_id: str | None) -> dict[str, Any]:
        if request_id is not None:
            try:
                uuid.UUID(request_id)
            except ValueError:
                raise ApiError(400, "invalid", f"Invalid value for field 'requestId': "
                               f"'{request_id}'. Must be a UUID.") from None
        if request_id and request_id in self._by_request_id:
            return self._by_request_id[request_id]
        self._validate(zone, vm)
        self.inserts.append(copy.deepcopy(vm))
        link = f"{API}/projects/{self.project}/zones/{zone}"
        vm = {**vm, "kind": "compute#instance", "id": str(next(self._ids)), "zone": link,
              "machineType": f"{link}/machineTypes/{vm['machineType'].rsplit('/', 1)[-1]}",
              "status": "RUNNING", "creationTimestamp": _now(),
              "selfLink": f"{link}/instances/{vm['name']}"}
        op = self._operation(zone, vm["name"], "insert", "PENDING")
        if self._insert_errors:
            vm["_failure"] = self._insert_errors.pop(0)
        self.operations[(zone, op["name"])] = op
        self._pending[(zone, op["name"])] = vm
        if request_id:
            self._by_request_id[request_id] = op
        return op

    def _validate(self, zone: str, vm: dict[str, Any]) -> None:
        def invalid(field: str, why: str) -> ApiError:
            return ApiError(400, "invalid", f"Invalid value for field 'resource.{field}': {why}")

        name = vm.get("name") or ""
        if not _NAME_RE.match(name):
            raise invalid("name", f"'{name}'. Must be a match of regex "
                          "'(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)'")
        if (zone, name) in self.instances or any(
                z == zone and v["name"] == name for (z, _), v in self._pending.items()):
            raise ApiError(409, "alreadyExists", f"The resource 'projects/{self.project}/zones/"
                           f"{zone}/instances/{name}' already exists")
        machines = {m["name"]: m for m in self.machine_types.get(zone, [])}
        machine = machines.get(str(vm.get("machineType") or "").rsplit("/", 1)[-1])
        if machine is None:
            raise invalid("machineType", f"'{vm.get('machineType')}'. Machine type does not exist")
        boot = [d for d in vm.get("disks") or [] if d.get("boot")]
        if len(boot) != 1 or not (boot[0].get("initializeParams") or {}).get("sourceImage"):
            raise invalid("disks", "exactly one boot disk with initializeParams.sourceImage")
        if not vm.get("networkInterfaces"):
            raise invalid("networkInterfaces", "at least one network interface is required")
        accelerators = {a["name"]: a for a in self.accelerator_types.get(zone, [])}
        for attached in vm.get("guestAccelerators") or []:
            kind = accelerators.get(str(attached.get("acceleratorType")).rsplit("/", 1)[-1])
            if kind is None or not 1 <= int(attached.get("acceleratorCount") or 0) <= int(
                    kind["maximumCardsPerInstance"]):
                raise invalid("guestAccelerators", f"{attached}")
        scheduling = vm.get("scheduling") or {}
        if (vm.get("guestAccelerators") or machine.get("accelerators")) and scheduling.get(
                "onHostMaintenance") != "TERMINATE":
            raise invalid("scheduling.onHostMaintenance", "Instances with guest accelerators "
                          "do not support live migration.")
        if scheduling.get("provisioningModel") == "SPOT":
            if scheduling.get("automaticRestart", True):
                raise invalid("scheduling.automaticRestart", "must be false for Spot VMs")
            if scheduling.get("instanceTerminationAction") not in ("STOP", "DELETE"):
                raise invalid("scheduling.instanceTerminationAction", "STOP or DELETE")
        for key, value in (vm.get("labels") or {}).items():
            if not _LABEL_KEY_RE.match(key) or not _LABEL_VALUE_RE.match(value):
                raise invalid("labels", f"'{key}': '{value}'")


def _handler(fake: FakeGcp) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _serve(self) -> None:
            parts = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                status, answer = fake.handle(self.command, parts.path, query, body, self.headers)
            except ApiError as exc:
                status, answer = exc.code, exc.payload()
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=UTF-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_DELETE = _serve

    return Handler
