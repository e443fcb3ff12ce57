"""Preemption notices from instance metadata (AWS IMDSv2, Alibaba ECS, Azure Scheduled Events, the
GCP metadata server), one class per flavor.

Sources (see ``shared/data/api_examples``):

- AWS ``GET /latest/meta-data/spot/instance-action`` (IMDSv2 token from
  ``PUT /latest/api/token``): 404 when there is no notice, else
  ``{"action": "terminate", "time": "2017-09-18T08:22:00Z"}`` (action ``terminate`` | ``stop``
  | ``hibernate``), about 2 minutes ahead. ``/latest/meta-data/events/recommendations/rebalance``:
  404, or ``{"noticeTime": "2020-10-27T08:22:00Z"}``.
- Alibaba ``GET /latest/meta-data/instance/spot/termination-time``: 404 when there is no
  notice, else ``2020-04-07T17:03:00Z`` (UTC), about 5 minutes ahead.
- Azure ``GET /metadata/scheduledevents?api-version=2020-07-01`` with header ``Metadata: true``
  (400 without it): ``{"DocumentIncarnation": int, "Events": [...]}``; an event with
  ``EventType`` ``Preempt``, ``EventStatus`` ``Scheduled`` (or ``Started``) and this VM's name in
  ``Resources`` is the notice, ``NotBefore`` (RFC 1123, ``Tue, 09 Aug 2022 17:07:32 GMT``) at
  least 30 s ahead. The VM's name comes from ``GET /metadata/instance/compute/name
  ?api-version=2021-02-01&format=text``. Approving the event is ``POST`` of
  ``{"StartRequests": [{"EventId": ...}]}`` to the same URL, which lets Azure evict at once.
- GCP ``GET /computeMetadata/v1/instance/preempted`` with header ``Metadata-Flavor: Google``:
  ``FALSE``, or ``TRUE`` once the preemption started; the VM is stopped about 30 s later (no
  time is given, so the notice's time is 30 s after the agent first read ``TRUE``).

Unreachable metadata means "no notice": the job keeps running, and the problem is logged once
at warning level until the metadata answers again. So does an answer slower in all than
:data:`~scheduler.timing.METADATA_DEADLINE_S` or longer than :data:`METADATA_MAX_BYTES` (a
server dripping its body would otherwise stall the agent's loop past the notice), and a
malformed one: a malformed document is ignored, a malformed Scheduled Event is skipped (the
other events still count), each logged once until the metadata answers well again.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from datetime import datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import ClassVar, Protocol, TypeVar

import httpx

from core.models import PreemptionNotice, utcnow
from core.models.base import ensure_utc
from scheduler.timing import (
    IMDS_TOKEN_RENEW_BEFORE_S,
    IMDS_TOKEN_TTL_S,
    METADATA_DEADLINE_S,
    METADATA_TIMEOUT_S,
)

T = TypeVar("T")

logger = logging.getLogger(__name__)

AWS_TOKEN_PATH = "/latest/api/token"
AWS_TOKEN_TTL_HEADER = "X-aws-ec2-metadata-token-ttl-seconds"
AWS_TOKEN_HEADER = "X-aws-ec2-metadata-token"
AWS_INSTANCE_ACTION_PATH = "/latest/meta-data/spot/instance-action"
AWS_REBALANCE_PATH = "/latest/meta-data/events/recommendations/rebalance"
ALIYUN_TERMINATION_PATH = "/latest/meta-data/instance/spot/termination-time"
AZURE_EVENTS_PATH = "/metadata/scheduledevents?api-version=2020-07-01"
AZURE_VM_NAME_PATH = "/metadata/instance/compute/name?api-version=2021-02-01&format=text"
AZURE_HEADERS = {"Metadata": "true"}
GCP_PREEMPTED_PATH = "/computeMetadata/v1/instance/preempted"
GCP_HEADERS = {"Metadata-Flavor": "Google"}
# GCP sends ACPI G3 Mechanical Off 30 s after the preemption notice (Spot and preemptible VMs).
GCP_NOTICE_S = 30.0
# Far above any real answer (a Scheduled Events document of a large scale set is a few KiB).
METADATA_MAX_BYTES = 256 * 1024
FLAVORS = ("aws", "aliyun", "azure", "gcp", "none")
DEFAULT_BASE_URLS = {"aws": "http://169.254.169.254", "aliyun": "http://100.100.100.200",
                     "azure": "http://169.254.169.254", "gcp": "http://metadata.google.internal"}


class MetadataUnreadable(Exception):
    """A metadata answer that took longer than ``METADATA_DEADLINE_S`` in all, was longer than
    :data:`METADATA_MAX_BYTES`, or refused the AWS session token."""


class MalformedMetadata(ValueError):
    """A metadata answer that is not the documented shape (a ``ValueError``, as every parser
    here raises)."""


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not a JSON number")


def load_json(body: str | bytes) -> object:
    """Strict JSON (no ``NaN``/``Infinity``). Raises ``ValueError`` for anything else, also for
    nesting too deep to parse."""
    try:
        return json.loads(body, parse_constant=_reject_constant)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def _to_utc(value: datetime, text: str) -> datetime:
    if value.tzinfo is None:
        raise ValueError(f"time {text!r} has no timezone")
    try:
        return ensure_utc(value)
    except OverflowError:
        raise ValueError(f"time {text!r} is out of range in UTC") from None


def parse_utc(text: str) -> datetime:
    """``2017-09-18T08:22:00Z`` (or any ISO-8601 time with an offset) → aware UTC datetime.
    Raises ``ValueError`` when ``text`` is not such a time."""
    return _to_utc(datetime.fromisoformat(text.strip()), text)


def parse_aws_instance_action(
    body: str | bytes, received_at: datetime | None = None
) -> PreemptionNotice:
    """AWS ``spot/instance-action`` JSON → :class:`PreemptionNotice`.

    Raises ``ValueError`` when the body is not ``{"action": str, "time": ISO-8601 UTC}``.
    """
    try:
        data = load_json(body)
        action, when = data["action"], data["time"]  # type: ignore[index]
    except (ValueError, TypeError, KeyError) as exc:
        raise ValueError(f"spot/instance-action is not {{'action', 'time'}} JSON: {exc}") from None
    if not isinstance(action, str) or not isinstance(when, str):
        raise MalformedMetadata("spot/instance-action 'action' and 'time' must be strings")
    return PreemptionNotice(action=action, action_at=parse_utc(when),
                            received_at=received_at or utcnow())


def parse_aws_rebalance(body: str | bytes) -> datetime:
    """AWS ``events/recommendations/rebalance`` JSON → the notice time (aware UTC).
    Raises ``ValueError`` when the body is not ``{"noticeTime": ISO-8601 UTC}``."""
    try:
        return parse_utc(load_json(body)["noticeTime"])  # type: ignore[index]
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise ValueError(f"rebalance recommendation is not {{'noticeTime'}} JSON: {exc}") from None


def parse_aliyun_termination_time(
    text: str, received_at: datetime | None = None
) -> PreemptionNotice:
    """Alibaba ``instance/spot/termination-time`` text (``2020-04-07T17:03:00Z``) →
    :class:`PreemptionNotice` with action ``terminate`` (Alibaba releases the instance).
    Raises ``ValueError`` when ``text`` is not a UTC time."""
    return PreemptionNotice(action="terminate", action_at=parse_utc(text),
                            received_at=received_at or utcnow())


def parse_rfc1123(text: str) -> datetime:
    """``Tue, 09 Aug 2022 17:07:32 GMT`` (Azure's ``NotBefore``) → aware UTC datetime.
    Raises ``ValueError`` when ``text`` is not such a time."""
    try:
        value = parsedate_to_datetime(text.strip())
    except (TypeError, ValueError, IndexError, OverflowError) as exc:
        raise ValueError(f"time {text!r} is not an RFC 1123 date: {exc}") from None
    return _to_utc(value, text)


@dataclass(frozen=True)
class AzurePreemption:
    """This VM's ``Preempt`` event: its ``EventId`` (to approve it) and the notice."""

    event_id: str
    notice: PreemptionNotice


def parse_azure_scheduled_events(body: str | bytes, vm_name: str,
                                 received_at: datetime | None = None,
                                 skipped: list[str] | None = None,
                                 ) -> tuple[int, AzurePreemption | None]:
    """A Scheduled Events document → ``(DocumentIncarnation, this VM's Preempt event or None)``.

    Only events with ``EventType`` ``Preempt``, ``EventStatus`` ``Scheduled`` or ``Started`` and
    ``vm_name`` among ``Resources`` (compared whole and case-insensitively, as Azure names are)
    count (a document lists the events of every VM of an availability set or scale set; Freeze,
    Reboot, Redeploy and Terminate are maintenance, not a reclaim). ``action_at`` is
    ``NotBefore``, or ``received_at`` for an event whose ``NotBefore`` is empty.

    Raises ``ValueError`` when the body is not ``{"DocumentIncarnation": int, "Events": list}``.
    A malformed event (not an object, ``Resources`` not a list, ``EventId`` not a non-empty
    string, ``NotBefore`` not an RFC 1123 date) is skipped, with why appended to ``skipped``.
    """
    received_at = received_at or utcnow()
    data = load_json(body)
    if not isinstance(data, dict):
        raise MalformedMetadata("scheduled events are not a JSON object")
    incarnation, events = data.get("DocumentIncarnation"), data.get("Events")
    if type(incarnation) is not int:
        raise MalformedMetadata(f"DocumentIncarnation is not an integer: {str(incarnation)[:40]!r}")
    if not isinstance(events, list):
        raise MalformedMetadata("Events is not a list")
    wanted = vm_name.casefold()
    for index, event in enumerate(events):
        try:
            preemption = _azure_preemption(event, wanted, received_at)
        except ValueError as exc:
            if skipped is not None:
                skipped.append(f"Events[{index}]: {exc}")
            continue
        if preemption is not None:
            return incarnation, preemption
    return incarnation, None


def _azure_preemption(event: object, wanted: str, received_at: datetime,
                      ) -> AzurePreemption | None:
    """``event`` as this VM's (``wanted``, casefolded) Preempt, ``None`` when it is another
    event; ``ValueError`` when it is malformed."""
    if not isinstance(event, dict):
        raise MalformedMetadata("event is not an object")
    if event.get("EventType") != "Preempt" or event.get("EventStatus") not in (
            "Scheduled", "Started"):
        return None
    resources = event.get("Resources")
    if not isinstance(resources, list):
        raise MalformedMetadata("Resources is not a list")
    if not any(isinstance(name, str) and name.casefold() == wanted for name in resources):
        return None
    event_id, not_before = event.get("EventId"), event.get("NotBefore") or ""
    if not isinstance(event_id, str) or not event_id:
        raise MalformedMetadata("a Preempt event has no EventId")
    if not isinstance(not_before, str):
        raise MalformedMetadata("NotBefore is not a string")
    action_at = parse_rfc1123(not_before) if not_before else received_at
    return AzurePreemption(event_id, PreemptionNotice(
        action="terminate", action_at=action_at, received_at=received_at))


def parse_gcp_preempted(text: str) -> bool:
    """GCP ``instance/preempted`` text → ``True`` for ``TRUE``, ``False`` for ``FALSE``.
    Raises ``ValueError`` for anything else."""
    value = text.strip().upper()
    if value not in ("TRUE", "FALSE"):
        raise ValueError(f"instance/preempted is not TRUE or FALSE: {text[:40]!r}")
    return value == "TRUE"


class NoticeSource(Protocol):
    """Something that says whether this instance is about to be reclaimed."""

    def poll(self) -> PreemptionNotice | None:
        """The current notice, or ``None`` (also when the metadata cannot be read). Never raises."""
        ...

    def acknowledge(self) -> bool:
        """Tell the cloud this instance is ready to go (after its final checkpoint landed).
        Only Azure has such a call; elsewhere a no-op returning ``False``. Never raises."""
        ...

    def close(self) -> None: ...


class NoNotices:
    """The ``none`` flavor (on-demand or local machines, or a market that reclaims without
    notice, such as a Vast.ai interruptible instance that is outbid): there is never a notice."""

    def poll(self) -> PreemptionNotice | None:
        return None

    def acknowledge(self) -> bool:
        return False

    def close(self) -> None:
        pass


# What a metadata request may raise when the server is unreachable, slow or odd (ValueError:
# e.g. a header value httpx cannot encode, such as an odd AWS token).
_REQUEST_ERRORS = (httpx.HTTPError, httpx.InvalidURL, httpx.StreamError, MetadataUnreadable,
                   ValueError)


@dataclass(frozen=True)
class MetadataAnswer:
    """A whole metadata answer: HTTP status and body (UTF-8, undecodable bytes replaced)."""

    status_code: int
    text: str


class _MetadataClient:
    """Shared HTTP plumbing: one client, every request bounded in time and size, "log once" for
    an unreachable server or a malformed answer. ``headers`` go with every read (the header
    each cloud's metadata server insists on)."""

    headers: ClassVar[Mapping[str, str]] = {}

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url.rstrip("/")
        # identity: a compressed body could inflate past the size cap between two checks.
        self._http = httpx.Client(timeout=METADATA_TIMEOUT_S,
                                  headers={"Accept-Encoding": "identity"})
        self._unreachable_logged = False
        self._complained: set[str] = set()
        self._in_flight: Future[MetadataAnswer] | None = None

    def close(self) -> None:
        self._http.close()

    def acknowledge(self) -> bool:
        return False

    def _unreachable(self, exc: Exception) -> None:
        if not self._unreachable_logged:
            logger.warning("instance metadata at %s unreachable (%s); assuming no notice",
                           self.base_url, type(exc).__name__)
            self._unreachable_logged = True

    def _reachable(self) -> None:
        if self._unreachable_logged:
            logger.info("instance metadata at %s reachable again", self.base_url)
            self._unreachable_logged = False

    def _complain(self, what: str, problem: str) -> None:
        if what not in self._complained:
            logger.warning("ignoring unreadable %s: %s", what, problem)
            self._complained.add(what)

    def _understood(self, what: str) -> None:
        self._complained.discard(what)

    def _request(self, method: str, path: str, headers: Mapping[str, str],
                 json_body: object = None) -> MetadataAnswer:
        """One request whose whole answer arrives within ``METADATA_DEADLINE_S`` and
        ``METADATA_MAX_BYTES``. Raises :class:`MetadataUnreadable` beyond either,
        ``httpx.HTTPError`` when unreachable.

        httpx bounds each read only, so a server dripping its answer could hold the caller for
        as long as it likes: the request runs on a daemon thread the caller waits for until
        the deadline. While a request still hangs there, the next ones are unreadable at
        once, so a bad server holds at most one thread.
        """
        if self._in_flight is not None and not self._in_flight.done():
            raise MetadataUnreadable("an earlier request is still unanswered")
        deadline = time.monotonic() + METADATA_DEADLINE_S
        future: Future[MetadataAnswer] = Future()
        self._in_flight = future

        def fetch() -> None:
            try:
                future.set_result(self._fetch(method, path, headers, json_body, deadline))
            except _REQUEST_ERRORS as exc:
                future.set_exception(exc)
            finally:
                if not future.done():  # anything else: the thread's traceback is printed
                    future.set_exception(MetadataUnreadable("metadata request failed"))

        threading.Thread(target=fetch, name="metadata-request", daemon=True).start()
        try:
            return future.result(timeout=max(0.0, deadline - time.monotonic()))
        except FutureTimeout:
            raise MetadataUnreadable(f"answer slower than {METADATA_DEADLINE_S} s") from None

    def _fetch(self, method: str, path: str, headers: Mapping[str, str], json_body: object,
               deadline: float) -> MetadataAnswer:
        """The request itself: the body is read in pieces, so its size and the deadline are
        checked as it arrives (the thread ends soon after the caller stopped waiting)."""
        body = bytearray()
        with self._http.stream(method, self.base_url + path, headers=headers,
                               json=json_body) as answer:
            for chunk in answer.iter_raw():
                body += chunk
                if len(body) > METADATA_MAX_BYTES:
                    raise MetadataUnreadable(f"answer longer than {METADATA_MAX_BYTES} bytes")
                if time.monotonic() > deadline:
                    raise MetadataUnreadable(f"answer slower than {METADATA_DEADLINE_S} s")
            return MetadataAnswer(answer.status_code, body.decode("utf-8", errors="replace"))

    def _get(self, path: str) -> MetadataAnswer:
        return self._request("GET", path, self.headers)

    def _read(self, path: str) -> str | None:
        """Body of ``path``, ``None`` for 404 or when the metadata cannot be read."""
        try:
            answer = self._get(path)
        except _REQUEST_ERRORS as exc:
            self._unreachable(exc)
            return None
        self._reachable()
        if answer.status_code == 404:
            return None
        if answer.status_code != 200:
            logger.warning("instance metadata %s answered HTTP %d", path, answer.status_code)
            return None
        return answer.text

    def _parsed(self, path: str, parse: Callable[[str], T], what: str) -> T | None:
        """``parse`` of the body of ``path``; ``None`` when absent or unreadable (logged)."""
        body = self._read(path)
        if body is None:
            return None
        try:
            value = parse(body)
        except ValueError as exc:
            self._complain(what, str(exc))
            return None
        self._understood(what)
        return value


class AwsImdsNotices(_MetadataClient):
    """Spot notices from AWS instance metadata, IMDSv2 (session token) only.

    - **base_url**: metadata root, e.g. ``http://169.254.169.254`` (no ``/latest``).

    The token is fetched on first use and renewed shortly before it expires or when the
    metadata answers 401. Not thread-safe: use from one thread.
    """

    def __init__(self, base_url: str) -> None:
        super().__init__(base_url)
        self._token: str | None = None
        self._token_expires_mono = 0.0

    def _fetch_token(self) -> str:
        answer = self._request("PUT", AWS_TOKEN_PATH,
                               {AWS_TOKEN_TTL_HEADER: str(IMDS_TOKEN_TTL_S)})
        if answer.status_code != 200:
            raise MetadataUnreadable(f"IMDSv2 token refused: HTTP {answer.status_code}")
        self._token = answer.text.strip()
        self._token_expires_mono = time.monotonic() + IMDS_TOKEN_TTL_S - IMDS_TOKEN_RENEW_BEFORE_S
        return self._token

    def _get(self, path: str) -> MetadataAnswer:
        """GET with a valid token; one retry with a fresh token after a 401."""
        if self._token is None or time.monotonic() >= self._token_expires_mono:
            self._fetch_token()
        answer = self._request("GET", path, {AWS_TOKEN_HEADER: self._token or ""})
        if answer.status_code == 401:
            answer = self._request("GET", path, {AWS_TOKEN_HEADER: self._fetch_token()})
        return answer

    def poll(self) -> PreemptionNotice | None:
        return self._parsed(AWS_INSTANCE_ACTION_PATH, parse_aws_instance_action,
                            "spot/instance-action")

    def rebalance_recommendation(self) -> datetime | None:
        """When AWS recommended moving off this instance (aware UTC), or ``None``."""
        return self._parsed(AWS_REBALANCE_PATH, parse_aws_rebalance, "rebalance recommendation")


class AliyunNotices(_MetadataClient):
    """Spot (preemptible) notices from Alibaba ECS instance metadata.

    - **base_url**: metadata root, e.g. ``http://100.100.100.200`` (no ``/latest``).
    """

    def poll(self) -> PreemptionNotice | None:
        return self._parsed(ALIYUN_TERMINATION_PATH, parse_aliyun_termination_time,
                            "termination-time")


class AzureScheduledEvents(_MetadataClient):
    """Spot eviction notices from Azure's Scheduled Events (instance metadata service).

    - **base_url**: metadata root, e.g. ``http://169.254.169.254`` (no ``/metadata``).
    - **vm_name** (optional): this VM's name as ``Resources`` lists it; default: read once
      from the instance metadata (``compute/name``).

    :meth:`acknowledge` approves the Preempt event last seen. Not thread-safe.
    """

    headers = AZURE_HEADERS

    def __init__(self, base_url: str, vm_name: str | None = None) -> None:
        super().__init__(base_url)
        self.vm_name = vm_name
        self.incarnation: int | None = None
        self.preemption: AzurePreemption | None = None

    def poll(self) -> PreemptionNotice | None:
        if self.vm_name is None:
            name = self._read(AZURE_VM_NAME_PATH)
            if not name or not name.strip():
                return None
            self.vm_name = name.strip()
        vm_name, skipped = self.vm_name, []
        found = self._parsed(AZURE_EVENTS_PATH,
                             lambda body: parse_azure_scheduled_events(body, vm_name,
                                                                       skipped=skipped),
                             "scheduled events")
        if found is None:
            return None
        if skipped:
            self._complain("scheduled event", "; ".join(skipped))
        else:
            self._understood("scheduled event")
        self.incarnation, preemption = found
        if preemption is not None:
            self.preemption = preemption
        return preemption.notice if preemption else None

    def acknowledge(self) -> bool:
        """POST ``{"StartRequests": [{"EventId": ...}]}`` for the Preempt event seen; ``True``
        when the metadata answered 200. Quiet (logged) on failure: Azure evicts at
        ``NotBefore`` anyway."""
        if self.preemption is None:
            return False
        body = {"StartRequests": [{"EventId": self.preemption.event_id}]}
        try:
            answer = self._request("POST", AZURE_EVENTS_PATH, self.headers, json_body=body)
        except _REQUEST_ERRORS as exc:
            logger.warning("could not approve Azure event %s: %s", self.preemption.event_id,
                           type(exc).__name__)
            return False
        if answer.status_code != 200:
            logger.warning("Azure refused to start event %s: HTTP %d %s",
                           self.preemption.event_id, answer.status_code, answer.text[:200])
            return False
        logger.info("approved Azure Preempt event %s", self.preemption.event_id)
        return True


class GcpMetadataNotices(_MetadataClient):
    """Spot preemption notices from the GCP metadata server (``instance/preempted``).

    - **base_url**: metadata root, e.g. ``http://metadata.google.internal``.
    - **notice_s**: seconds from the flip to ``TRUE`` until the VM is stopped (30).

    The notice, once seen, is kept: its ``action_at`` is when ``TRUE`` was first read plus
    ``notice_s``. Not thread-safe.
    """

    headers = GCP_HEADERS

    def __init__(self, base_url: str, notice_s: float = GCP_NOTICE_S) -> None:
        super().__init__(base_url)
        self.notice_s = notice_s
        self._notice: PreemptionNotice | None = None

    def poll(self) -> PreemptionNotice | None:
        if self._notice is None and self._parsed(GCP_PREEMPTED_PATH, parse_gcp_preempted,
                                                 "instance/preempted"):
            now = utcnow()
            self._notice = PreemptionNotice(action="terminate", received_at=now,
                                            action_at=now + timedelta(seconds=self.notice_s))
        return self._notice


_SOURCES: dict[str, Callable[[str], NoticeSource]] = {
    "aws": AwsImdsNotices, "aliyun": AliyunNotices, "azure": AzureScheduledEvents,
    "gcp": GcpMetadataNotices,
}


def make_notice_source(flavor: str, base_url: str | None) -> NoticeSource:
    """The notice source for ``flavor`` (one of :data:`FLAVORS`).

    - **base_url**: metadata root; ``None`` uses the cloud's link-local default.

    Raises ``ValueError`` for an unknown flavor.
    """
    if flavor == "none":
        return NoNotices()
    if flavor not in _SOURCES:
        raise ValueError(f"metadata flavor {flavor!r} unknown; allowed: {', '.join(FLAVORS)}")
    return _SOURCES[flavor](base_url or DEFAULT_BASE_URLS[flavor])
