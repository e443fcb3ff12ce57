"""Alerts to a webhook: budget alerts (:mod:`scheduler.controller.budgets`) and GPU waste
alerts (:mod:`scheduler.controller.waste`), queued by the controller in the store's outbox
(:class:`~scheduler.store.budgets.BudgetOutbox`), emptied by a periodic daemon job that POSTs
each alert as JSON to the daemon's ``budget_webhook`` URL.

Delivery is at-least-once: an alert is moved to an in-flight list while it is posted and only
removed after a 2xx answer (a redirect is not delivery and is not followed). A failed POST puts
the alert at the *back* of the outbox, wrapped as ``{"_retry": {"tries", "next_at",
"first_at"}, "alert": payload}`` with an exponential backoff, so one undeliverable alert never
holds up the others; after ``attempts`` tries or ``max_age_s`` it moves to the dead-letter list
``keys.BUDGET_DEAD`` with a WARNING. A run that died mid-way leaves its in-flight alerts, which
the next run puts back first. One replica delivers at a time: the daemon runs the deliverer as
a :class:`~scheduler.store.leases.LeasedTask` on :data:`DELIVERY_LEASE`.

Payloads (``application/json``). An alert with a ``kind`` is of that kind; one without is a
budget alert (its shape predates the kinds). Budget alerts (de-duplicate on ``(job_id, scope,
threshold)``)::

    {"job_id": "...", "owner": "alice", "scope": "job" | "user", "threshold": 0.8,
     "spent_usd": 8.1, "budget_usd": 10.0, "at": "2026-11-30T19:00:00+00:00",
     "message": "job budget at 80 %: $8.10 of $10.00"}

Waste alerts (de-duplicate on ``(job_id, alert, attempt)``; see
:mod:`scheduler.controller.waste`)::

    {"kind": "waste", "alert": "idle", "job_id": "...", "owner": "alice", "attempt": 2,
     "offer": "aws/us-east-1/us-east-1a/g5.xlarge/spot", "at": "...", "message": "..."}
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

import httpx
import redis

from scheduler.store import keys
from scheduler.store.budgets import BudgetOutbox
from scheduler.timing import (
    BUDGET_WEBHOOK_ATTEMPTS,
    BUDGET_WEBHOOK_BACKOFF_MAX_S,
    BUDGET_WEBHOOK_BACKOFF_S,
    BUDGET_WEBHOOK_BATCH,
    BUDGET_WEBHOOK_MAX_AGE_S,
    BUDGET_WEBHOOK_RUN_S,
    BUDGET_WEBHOOK_TIMEOUT_S,
)

log = logging.getLogger(__name__)

# The lease of the replica delivering (held for BUDGET_WEBHOOK_LEASE_S, renewed every run).
DELIVERY_LEASE = keys.lease("notify:budget-webhook")


class _Rejected(Exception):
    """The receiver answered, but not 2xx (a redirect included)."""


class WebhookDeliverer:
    """Callable apscheduler job: POST the alerts queued in ``outbox`` to ``url``. Never raises
    (a failure is logged and retried in a later run). Returns how many alerts were delivered.

    Each run makes at most ``batch`` POSTs (one per alert, each with the full ``timeout_s``)
    and starts none once less than ``timeout_s`` is left of its ``run_s`` seconds, or after
    :meth:`stop`, so a run ends within ``run_s``; a failed alert is retried after
    ``backoff_s`` × 2^(tries-1) (capped at ``backoff_max_s``) seconds.

    Raises:
        ValueError: ``run_s`` is shorter than ``timeout_s`` (no POST would ever start)."""

    def __init__(self, outbox: BudgetOutbox, url: str, *,
                 timeout_s: float = BUDGET_WEBHOOK_TIMEOUT_S,
                 attempts: int = BUDGET_WEBHOOK_ATTEMPTS, batch: int = BUDGET_WEBHOOK_BATCH,
                 run_s: float = BUDGET_WEBHOOK_RUN_S,
                 backoff_s: float = BUDGET_WEBHOOK_BACKOFF_S,
                 backoff_max_s: float = BUDGET_WEBHOOK_BACKOFF_MAX_S,
                 max_age_s: float = BUDGET_WEBHOOK_MAX_AGE_S) -> None:
        if run_s < timeout_s:
            raise ValueError(f"run_s ({run_s} s) is shorter than one POST's timeout_s "
                             f"({timeout_s} s)")
        self.outbox = outbox
        self.url = url
        self.timeout_s = timeout_s
        self.attempts = attempts
        self.batch = batch
        self.run_s = run_s
        self.backoff_s = backoff_s
        self.backoff_max_s = backoff_max_s
        self.max_age_s = max_age_s
        self._stopping = threading.Event()

    def stop(self) -> None:
        """Start no new POST (the daemon is shutting down); a POST under way ends within
        ``timeout_s``."""
        self._stopping.set()

    def __call__(self) -> int:
        try:
            return self._deliver()
        except redis.RedisError as exc:
            log.warning("alert webhook run cut short, Redis unavailable: %s", exc)
            return 0

    def _deliver(self) -> int:
        self.outbox.recover()  # in-flight alerts of a run that died: back to the front
        deadline = time.monotonic() + self.run_s
        sent = posts = 0
        # Each queued item is looked at once per run: deferred ones rotate to the back.
        remaining = self.outbox.queued()
        with httpx.Client(follow_redirects=False) as client:
            while remaining > 0 and posts < self.batch and not self._stopping.is_set():
                # A POST cut short by the run's end would count a healthy receiver as failed
                # and send it the alert again.
                if deadline - time.monotonic() < self.timeout_s:
                    break
                raw = self.outbox.take()
                if raw is None:
                    break
                remaining -= 1
                alert, retry = _unwrap(raw)
                if retry["next_at"] > time.time():
                    self.outbox.requeue(raw, raw)
                    continue
                posts += 1
                try:
                    resp = client.post(self.url, content=json.dumps(alert, sort_keys=True),
                                       headers={"content-type": "application/json"},
                                       timeout=self.timeout_s)
                    if not resp.is_success:
                        raise _Rejected(f"HTTP {resp.status_code}")
                except (httpx.HTTPError, _Rejected) as exc:
                    self._failed(raw, alert, retry, exc)
                    continue
                self.outbox.done(raw)
                sent += 1
        return sent

    def _failed(self, raw: str, alert: dict[str, Any], retry: dict[str, float],
                exc: Exception) -> None:
        now = time.time()
        tries = int(retry["tries"]) + 1
        first_at = retry["first_at"] or now
        wrapped = {"_retry": {"tries": tries, "first_at": first_at,
                              "next_at": now + min(self.backoff_max_s,
                                                   self.backoff_s * 2 ** (tries - 1))},
                   "alert": alert}
        what = describe(alert)
        if tries >= self.attempts or now - first_at >= self.max_age_s:
            self.outbox.bury(raw, json.dumps(wrapped, sort_keys=True))
            log.warning("alert webhook %s: alert %s given up after %d tries (dead-lettered): %s",
                        _safe(self.url), what, tries, exc)
            return
        self.outbox.requeue(raw, json.dumps(wrapped, sort_keys=True))
        log.info("alert webhook %s: alert %s failed (try %d), retrying later: %s",
                 _safe(self.url), what, tries, exc)


def describe(alert: dict[str, Any]) -> str:
    """An alert's identity for logs: ``job/scope/threshold`` for a budget alert,
    ``job/kind/alert/attempt`` for the other kinds."""
    if "kind" in alert:
        return f"{alert.get('job_id')}/{alert['kind']}/{alert.get('alert')}/{alert.get('attempt')}"
    return f"{alert.get('job_id')}/{alert.get('scope')}/{alert.get('threshold')}"


def _unwrap(raw: str) -> tuple[dict[str, Any], dict[str, float]]:
    """The alert payload and its retry state (fresh for an alert never tried)."""
    item = json.loads(raw)
    if isinstance(item, dict) and "_retry" in item:
        return item["alert"], item["_retry"]
    return item, {"tries": 0, "next_at": 0.0, "first_at": 0.0}


def _safe(url: str) -> str:
    """The URL without its query and credentials (they may carry a token)."""
    parsed = httpx.URL(url)
    return str(parsed.copy_with(query=None, userinfo=b""))
