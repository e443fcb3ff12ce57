"""Local fakes of Azure's Scheduled Events and of the GCP metadata server, written from the
documented shapes in ``shared/data/api_examples/{azure,gcp}`` (see their README.md).

- :class:`FakeScheduledEvents`: ``GET /metadata/scheduledevents?api-version=...`` with header
  ``Metadata: true`` (400 without it or without ``api-version``, as Azure answers);
  ``DocumentIncarnation`` goes up whenever the events change; ``POST`` of
  ``{"StartRequests": [{"EventId": ...}]}`` approves (200 for a known id, 400 otherwise), and
  an approved event is ``Started``. ``GET /metadata/instance/compute/name?...&format=text``
  answers the VM's name.
- :class:`FakeGcpMetadata`: ``GET /computeMetadata/v1/instance/preempted`` with header
  ``Metadata-Flavor: Google`` (403 without it) → ``FALSE`` / ``TRUE``.
"""

from __future__ import annotations

import copy
import json
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from core.config import shared_data_dir
from tests.integration.agent.fakes import _Quiet, _Server

EXAMPLES = shared_data_dir() / "api_examples"
needs_examples = pytest.mark.skipif(
    not EXAMPLES.is_dir(), reason=f"shared API examples not found at {EXAMPLES} (set GA_DATA_DIR)")
PREEMPT_EXAMPLE = EXAMPLES / "azure" / "scheduled_events_preempt_simulated_eviction.json"


def rfc1123(at: datetime) -> str:
    """``Tue, 09 Aug 2022 17:07:32 GMT``, as Scheduled Events writes ``NotBefore``."""
    return format_datetime(at.astimezone(UTC).replace(microsecond=0), usegmt=True)


class _EventsHandler(_Quiet):
    def _checked(self) -> str | None:
        fake: FakeScheduledEvents = self.server_owner
        url = urlsplit(self.path)
        if self.headers.get("Metadata") != "true":
            self.reply(400, json.dumps({"error": "Bad request. Required metadata header not "
                                                 "specified"}), "application/json")
            return None
        if not parse_qs(url.query).get("api-version"):
            self.reply(400, json.dumps({"error": "Bad request. api-version was not specified "
                                                 "in the request"}), "application/json")
            return None
        with fake.lock:
            fake.requests.append((self.command, url.path))
        return url.path

    def do_GET(self) -> None:
        fake: FakeScheduledEvents = self.server_owner
        path = self._checked()
        if path == "/metadata/instance/compute/name":
            return self.reply(200, fake.vm_name)
        if path == "/metadata/scheduledevents":
            with fake.lock:
                doc = {"DocumentIncarnation": fake.incarnation, "Events": fake.events}
                return self.reply(200, json.dumps(doc), "application/json")
        if path is not None:
            self.reply(404)

    def do_POST(self) -> None:
        fake: FakeScheduledEvents = self.server_owner
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self._checked() != "/metadata/scheduledevents":
            return None
        try:
            ids = [r["EventId"] for r in json.loads(body)["StartRequests"]]
        except (ValueError, KeyError, TypeError):
            return self.reply(400, json.dumps({"error": "Bad request"}), "application/json")
        with fake.lock:
            known = {e["EventId"]: e for e in fake.events}
            if not ids or any(i not in known for i in ids):
                return self.reply(400, json.dumps({"error": "Bad request"}), "application/json")
            for event_id in ids:
                known[event_id].update(EventStatus="Started", NotBefore="")
                fake.approvals.append((event_id, time.monotonic(), fake.on_approve()))
            fake.incarnation += 1
        self.reply(200)


class FakeScheduledEvents(_Server):
    """Azure's Scheduled Events for the VM ``vm_name``. ``on_approve`` is called (under the
    lock) at each approval and its result kept in ``approvals`` with the event id and the
    monotonic time: tests record what had happened by then."""

    handler = _EventsHandler

    def __init__(self, vm_name: str = "vm-spot") -> None:
        self.lock = threading.Lock()
        self.vm_name = vm_name
        self.incarnation = 1
        self.events: list[dict[str, Any]] = []
        self.requests: list[tuple[str, str]] = []
        self.approvals: list[tuple[str, float, Any]] = []
        self.on_approve: Callable[[], Any] = lambda: None
        super().__init__()

    def add_event(self, event_type: str = "Preempt", in_s: float = 30.0,
                  resources: list[str] | None = None) -> datetime:
        """Add an event shaped as the documented Preempt example; returns its ``NotBefore``."""
        event = copy.deepcopy(json.loads(PREEMPT_EXAMPLE.read_text())["Events"][0])
        at = (datetime.now(UTC) + timedelta(seconds=in_s)).replace(microsecond=0)
        event.update(EventId=str(uuid.uuid4()).upper(), EventType=event_type,
                     Resources=resources or [self.vm_name], NotBefore=rfc1123(at))
        with self.lock:
            self.events.append(event)
            self.incarnation += 1
        return at


class _GcpHandler(_Quiet):
    def do_GET(self) -> None:
        fake: FakeGcpMetadata = self.server_owner
        if self.headers.get("Metadata-Flavor") != "Google":
            return self.reply(403, "Missing Metadata-Flavor:Google header.")
        if urlsplit(self.path).path != "/computeMetadata/v1/instance/preempted":
            return self.reply(404)
        with fake.lock:
            fake.reads += 1
            value = "TRUE" if fake.preempted else "FALSE"
        self.send_response(200)
        self.send_header("Metadata-Flavor", "Google")
        self.send_header("Content-Type", "application/text")
        self.send_header("Content-Length", str(len(value)))
        self.end_headers()
        self.wfile.write(value.encode())


class FakeGcpMetadata(_Server):
    """The GCP metadata server's ``instance/preempted``; set ``preempted`` to flip it."""

    handler = _GcpHandler

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.preempted = False
        self.reads = 0
        super().__init__()
