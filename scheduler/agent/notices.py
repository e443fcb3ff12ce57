"""Preemption notices from instance metadata (AWS IMDSv2, Alibaba ECS), one class per flavor.

Sources (see ``shared/data/api_examples``):

- AWS ``GET /latest/meta-data/spot/instance-action`` (IMDSv2 token from
  ``PUT /latest/api/token``): 404 when there is no notice, else
  ``{"action": "terminate", "time": "2017-09-18T08:22:00Z"}`` (action ``terminate`` | ``stop``
  | ``hibernate``), about 2 minutes ahead. ``/latest/meta-data/events/recommendations/rebalance``:
  404, or ``{"noticeTime": "2020-10-27T08:22:00Z"}``.
- Alibaba ``GET /latest/meta-data/instance/spot/termination-time``: 404 when there is no
  notice, else ``2020-04-07T17:03:00Z`` (UTC), about 5 minutes ahead.

Unreachable metadata means "no notice": the job keeps running, and the problem is logged once
at warning level until the metadata answers again.
"""

from __future__ import annotations

import json
import logging
import time
from datetime import datetime
from collections.abc import Callable
from typing import Protocol, TypeVar

import httpx

from core.models import PreemptionNotice, utcnow
from core.models.base import ensure_utc
from scheduler.timing import (
    IMDS_TOKEN_RENEW_BEFORE_S,
    IMDS_TOKEN_TTL_S,
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
FLAVORS = ("aws", "aliyun", "none")
DEFAULT_BASE_URLS = {"aws": "http://169.254.169.254", "aliyun": "http://100.100.100.200"}


def parse_utc(text: str) -> datetime:
    """``2017-09-18T08:22:00Z`` (or any ISO-8601 time with an offset) → aware UTC datetime.
    Raises ``ValueError`` when ``text`` is not such a time."""
    value = datetime.fromisoformat(text.strip())
    if value.tzinfo is None:
        raise ValueError(f"time {text!r} has no timezone")
    return ensure_utc(value)


def parse_aws_instance_action(
    body: str | bytes, received_at: datetime | None = None
) -> PreemptionNotice:
    """AWS ``spot/instance-action`` JSON → :class:`PreemptionNotice`.

    Raises ``ValueError`` when the body is not ``{"action": str, "time": ISO-8601 UTC}``.
    """
    try:
        data = json.loads(body)
        action, when = data["action"], data["time"]
    except (ValueError, TypeError, KeyError) as exc:
        raise ValueError(f"spot/instance-action is not {{'action', 'time'}} JSON: {exc}") from None
    if not isinstance(action, str) or not isinstance(when, str):
        raise ValueError("spot/instance-action 'action' and 'time' must be strings")
    return PreemptionNotice(action=action, action_at=parse_utc(when),
                            received_at=received_at or utcnow())


def parse_aws_rebalance(body: str | bytes) -> datetime:
    """AWS ``events/recommendations/rebalance`` JSON → the notice time (aware UTC).
    Raises ``ValueError`` when the body is not ``{"noticeTime": ISO-8601 UTC}``."""
    try:
        return parse_utc(json.loads(body)["noticeTime"])
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


class NoticeSource(Protocol):
    """Something that says whether this instance is about to be reclaimed."""

    def poll(self) -> PreemptionNotice | None:
        """The current notice, or ``None`` (also when the metadata cannot be read). Never raises."""
        ...

    def close(self) -> None: ...


class NoNotices:
    """The ``none`` flavor (on-demand or local machines): there is never a notice."""

    def poll(self) -> PreemptionNotice | None:
        return None

    def close(self) -> None:
        pass


class _MetadataClient:
    """Shared HTTP plumbing: one client, short timeouts, "log once" for an unreachable server."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(timeout=METADATA_TIMEOUT_S)
        self._unreachable_logged = False

    def close(self) -> None:
        self._http.close()

    def _unreachable(self, exc: Exception) -> None:
        if not self._unreachable_logged:
            logger.warning("instance metadata at %s unreachable (%s); assuming no notice",
                           self.base_url, type(exc).__name__)
            self._unreachable_logged = True

    def _reachable(self) -> None:
        if self._unreachable_logged:
            logger.info("instance metadata at %s reachable again", self.base_url)
            self._unreachable_logged = False

    def _get(self, path: str) -> httpx.Response:
        return self._http.get(self.base_url + path)

    def _read(self, path: str) -> str | None:
        """Body of ``path``, ``None`` for 404 or when the metadata cannot be read."""
        try:
            answer = self._get(path)
        except httpx.HTTPError as exc:
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
            return parse(body)
        except ValueError as exc:
            logger.warning("ignoring unreadable %s: %s", what, exc)
            return None


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
        answer = self._http.put(self.base_url + AWS_TOKEN_PATH,
                                headers={AWS_TOKEN_TTL_HEADER: str(IMDS_TOKEN_TTL_S)})
        answer.raise_for_status()
        self._token = answer.text.strip()
        self._token_expires_mono = time.monotonic() + IMDS_TOKEN_TTL_S - IMDS_TOKEN_RENEW_BEFORE_S
        return self._token

    def _get(self, path: str) -> httpx.Response:
        """GET with a valid token; one retry with a fresh token after a 401."""
        if self._token is None or time.monotonic() >= self._token_expires_mono:
            self._fetch_token()
        answer = self._http.get(self.base_url + path, headers={AWS_TOKEN_HEADER: self._token or ""})
        if answer.status_code == 401:
            answer = self._http.get(self.base_url + path,
                                    headers={AWS_TOKEN_HEADER: self._fetch_token()})
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


def make_notice_source(flavor: str, base_url: str | None) -> NoticeSource:
    """The notice source for ``flavor`` (``aws`` | ``aliyun`` | ``none``).

    - **base_url**: metadata root; ``None`` uses the cloud's link-local default.

    Raises ``ValueError`` for an unknown flavor.
    """
    if flavor == "none":
        return NoNotices()
    if flavor not in DEFAULT_BASE_URLS:
        raise ValueError(f"metadata flavor {flavor!r} unknown; allowed: {', '.join(FLAVORS)}")
    url = base_url or DEFAULT_BASE_URLS[flavor]
    return AwsImdsNotices(url) if flavor == "aws" else AliyunNotices(url)
