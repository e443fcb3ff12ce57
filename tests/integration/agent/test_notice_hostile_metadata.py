"""The notice watchers against a hostile or broken metadata server: malformed documents, odd
field types, out-of-range times, deep nesting, oversized and dripping answers. A watcher's
``poll`` never raises and never stalls past the metadata timeout; a malformed answer is no
notice (a malformed Scheduled Event is skipped, the others still count), logged once."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from scheduler.agent.notices import (
    ALIYUN_TERMINATION_PATH,
    AWS_INSTANCE_ACTION_PATH,
    AWS_TOKEN_PATH,
    AZURE_EVENTS_PATH,
    AZURE_VM_NAME_PATH,
    GCP_PREEMPTED_PATH,
    METADATA_MAX_BYTES,
    AzureScheduledEvents,
    NoticeSource,
    make_notice_source,
)
from scheduler.timing import METADATA_DEADLINE_S
from tests.integration.agent.fakes import _Quiet, _Server

NOT_BEFORE = "Tue, 09 Aug 2022 17:07:32 GMT"
DRIP_BYTES, DRIP_EVERY_S = 60, 0.2  # 12 s in all unless the client hangs up


class _HostileHandler(_Quiet):
    def _answer(self) -> None:
        server: HostileMetadata = self.server_owner
        with server.lock:
            server.requests.append((self.command, self.path))
            body = server.bodies.get(self.path)
            drip = self.path in server.drip
            drip_headers = self.path in server.drip_headers
        if drip_headers:
            try:
                self.wfile.write(b"HTTP/1.1 200 OK\r\n")
                for _ in range(DRIP_BYTES):
                    self.wfile.write(b"X")
                    self.wfile.flush()
                    time.sleep(DRIP_EVERY_S)
            except OSError:
                pass
            return
        if drip:
            self.send_response(200)
            self.send_header("Content-Length", str(DRIP_BYTES))
            self.end_headers()
            try:
                for _ in range(DRIP_BYTES):
                    self.wfile.write(b"F")
                    self.wfile.flush()
                    time.sleep(DRIP_EVERY_S)
            except OSError:  # the client gave up, as it should
                pass
            return
        if body is None:
            self.reply(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_PUT = do_POST = _answer


class HostileMetadata(_Server):
    """Answers each path with the bytes in ``bodies`` (404 for others) or, for a path in
    ``drip`` (``drip_headers``), one byte of the body (of the headers) every 0.2 s. ``PUT /latest/api/token`` gives an IMDSv2 token unless
    told otherwise."""

    handler = _HostileHandler

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests: list[tuple[str, str]] = []
        self.bodies: dict[str, bytes] = {}
        self.drip: set[str] = set()
        self.drip_headers: set[str] = set()
        self.reset()
        super().__init__()

    def reset(self) -> None:
        with self.lock:
            self.requests.clear()
            self.bodies = {AWS_TOKEN_PATH: b"token-1", AZURE_VM_NAME_PATH: b"myvm"}
            self.drip = set()
            self.drip_headers = set()


@pytest.fixture(scope="module")
def hostile_server() -> Iterator[HostileMetadata]:
    server = HostileMetadata()
    yield server
    server.stop()


@pytest.fixture
def hostile(hostile_server: HostileMetadata) -> HostileMetadata:
    """One server for the module (a stop takes half a second), fresh answers for each test."""
    hostile_server.reset()
    return hostile_server


def _event(**fields: Any) -> dict[str, Any]:
    return {"EventId": "e1", "EventType": "Preempt", "EventStatus": "Scheduled",
            "Resources": ["myvm"], "NotBefore": NOT_BEFORE, **fields}


def _document(*events: dict[str, Any]) -> bytes:
    return json.dumps({"DocumentIncarnation": 1, "Events": list(events)}).encode()


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "scheduler.agent.notices" and r.levelno == logging.WARNING]


DEEP = b'{"DocumentIncarnation": 1, "Events": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
MALFORMED_DOCUMENTS = {
    "incarnation Infinity": b'{"DocumentIncarnation": Infinity, "Events": []}',
    "incarnation 1e400": b'{"DocumentIncarnation": 1e400, "Events": []}',
    "incarnation NaN": b'{"DocumentIncarnation": NaN, "Events": []}',
    "incarnation string": b'{"DocumentIncarnation": "1", "Events": []}',
    "top level a list": b"[1, 2]",
    "deep nesting": DEEP,
    "not UTF-8": b'{"DocumentIncarnation": 1, "Events": ["\xff\xfe"]}',
    "Resources int": _document(_event(Resources=5)),
    "Resources a string": _document(_event(Resources="myvm")),
    "NotBefore int": _document(_event(NotBefore=12345)),
    "NotBefore garbage": _document(_event(NotBefore="soon")),
    "NotBefore year 99999": _document(_event(NotBefore="Tue, 09 Aug 99999 17:07:32 GMT")),
    "NotBefore a list": _document(_event(NotBefore=[NOT_BEFORE])),
    "EventId int": _document(_event(EventId=7)),
    "EventId empty": _document(_event(EventId="")),
    "event a number": _document(5),  # type: ignore[arg-type]
}


@pytest.mark.parametrize("body", MALFORMED_DOCUMENTS.values(), ids=MALFORMED_DOCUMENTS.keys())
def test_malformed_scheduled_events_are_no_notice_logged_once(
        hostile: HostileMetadata, caplog: pytest.LogCaptureFixture, body: bytes) -> None:
    hostile.bodies[AZURE_EVENTS_PATH] = body
    events = AzureScheduledEvents(hostile.base_url)
    caplog.set_level(logging.WARNING, "scheduler.agent.notices")
    try:
        assert [events.poll() for _ in range(3)] == [None, None, None]
    finally:
        events.close()
    assert len(_warnings(caplog)) == 1, _warnings(caplog)
    assert "ignoring unreadable scheduled event" in _warnings(caplog)[0]


def test_a_malformed_event_is_skipped_and_a_later_preempt_still_counts(
        hostile: HostileMetadata, caplog: pytest.LogCaptureFixture) -> None:
    hostile.bodies[AZURE_EVENTS_PATH] = _document(
        _event(EventId=7), _event(Resources=5), _event(NotBefore=12345), 5,  # type: ignore[arg-type]
        _event(EventType=["Preempt"]), _event(EventId="good"))
    events = AzureScheduledEvents(hostile.base_url)
    caplog.set_level(logging.WARNING, "scheduler.agent.notices")
    try:
        notice = events.poll()
        assert notice is not None and notice.action_at.isoformat() == "2022-08-09T17:07:32+00:00"
        assert events.preemption is not None and events.preemption.event_id == "good"
        events.poll()
    finally:
        events.close()
    [warning] = _warnings(caplog)
    for index in ("Events[0]", "Events[1]", "Events[2]", "Events[3]"):
        assert index in warning


def test_malformed_answers_are_logged_again_after_a_good_one(
        hostile: HostileMetadata, caplog: pytest.LogCaptureFixture) -> None:
    events = AzureScheduledEvents(hostile.base_url, vm_name="myvm")
    caplog.set_level(logging.WARNING, "scheduler.agent.notices")
    try:
        for body in (b"[]", b"[]", _document(), b"[]"):
            hostile.bodies[AZURE_EVENTS_PATH] = body
            assert events.poll() is None
    finally:
        events.close()
    assert len(_warnings(caplog)) == 2, _warnings(caplog)


@pytest.mark.parametrize("resources, ours", [
    (["myvm-2"], False), (["xmyvm"], False), (["my"], False), (["othervm", 3, None], False),
    (["MyVM"], True), (["othervm", "myvm"], True),
])
def test_resources_name_the_vm_whole_and_case_insensitively(
        hostile: HostileMetadata, resources: list[Any], ours: bool) -> None:
    hostile.bodies[AZURE_EVENTS_PATH] = _document(_event(Resources=resources))
    events = AzureScheduledEvents(hostile.base_url)
    try:
        assert (events.poll() is not None) is ours
    finally:
        events.close()


FAR_FUTURE = "9999-12-31T23:59:59-05:00"  # past year 9999 in UTC
HOSTILE_ANSWERS = {
    "aws overflowing time": ("aws", AWS_INSTANCE_ACTION_PATH,
                             json.dumps({"action": "terminate", "time": FAR_FUTURE}).encode()),
    "aws NaN": ("aws", AWS_INSTANCE_ACTION_PATH, b'{"action": "terminate", "time": NaN}'),
    "aws deep nesting": ("aws", AWS_INSTANCE_ACTION_PATH, b"[" * 100_000 + b"]" * 100_000),
    "aws a string": ("aws", AWS_INSTANCE_ACTION_PATH, b'"terminate"'),
    "aws long action": ("aws", AWS_INSTANCE_ACTION_PATH,
                        json.dumps({"action": "x" * 1000, "time": "2030-01-01T00:00:00Z"}).encode()),
    "aws odd token": ("aws", AWS_TOKEN_PATH, b"t\xc3\xa9\x00ken"),
    "aliyun overflowing time": ("aliyun", ALIYUN_TERMINATION_PATH, FAR_FUTURE.encode()),
    "aliyun NUL": ("aliyun", ALIYUN_TERMINATION_PATH, b"\x00"),
    "gcp NUL": ("gcp", GCP_PREEMPTED_PATH, b"\x00"),
    "gcp TRUE TRUE": ("gcp", GCP_PREEMPTED_PATH, b"TRUE TRUE"),
    "azure vm name not UTF-8": ("azure", AZURE_VM_NAME_PATH, b"\xff\xfe"),
}


@pytest.mark.parametrize("flavor, path, body", HOSTILE_ANSWERS.values(),
                         ids=HOSTILE_ANSWERS.keys())
def test_hostile_answers_of_every_flavor_are_no_notice(
        hostile: HostileMetadata, flavor: str, path: str, body: bytes) -> None:
    hostile.bodies[path] = body
    if path == AWS_TOKEN_PATH:
        hostile.bodies[AWS_INSTANCE_ACTION_PATH] = json.dumps(
            {"action": "terminate", "time": "2030-01-01T00:00:00Z"}).encode()
    source = make_notice_source(flavor, hostile.base_url)
    try:
        assert source.poll() is None
        assert source.poll() is None
    finally:
        source.close()


def _timed_poll(source: NoticeSource) -> float:
    started = time.monotonic()
    try:
        assert source.poll() is None
    finally:
        source.close()
    return time.monotonic() - started


@pytest.mark.parametrize("flavor, path", [
    ("azure", AZURE_EVENTS_PATH), ("gcp", GCP_PREEMPTED_PATH), ("aws", AWS_TOKEN_PATH),
    ("aws", AWS_INSTANCE_ACTION_PATH),
])
def test_a_dripping_metadata_server_is_cut_off_at_the_timeout(
        hostile: HostileMetadata, caplog: pytest.LogCaptureFixture, flavor: str,
        path: str) -> None:
    hostile.drip.add(path)
    caplog.set_level(logging.WARNING, "scheduler.agent.notices")
    took = _timed_poll(make_notice_source(flavor, hostile.base_url))
    # One more read may be under way when the deadline passes: at most one read timeout more.
    assert took < 2 * METADATA_DEADLINE_S + 0.5, f"poll took {took:.1f} s"
    assert any("unreachable" in w for w in _warnings(caplog)), _warnings(caplog)


@pytest.mark.parametrize("flavor, path", [
    ("azure", AZURE_EVENTS_PATH), ("gcp", GCP_PREEMPTED_PATH), ("aws", AWS_TOKEN_PATH),
])
def test_dripped_headers_are_cut_off_too_and_hold_one_request_at_most(
        hostile: HostileMetadata, flavor: str, path: str) -> None:
    hostile.drip_headers.add(path)
    source = make_notice_source(flavor, hostile.base_url)
    try:
        started = time.monotonic()
        assert source.poll() is None
        assert time.monotonic() - started < METADATA_DEADLINE_S + 0.5
        asked = len(hostile.requests)
        # The first request still hangs on the server: the next poll does not pile on.
        assert source.poll() is None
        assert len(hostile.requests) == asked
    finally:
        source.close()


@pytest.mark.parametrize("flavor, path", [
    ("azure", AZURE_EVENTS_PATH), ("gcp", GCP_PREEMPTED_PATH), ("aws", AWS_INSTANCE_ACTION_PATH),
])
def test_an_oversized_answer_is_no_notice(hostile: HostileMetadata, flavor: str,
                                          path: str) -> None:
    hostile.bodies[path] = b"TRUE" + b" " * METADATA_MAX_BYTES
    assert _timed_poll(make_notice_source(flavor, hostile.base_url)) < 2 * METADATA_DEADLINE_S
