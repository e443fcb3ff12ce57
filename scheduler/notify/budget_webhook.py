"""Budget alerts to a webhook: a Redis outbox filled by the controller, emptied by a periodic
daemon job that POSTs each alert as JSON.

Delivery is at-least-once: an alert is moved to an in-flight list while it is posted and only
removed after a 2xx answer; a failed POST goes back to the outbox for the next run, and a run
that died mid-way leaves its in-flight alerts, which the next run (holding the delivery lease)
puts back first. Receivers should de-duplicate on ``(job_id, scope, threshold)``.

Payload (``application/json``)::

    {"job_id": "...", "owner": "alice", "scope": "job" | "user", "threshold": 0.8,
     "spent_usd": 8.1, "budget_usd": 10.0, "at": "2026-11-30T19:00:00+00:00",
     "message": "job budget at 80 %: $8.10 of $10.00"}
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from typing import Any

import httpx
import redis
from tenacity import (
    retry,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
)

from scheduler.store import keys
from scheduler.timing import (
    BUDGET_WEBHOOK_ATTEMPTS,
    BUDGET_WEBHOOK_BATCH,
    BUDGET_WEBHOOK_LEASE_S,
    BUDGET_WEBHOOK_TIMEOUT_S,
)

log = logging.getLogger(__name__)

_LEASE = keys.lease("notify:budget-webhook")


class BudgetOutbox:
    """The queue of budget alerts waiting for the webhook (a Redis list)."""

    def __init__(self, client: redis.Redis) -> None:
        self._r = client

    def push(self, payload: dict[str, Any]) -> None:
        self._r.rpush(keys.BUDGET_OUTBOX, json.dumps(payload, sort_keys=True))

    def pending(self) -> int:
        return int(self._r.llen(keys.BUDGET_OUTBOX)) + int(self._r.llen(keys.BUDGET_INFLIGHT))


class _Rejected(Exception):
    """The receiver answered, but not 2xx."""


class WebhookDeliverer:
    """Callable apscheduler job: POST queued budget alerts to ``url``. Never raises (a failure
    is logged and retried next run). Returns how many alerts were delivered."""

    def __init__(self, client: redis.Redis, url: str, *,
                 timeout_s: float = BUDGET_WEBHOOK_TIMEOUT_S,
                 attempts: int = BUDGET_WEBHOOK_ATTEMPTS, batch: int = BUDGET_WEBHOOK_BATCH,
                 lease_s: float = BUDGET_WEBHOOK_LEASE_S, first_wait_s: float = 0.2) -> None:
        self._r = client
        self.url = url
        self.timeout_s = timeout_s
        self.batch = batch
        self.lease_s = lease_s
        self._post = retry(
            stop=stop_after_attempt(attempts),
            wait=wait_exponential(multiplier=first_wait_s, max=2.0),
            retry=retry_if_exception_type((httpx.HTTPError, _Rejected)),
            reraise=True,
        )(self._post_once)

    def _post_once(self, client: httpx.Client, body: str) -> None:
        resp = client.post(self.url, content=body,
                           headers={"content-type": "application/json"})
        if not resp.is_success:
            raise _Rejected(f"HTTP {resp.status_code}")

    def __call__(self) -> int:
        token = secrets.token_hex(8)
        try:
            if not self._r.set(_LEASE, token, nx=True, px=int(self.lease_s * 1000)):
                return 0  # another replica is delivering
            try:
                return self._deliver()
            finally:
                if self._r.get(_LEASE) == token:
                    self._r.delete(_LEASE)
        except redis.RedisError as exc:
            log.warning("budget webhook run skipped, Redis unavailable: %s", exc)
            return 0

    def _deliver(self) -> int:
        # In-flight alerts of a run that died: back to the front of the queue.
        while self._r.lmove(keys.BUDGET_INFLIGHT, keys.BUDGET_OUTBOX, "RIGHT", "LEFT"):
            pass
        started = time.monotonic()
        sent = 0
        with httpx.Client(timeout=self.timeout_s) as client:
            while sent < self.batch and time.monotonic() - started < self.lease_s / 2:
                body = self._r.lmove(keys.BUDGET_OUTBOX, keys.BUDGET_INFLIGHT, "LEFT", "RIGHT")
                if body is None:
                    break
                try:
                    self._post(client, body)
                except (httpx.HTTPError, _Rejected) as exc:
                    with self._r.pipeline(transaction=True) as pipe:
                        pipe.lrem(keys.BUDGET_INFLIGHT, 1, body)
                        pipe.lpush(keys.BUDGET_OUTBOX, body)
                        pipe.execute()
                    log.warning("budget webhook %s failed, retrying next run: %s",
                                _safe(self.url), exc)
                    break  # the receiver is down: do not hammer it
                self._r.lrem(keys.BUDGET_INFLIGHT, 1, body)
                sent += 1
        return sent


def _safe(url: str) -> str:
    """The URL without its query and credentials (they may carry a token)."""
    parsed = httpx.URL(url)
    return str(parsed.copy_with(query=None, userinfo=b""))
