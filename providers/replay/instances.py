"""The replay cloud's instances, apart from HTTP: launches, terminations, preemptions (and
the offers and prices of its market at the cloud's clock).

:class:`ReplayCloud` holds the market, the market clock and the persistent state. Every change
is saved to ``state.json`` before the call returns. Methods are thread-safe (one lock); the HTTP
server calls them from its request threads and the reclaimer calls :meth:`ReplayCloud.tick`.
"""

from __future__ import annotations

import logging
import os
import secrets
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from threading import RLock
from typing import Any

from pydantic import Field, ValidationError

from providers.replay import procs
from providers.replay.market import Notice, ReplayMarket, default_notice
from providers.replay.notice_metadata import preempt_event_id
from providers.replay.state import InstanceRecord, StateStore
from core.models import (
    InstanceState,
    Market,
    OfferKey,
    PreemptionNotice,
    StrictModel,
    format_validation_error,
    utcnow,
)

DEFAULT_AGENT_COMMAND = (sys.executable, "-m", "scheduler.agent")
# Grace between SIGTERM and SIGKILL when an instance is terminated (a VM's shutdown).
TERMINATE_GRACE_S = 5.0
# Terminated instances stay visible to describe this long (AWS shows them about an hour).
DESCRIBE_TERMINATED_S = 3600.0
# Records (and their client tokens) are forgotten this long after termination.
RETAIN_TERMINATED_S = 86400.0

logger = logging.getLogger(__name__)

REASON_PREEMPTED = "preempted"
REASON_USER = "user-terminated"
REASON_CLOUD_SHUTDOWN = "cloud-shutdown"


# Host variables an instance inherits (see ReplayCloud._agent_env).
_HOST_ENV = frozenset({"PATH", "HOME", "LANG", "TZ", "TMPDIR", "PYTHONPATH", "VIRTUAL_ENV",
                       "SSL_CERT_FILE", "SSL_CERT_DIR"})


class CloudError(Exception):
    """A request the cloud refuses: ``status`` is the HTTP status, ``code`` the AWS-style code."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


class LaunchBody(StrictModel):
    """``POST /instances`` body."""

    offer: OfferKey
    client_token: str = Field(min_length=1, max_length=64)
    tags: dict[str, str] = Field(default_factory=dict)
    agent_env: dict[str, str] = Field(default_factory=dict)


def new_instance_id() -> str:
    """A fresh id in the replay cloud's shape, ``r-`` + 12 hex digits."""
    return f"r-{secrets.token_hex(6)}"


class ReplayCloud:
    """A fake cloud over a :class:`ReplayMarket`, state kept in ``state_dir``.

    - **agent_command**: argv started on each launch (default ``python -m scheduler.agent``).
    - **base_url**: how agents reach this cloud (``http://127.0.0.1:PORT``); set once bound.
    - **now**: wall clock (aware UTC), injectable for tests.
    """

    def __init__(self, market: ReplayMarket, state_dir: Path,
                 agent_command: Sequence[str] | None = None,
                 now: Callable[[], datetime] = utcnow) -> None:
        self.market = market
        self.state_dir = state_dir
        self.agent_command = list(agent_command or DEFAULT_AGENT_COMMAND)
        self.now = now
        self.base_url = ""
        self.lock = RLock()
        self.store = StateStore.open(state_dir, market.path)
        self.clock = market.clock(self.store.data.epoch_wall)
        self._children: dict[str, subprocess.Popen[bytes]] = {}
        self._tick_failed: set[str] = set()

    # ----- market ---------------------------------------------------------------------------
    def market_s(self) -> float:
        """Market seconds now (see :class:`providers.replay.timeline.MarketClock`)."""
        return self.clock.market_s(self.now())

    def health(self) -> dict[str, Any]:
        """``GET /health`` body: market, pid, state dir, url, epoch and market time."""
        return {
            "status": "ok", "market": self.market.name, "pid": os.getpid(),
            "state_dir": str(self.state_dir), "url": self.base_url,
            "epoch_wall": self.clock.epoch_wall.isoformat(), "market_time_s": self.market_s(),
            "time_scale": self.market.time_scale,
        }

    def offers(self) -> list[dict[str, Any]]:
        """Offers rentable now as JSON dicts (spot offers whose trace reads 0 left out), each
        with its ``capacity`` left given the instances not yet terminated."""
        now = self.now()
        with self.lock:
            running = self.running_counts()
        return [o.model_dump(mode="json")
                for o in self.market.offers_at(self.clock.market_s(now), now, running)]

    def running_counts(self) -> Counter[OfferKey]:
        """Offer key → its instances not yet terminated (pending, running, shutting down:
        each holds a slot of the offer's capacity until it is gone). Caller holds the lock."""
        return Counter(rec.offer for rec in self.store.data.instances.values()
                       if rec.state is not InstanceState.TERMINATED)

    def prices(self, since: datetime | None) -> list[dict[str, Any]]:
        """Price observations in the wall window ``(since, now]`` as JSON dicts."""
        return [p.model_dump(mode="json")
                for p in self.market.price_observations(self.clock, since, self.now())]

    def unavailable_reason(self, key: OfferKey) -> str | None:
        """Why ``key`` cannot be launched now, or ``None``."""
        return self.market.unavailable_reason(key, self.market_s())

    def notice_of(self, rec: InstanceRecord) -> Notice:
        """How ``rec`` is warned before a reclaim (its offer's notice; ``aws`` style with the
        market's ``notice_seconds`` for an offer the market no longer lists)."""
        offer = self.market.find(rec.offer)
        return (self.market.notice_of(offer) if offer is not None
                else default_notice(rec.provider, self.market.notice_seconds))

    def notice_style(self, rec: InstanceRecord) -> str:
        """The metadata flavor ``rec`` serves and its agent reads (``aws`` | ``aliyun`` |
        ``azure`` | ``gcp`` | ``none``)."""
        return self.notice_of(rec).style

    # ----- instances ------------------------------------------------------------------------
    def _alive(self, rec: InstanceRecord) -> bool:
        child = self._children.get(rec.id)
        if child is not None and child.poll() is not None:
            return False
        return procs.is_alive(rec.pid, rec.pid_marker)

    def view(self, rec: InstanceRecord) -> dict[str, Any]:
        """An instance as the API shows it: :class:`Instance` fields + ``pid``, ``pid_alive``,
        ``work_dir``, ``terminated_at``, ``notice_style`` (its metadata flavor),
        ``notice_approved_at`` (when its agent approved the preemption, Azure style) and
        ``boot_failed`` (a launch that never boots: no agent will start)."""
        out = rec.to_instance().model_dump(mode="json")
        out.update(pid=rec.pid, pid_alive=self._alive(rec), work_dir=rec.work_dir,
                   terminated_at=rec.terminated_at.isoformat() if rec.terminated_at else None,
                   notice_style=self.notice_style(rec),
                   notice_approved_at=rec.notice_approved_at.isoformat()
                   if rec.notice_approved_at else None, boot_failed=rec.boot_failed)
        return out

    def launch(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """Launch (or return the instance of a known client token). Returns (HTTP status, view).

        A launch among the offer market's first ``boot_failures`` is accepted (201) but never
        boots: the instance stays ``pending`` without an agent until terminated.

        Raises ``CloudError`` 400 on a bad body, an unknown offer or a token reused for another
        offer; 409 ``InsufficientInstanceCapacity`` when the spot trace reads 0 now or the
        offer's capacity (trace count, ``instances``) is taken by instances not yet terminated.
        """
        try:
            req = LaunchBody.model_validate(body)
        except ValidationError as exc:
            raise CloudError(400, "InvalidParameterValue", format_validation_error(exc)) from None
        with self.lock:
            data = self.store.data
            known = data.tokens.get(req.client_token)
            if known and known in data.instances:
                rec = data.instances[known]
                if rec.offer != req.offer:
                    raise CloudError(400, "IdempotentParameterMismatch",
                                     f"client token {req.client_token!r} was used for "
                                     f"{rec.offer.series()}")
                if not rec.state.is_gone() and not rec.boot_failed and not self._alive(rec):
                    self._start_agent(rec, req.agent_env)
                return 200, self.view(rec)
            offer = self.market.find(req.offer)
            if offer is None:
                raise CloudError(400, "InvalidParameterValue",
                                 f"offer: no offer {req.offer.series()} in market "
                                 f"{self.market.name!r}")
            reason = self.unavailable_reason(req.offer) or self._full_reason(req.offer)
            if reason is not None:
                raise CloudError(409, "InsufficientInstanceCapacity", reason)
            series = req.offer.series()
            launched_before = data.launches.get(series, 0)
            data.launches[series] = launched_before + 1
            instance_id = new_instance_id()
            rec = InstanceRecord(
                id=instance_id, provider=req.offer.provider, offer=req.offer,
                client_token=req.client_token, state=InstanceState.PENDING,
                launched_at=self.now(), tags=req.tags,
                work_dir=str(self.state_dir / "instances" / instance_id),
                boot_failed=launched_before < offer.boot_failures,
            )
            data.instances[instance_id] = rec
            data.tokens[req.client_token] = instance_id
            # Saved before the agent starts: a crash from here on is repaired by a retried
            # launch with the same token (see _start_agent).
            self.store.save()
            if not rec.boot_failed:
                self._start_agent(rec, req.agent_env)
            return 201, self.view(rec)

    def _full_reason(self, key: OfferKey) -> str | None:
        """Why ``key`` has no capacity left now (caller holds the lock), or ``None``."""
        running = self.running_counts()[key]
        left = self.market.capacity_left(key, self.market_s(), running)
        if left is None or left > 0:
            return None
        return (f"no capacity left: {running} instance(s) of {key.series()} not yet "
                "terminated fill the offer")

    def _agent_env(self, rec: InstanceRecord, agent_env: dict[str, str]) -> dict[str, str]:
        # An instance is a fresh machine: it gets only what any machine has (paths, locale,
        # the Python it runs on), never the scheduler's own settings or credentials.
        env = {k: v for k, v in os.environ.items()
               if k in _HOST_ENV or k.startswith(("LC_", "OPENBLAS_"))}
        env.update(agent_env)
        offer = self.market.find(rec.offer)
        env.update(
            # How fast this machine is, for a job that imitates it (after agent_env: the
            # market's, not the daemon's, to say).
            SCHED_REPLAY_SPEED=f"{offer.speed if offer is not None else 1.0:g}",
            GA_INSTANCE_ID=rec.id,
            GA_METADATA_URL=f"{self.base_url}/meta/{rec.id}",
            # Each imitated cloud's agent watches its own cloud's notice path.
            GA_METADATA_FLAVOR=self.notice_style(rec),
            GA_WORK_DIR=rec.work_dir,
        )
        return env

    def _start_agent(self, rec: InstanceRecord, agent_env: dict[str, str]) -> None:
        """Start the agent of ``rec`` (caller holds the lock), adopting one that a crashed cloud
        started without recording it. Saves the pid."""
        work_dir = Path(rec.work_dir)
        adopted = procs.find_leader_in_dir(work_dir) if work_dir.exists() else None
        if adopted is not None:
            rec.pid, rec.pid_marker = adopted, procs.start_marker(adopted)
        else:
            child = procs.spawn_agent(self.agent_command, work_dir,
                                      self._agent_env(rec, agent_env), work_dir / "agent.log")
            self._children[rec.id] = child
            rec.pid, rec.pid_marker = child.pid, procs.start_marker(child.pid)
            rec.agent_starts += 1
        rec.state = InstanceState.RUNNING
        self.store.save()

    def describe(self, tags: dict[str, str] | None = None) -> list[dict[str, Any]]:
        """Instances carrying all ``tags``; terminated ones for ``DESCRIBE_TERMINATED_S``."""
        cutoff = self.now() - timedelta(seconds=DESCRIBE_TERMINATED_S)
        with self.lock:
            out = []
            for rec in self.store.data.instances.values():
                if tags and any(rec.tags.get(k) != v for k, v in tags.items()):
                    continue
                if rec.terminated_at is not None and rec.terminated_at < cutoff:
                    continue
                out.append(self.view(rec))
            return out

    def get(self, instance_id: str) -> InstanceRecord | None:
        """The record of ``instance_id``, or ``None`` when unknown (or forgotten)."""
        with self.lock:
            return self.store.data.instances.get(instance_id)

    def terminate(self, instance_id: str) -> None:
        """Begin terminating: SIGTERM to the agent's group, state ``shutting-down``; the
        reclaimer finishes it (SIGKILL after ``TERMINATE_GRACE_S``). Unknown or already
        terminated ids are a quiet no-op."""
        with self.lock:
            rec = self.store.data.instances.get(instance_id)
            if rec is None or rec.state.is_gone():
                return
            rec.state = InstanceState.SHUTTING_DOWN
            rec.shutdown_at = self.now()
            self.store.save()
            procs.signal_group(rec.pid, signal.SIGTERM, rec.pid_marker)

    def _mark_terminated(self, rec: InstanceRecord, reason: str) -> None:
        procs.signal_group(rec.pid, signal.SIGKILL, rec.pid_marker)
        rec.state = InstanceState.TERMINATED
        rec.terminated_reason = rec.terminated_reason or reason
        rec.terminated_at = self.now()
        child = self._children.pop(rec.id, None)
        if child is not None:
            child.poll()

    # ----- background -----------------------------------------------------------------------
    def tick(self) -> None:
        """One reclaimer pass: issue notices for spot instances whose capacity is gone (trace
        at 0: all of the offer's; count below the instances there: the excess, see
        :meth:`_excess`), reclaim the ones whose notice time passed, finish shutdowns, reap
        children, forget old records.
        """
        now = self.now()
        market_s = self.clock.market_s(now)
        changed = False
        with self.lock:
            for child in list(self._children.values()):
                child.poll()
            data = self.store.data
            excess = self._excess(market_s)
            for rec in list(data.instances.values()):
                try:
                    changed |= self._tick_one(rec, now, market_s, rec.id in excess)
                except Exception:
                    # One broken record must not stop the reclaimer for every other instance;
                    # logged once per record, as the pass repeats every second.
                    if rec.id not in self._tick_failed:
                        self._tick_failed.add(rec.id)
                        logger.exception("replay instance %s skipped by the reclaimer", rec.id)
            horizon = now - timedelta(seconds=RETAIN_TERMINATED_S)
            for rec in list(data.instances.values()):
                if rec.terminated_at is not None and rec.terminated_at < horizon:
                    del data.instances[rec.id]
                    data.tokens.pop(rec.client_token, None)
                    changed = True
            if changed:
                self.store.save()

    def _excess(self, market_s: float) -> set[str]:
        """Ids of spot instances to warn now because their offer's capacity (trace count,
        ``instances``) dropped below the instances not yet terminated there (caller holds the
        lock). Those already warned or shutting down count toward the excess; the rest are
        chosen newest launched first (ties: the larger id), so the oldest keep running."""
        by_key: dict[OfferKey, list[InstanceRecord]] = {}
        for rec in self.store.data.instances.values():
            if rec.offer.market is Market.SPOT and rec.state is not InstanceState.TERMINATED:
                by_key.setdefault(rec.offer, []).append(rec)
        out: set[str] = set()
        for key, recs in by_key.items():
            limit = self.market.capacity_limit(key, market_s)
            if limit is None or len(recs) <= limit:
                continue
            staying = [r for r in recs if r.notice is None and not r.state.is_gone()]
            need = len(recs) - limit - (len(recs) - len(staying))
            staying.sort(key=lambda r: (r.launched_at or self.now(), r.id), reverse=True)
            out.update(r.id for r in staying[:max(0, need)])
        return out

    def _tick_one(self, rec: InstanceRecord, now: datetime, market_s: float,
                  excess: bool = False) -> bool:
        if rec.state is InstanceState.TERMINATED:
            return False
        if rec.state is InstanceState.SHUTTING_DOWN:
            if not procs.group_alive(rec.pid, rec.pid_marker):
                self._mark_terminated(rec, REASON_USER)
                return True
            if rec.shutdown_at and (now - rec.shutdown_at).total_seconds() > TERMINATE_GRACE_S:
                procs.signal_group(rec.pid, signal.SIGKILL, rec.pid_marker)
            return False
        if rec.notice is not None:
            if now >= rec.notice.action_at:
                self._mark_terminated(rec, REASON_PREEMPTED)
                return True
            return False
        if rec.offer.market is Market.SPOT and (
                excess or self.unavailable_reason(rec.offer) is not None):
            notice = self.notice_of(rec)
            if notice.style == "none":
                # No warning at all: the instance just stops, the agent and job with it.
                self._mark_terminated(rec, REASON_PREEMPTED)
                return True
            rec.notice = PreemptionNotice(
                action="terminate", received_at=now,
                action_at=now + timedelta(seconds=notice.seconds),
            )
            return True
        return False

    def approve_notice(self, instance_id: str, event_id: str) -> bool:
        """Record an agent's approval of its pending preemption (Azure's ``StartRequests``);
        ``False`` when ``event_id`` is not that instance's pending Preempt event. The reclaim
        keeps its time: a replayed instance is only ever reclaimed at the notice's end."""
        with self.lock:
            rec = self.store.data.instances.get(instance_id)
            if rec is None or rec.notice is None or rec.state.is_gone() \
                    or event_id != preempt_event_id(rec.id):
                return False
            if rec.notice_approved_at is None:
                rec.notice_approved_at = self.now()
                self.store.save()
            return True

    def live_process_count(self) -> int:
        """Instances whose agent process group still runs (the idle-exit check)."""
        with self.lock:
            return sum(1 for rec in self.store.data.instances.values()
                       if rec.state is not InstanceState.TERMINATED
                       and (self._alive(rec)
                            or procs.group_alive(rec.pid, rec.pid_marker)))

    def shutdown_all(self, grace_s: float = TERMINATE_GRACE_S) -> None:
        """Terminate every instance (SIGTERM, wait up to ``grace_s``, SIGKILL), reason
        ``cloud-shutdown``; blocks until done."""
        with self.lock:
            live = [r for r in self.store.data.instances.values()
                    if r.state is not InstanceState.TERMINATED]
            for rec in live:
                procs.signal_group(rec.pid, signal.SIGTERM, rec.pid_marker)
        deadline = self.now() + timedelta(seconds=grace_s)
        while (self.now() < deadline
               and any(procs.group_alive(r.pid, r.pid_marker) for r in live)):
            time.sleep(0.1)
        with self.lock:
            for rec in live:
                self._mark_terminated(rec, REASON_CLOUD_SHUTDOWN)
            self.store.save()

