"""The team's own machines as their operators see them (``GET /v1/fleet``, ``schedctl fleet``):
hosts, their GPUs and slots, the jobs on them; drain and undrain.

The hosts are those of the configured ``kind: fleet`` adapters
(:class:`providers.fleet.provider.FleetProvider`, from the daemon's provider registry); each
is asked over SSH what GPUs it has (``nvidia-smi``, else its configured ``gpus``). A listing
answers within :data:`ANSWER_WAIT_S` whatever the hosts do: one ask per host is under way at
a time, shared by the listings that come meanwhile, and an answer younger than
:data:`ANSWER_FRESH_S` serves them without asking again; a host that has not answered in
time is a row marked not reachable, with its last answer's GPUs and its last-seen time (so a
hung host cannot hold the API's worker threads). Claims,
drains and the last SSH contact come from each fleet's slot ledger
(:class:`scheduler.store.fleet.FleetLedger`); the job holding a claim is the active job whose
current placement is that instance.

A drained host takes no new claims and its instances get a preemption notice (the adapter's
``describe``), so the controller checkpoints and moves their jobs as after a spot reclaim;
undrain lists its free slots again (:mod:`providers.fleet`).
"""

from __future__ import annotations

import asyncio
import threading
import time
import weakref
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from core.models import utcnow
from providers.errors import ProviderError
from providers.fleet.gpus import HostGpu, configured_gpus
from providers.fleet.provider import FleetProvider
from providers.fleet.settings import HostSettings
from scheduler.controller.context import ProviderRegistry
from scheduler.store import Store
from scheduler.store.fleet import Claim, FleetLedger
from scheduler.store.users import Principal

# Hosts of one fleet asked over SSH at once (one ask per host at a time).
MAX_PARALLEL_HOSTS = 16
# Seconds a listing waits for the hosts' answers at most.
ANSWER_WAIT_S = 3.0
# Seconds a host's answer serves the listings after it without asking the host again.
ANSWER_FRESH_S = 5.0
# Host names an unknown-host error lists at most.
NAMES_SHOWN = 20


def _shown(names: list[str]) -> str:
    return ", ".join(names[:NAMES_SHOWN]) + (" ..." if len(names) > NAMES_SHOWN else "")


class FleetHostNotFound(LookupError):
    """No configured fleet has a host of that name (or not the fleet named: ``fleets`` are
    the fleets there are, given when the one named is not among them)."""

    def __init__(self, host: str, known: list[str], fleet: str | None = None,
                 fleets: list[str] | None = None) -> None:
        if fleets is not None and fleet is not None:
            where = (f"no fleet {fleet!r} (fleets: {_shown(fleets)})" if fleets else
                     f"no fleet {fleet!r} (no kind: fleet provider configured)")
            super().__init__(where)
        else:
            super().__init__(f"no fleet host {host!r}" + (
                f" (hosts: {_shown(known)})" if known else " (no kind: fleet provider configured)"))
        self.host = host


class AmbiguousHost(ValueError):
    """Several fleets have a host of that name; the caller must name the fleet."""


def fleet_adapters(providers: ProviderRegistry | None) -> list[FleetProvider]:
    """The ``kind: fleet`` adapters of the daemon's ``providers`` (``None``: none)."""
    return [p for p in (providers.adapters() if providers else ()) if isinstance(p, FleetProvider)]


def owned_provider_names(providers: ProviderRegistry | None) -> frozenset[str]:
    """Provider names whose offers are the team's own machines: those the ``kind: fleet``
    adapters serve. What cost reports count as owned, not rented."""
    return frozenset(name for p in fleet_adapters(providers) for name in p.provider_names)


def _ledger(store: Store, fleet: FleetProvider) -> FleetLedger:
    return fleet.ledger if fleet.ledger is not None else FleetLedger(store.redis, fleet.name)


@dataclass(frozen=True)
class _Answer:
    """One host's answer: its GPUs (as configured when it could not be asked), whether it
    answered over SSH, the error (SSH's, or its GPUs' when it answered), when (monotonic)."""

    gpus: list[HostGpu] | None
    reachable: bool
    error: str | None
    at: float


def _ask(fleet: FleetProvider, host: HostSettings) -> _Answer:
    try:
        gpus, error = fleet.gpu_report(host)
        return _Answer(gpus, True, error, time.monotonic())
    except ProviderError as exc:
        return _Answer(configured_gpus(host.gpus) if host.gpus else None, False, str(exc),
                       time.monotonic())


class _FleetAsks:
    """One fleet's latest answer per host and the one ask under way per host."""

    def __init__(self, hosts: int) -> None:
        self.lock = threading.RLock()  # a finished ask's callback may run in ask()
        self.answers: dict[str, _Answer] = {}
        self.pending: dict[str, Future[_Answer]] = {}
        self.pool = ThreadPoolExecutor(max_workers=min(MAX_PARALLEL_HOSTS, max(1, hosts)),
                                       thread_name_prefix="fleet-list")

    def ask(self, fleet: FleetProvider, host: HostSettings) -> _Answer | Future[_Answer]:
        """The fresh answer, else the ask under way (started here when none is)."""
        with self.lock:
            answer = self.answers.get(host.name)
            if answer is not None and time.monotonic() - answer.at < ANSWER_FRESH_S:
                return answer
            pending = self.pending.get(host.name)
            if pending is None:
                pending = self.pool.submit(_ask, fleet, host)
                self.pending[host.name] = pending
                pending.add_done_callback(lambda done: self._answered(host.name, done))
            return pending

    def _answered(self, host: str, done: Future[_Answer]) -> None:
        with self.lock:
            self.pending.pop(host, None)
            if done.exception() is None:
                self.answers[host] = done.result()

    def late(self, host: HostSettings) -> _Answer:
        """What a listing shows of a host that did not answer in time."""
        with self.lock:
            last = self.answers.get(host.name)
        gpus = last.gpus if last else configured_gpus(host.gpus) if host.gpus else None
        return _Answer(gpus, False, f"no answer within {ANSWER_WAIT_S:g} s (still asked)",
                       time.monotonic())


_asks: weakref.WeakKeyDictionary[FleetProvider, _FleetAsks] = weakref.WeakKeyDictionary()
_asks_lock = threading.Lock()


Targets = list[tuple[FleetProvider, HostSettings]]
_Begun = list[tuple[_FleetAsks, "_Answer | Future[_Answer]"]]


def _begin(targets: Targets) -> _Begun:
    """Each target's fresh answer or the ask under way for it (module docstring)."""
    with _asks_lock:
        asks = [_asks.setdefault(f, _FleetAsks(len(f.settings.hosts))) for f, _ in targets]
    return [(a, a.ask(f, h)) for a, (f, h) in zip(asks, targets, strict=True)]


def _answers(targets: Targets) -> list[_Answer]:
    """Each target host's answer, all within :data:`ANSWER_WAIT_S`, waiting in this thread."""
    deadline = time.monotonic() + ANSWER_WAIT_S
    out = []
    for (asks, answer), (_, host) in zip(_begin(targets), targets, strict=True):
        if isinstance(answer, Future):
            try:
                answer = answer.result(timeout=max(0.0, deadline - time.monotonic()))
            except FutureTimeout:
                answer = asks.late(host)
        out.append(answer)
    return out


async def _answers_awaited(targets: Targets) -> list[_Answer]:
    """As :func:`_answers`, awaited: no thread waits for a slow host."""
    begun = _begin(targets)
    pending = [asyncio.wrap_future(a) for _, a in begun if isinstance(a, Future)]
    if pending:
        await asyncio.wait(pending, timeout=ANSWER_WAIT_S)
    out = []
    for (asks, answer), (_, host) in zip(begun, targets, strict=True):
        if isinstance(answer, Future):
            answer = answer.result() if answer.done() and answer.exception() is None \
                else asks.late(host)
        out.append(answer)
    return out


def _gpu_groups(gpus: list[HostGpu]) -> list[dict[str, Any]]:
    groups: dict[tuple[str, float], int] = {}
    for g in gpus:
        groups[(g.model, g.vram_gib)] = groups.get((g.model, g.vram_gib), 0) + 1
    return [{"model": model, "count": count, "vram_gib": vram}
            for (model, vram), count in sorted(groups.items())]


@dataclass(frozen=True)
class _LedgerState:
    """One fleet's ledger as read once per listing."""

    claims: dict[str, Claim]
    drained: dict[str, datetime]
    seen: dict[str, datetime]

    @classmethod
    def read(cls, ledger: FleetLedger) -> _LedgerState:
        return cls(ledger.claims(), ledger.drained(), ledger.last_seen())


def _host_row(fleet: FleetProvider, host: HostSettings, answer: _Answer,
              ledger: _LedgerState, jobs_by_instance: dict[str, str],
              now: datetime) -> dict[str, Any]:
    drained, seen = ledger.drained, ledger.seen
    gpus, error = answer.gpus, answer.error
    mine = sorted(((iid, c) for iid, c in ledger.claims.items() if c.host == host.name),
                  key=lambda item: item[0])
    used = {i for _, c in mine for i in c.gpus}
    foreign = {g.index for g in gpus or () if g.foreign and g.index not in used}
    total = len(gpus or ())
    last_seen = seen.get(host.name)
    return {
        "fleet": fleet.name, "host": host.name, "address": host.address, "port": host.port,
        "user": host.user, "labels": host.labels.model_dump(exclude_none=True),
        "region": host.site, "zone": host.rack,
        "gpus": _gpu_groups(gpus or []), "gpu_count": total,
        "gpus_from": None if not gpus else "configured" if not answer.reachable
        or gpus[0].uuid is None else "nvidia-smi",
        "gpus_used": len(used), "gpus_busy_elsewhere": len(foreign),
        "gpus_free": max(0, total - len(used) - len(foreign)),
        "jobs": [{"instance_id": iid, "job": jobs_by_instance.get(iid), "gpus": list(c.gpus),
                  "since": c.claimed_at.isoformat()} for iid, c in mine],
        "drained": host.name in drained,
        "drained_at": drained[host.name].isoformat() if host.name in drained else None,
        "reachable": answer.reachable, "error": error,
        "last_seen_at": last_seen.isoformat() if last_seen else None,
        "last_seen_age_s": max(0.0, (now - last_seen).total_seconds()) if last_seen else None,
        "cost_per_gpu_hour_usd": host.cost_per_gpu_hour_usd,
    }


def as_seen_by(store: Store, rows: list[dict[str, Any]],
               principal: Principal) -> list[dict[str, Any]]:
    """``rows`` (of :func:`hosts`) as ``principal`` may see them: an admin everything; a
    plain user the hosts' GPUs and occupancy, the ids of their own jobs only (another's claim
    shows its GPUs and time, with ``instance_id`` and ``job`` ``None``), and no SSH address,
    port or login (``None``)."""
    if principal.is_admin:
        return rows
    ids = {j["job"] for r in rows for j in r["jobs"] if j.get("job")}
    owners = {i: job.spec.owner for i, job in store.jobs.get_many(list(ids)).items()}
    seen = []
    for row in rows:
        jobs = [j if j.get("job") and owners.get(j["job"]) == principal.user
                else {**j, "instance_id": None, "job": None} for j in row["jobs"]]
        seen.append({**row, "address": None, "port": None, "user": None, "jobs": jobs})
    return seen


def _jobs_by_instance(store: Store, instance_ids: set[str]) -> dict[str, str]:
    """``{instance id: job id}`` of the active jobs whose current placement is one of them."""
    if not instance_ids:
        return {}
    jobs = store.jobs.get_many(store.jobs.active_ids())
    return {j.placement.instance_id: j.id for j in jobs.values()
            if j.placement is not None and j.placement.instance_id in instance_ids}


def hosts(store: Store, providers: ProviderRegistry | None) -> list[dict[str, Any]]:
    """One row per host of every fleet of ``providers``, in config order::

        {fleet, host, address, port, user, labels: {site?, rack?}, region, zone,
         gpus: [{model, count, vram_gib}], gpu_count, gpus_from: nvidia-smi|configured|None,
         gpus_used, gpus_busy_elsewhere, gpus_free, jobs: [{instance_id, job, gpus, since}],
         drained, drained_at, reachable, error, last_seen_at, last_seen_age_s,
         cost_per_gpu_hour_usd}

    GPU counts are whole GPUs: used = claimed by an instance of gpu-arbiter, busy elsewhere
    = running a process gpu-arbiter did not start, free = the rest (offered unless the
    host is drained or unreachable). Times are ISO UTC, ages seconds. ``job`` is ``None``
    for a claim no active job holds (a launch in progress, or one being cleaned up).
    Raises ``redis.RedisError``; a host that does not answer (within :data:`ANSWER_WAIT_S`)
    is a row with ``reachable`` false and its ``error``, its GPUs from its last answer or as
    configured (none when not configured); a host that answers but whose ``nvidia-smi``
    failed is reachable with that ``error`` and no GPUs."""
    return _rows(store, _all_hosts(providers))


async def hosts_awaited(store: Store, providers: ProviderRegistry | None
                        ) -> list[dict[str, Any]]:
    """As :func:`hosts`, for an event loop: the hosts' answers are awaited (a slow host
    holds no worker thread) and Redis is read in a thread."""
    targets = _all_hosts(providers)
    answers = await _answers_awaited(targets)
    return await asyncio.to_thread(_rows, store, targets, answers)


def _all_hosts(providers: ProviderRegistry | None) -> Targets:
    return [(f, h) for f in fleet_adapters(providers) for h in f.settings.hosts]


def _rows(store: Store, targets: Targets, answers: list[_Answer] | None = None
          ) -> list[dict[str, Any]]:
    if not targets:
        return []
    answers = _answers(targets) if answers is None else answers
    state = {f.name: _LedgerState.read(_ledger(store, f)) for f, _ in targets}
    jobs = _jobs_by_instance(store, {iid for s in state.values() for iid in s.claims})
    now = utcnow()
    return [_host_row(f, h, answer, state[f.name], jobs, now)
            for (f, h), answer in zip(targets, answers, strict=True)]


def _find(providers: ProviderRegistry | None, host: str,
          fleet: str | None) -> tuple[FleetProvider, HostSettings]:
    """The fleet adapter and host settings of ``host`` (in ``fleet`` when given). Raises
    :class:`FleetHostNotFound`, or :class:`AmbiguousHost` when several fleets have it."""
    every = fleet_adapters(providers)
    fleets = [f for f in every if fleet is None or f.name == fleet]
    if not fleets and fleet is not None:
        raise FleetHostNotFound(host, [], fleet, [f.name for f in every])
    found = [(f, h) for f in fleets if (h := f.settings.host(host)) is not None]
    if not found:
        raise FleetHostNotFound(host, [f"{f.name}/{h.name}" if fleet is None and len(fleets) > 1
                                       else h.name for f in fleets for h in f.settings.hosts])
    if len(found) > 1:
        raise AmbiguousHost(f"fleet: host {host!r} is in fleets "
                            f"{', '.join(f.name for f, _ in found)}; name one")
    return found[0]


def drain(store: Store, providers: ProviderRegistry | None, host: str,
          fleet: str | None = None) -> dict[str, Any]:
    """Drain ``host``: no new job starts there, and each instance on it gets a preemption
    notice (checkpoint, then move; see the module docstring). Idempotent: draining again
    keeps the first drain's time, so the notice's deadline stays. Returns the host's row
    (:func:`hosts`). Raises :class:`FleetHostNotFound`, :class:`AmbiguousHost`,
    ``redis.RedisError``."""
    adapter, settings = _find(providers, host, fleet)
    _ledger(store, adapter).drain(settings.name)
    return _rows(store, [(adapter, settings)])[0]


def undrain(store: Store, providers: ProviderRegistry | None, host: str,
            fleet: str | None = None) -> dict[str, Any]:
    """Return ``host`` to service: its free GPUs are offered from the next offer poll.
    Harmless when it was not drained. Returns its row; raises as :func:`drain`."""
    adapter, settings = _find(providers, host, fleet)
    _ledger(store, adapter).undrain(settings.name)
    return _rows(store, [(adapter, settings)])[0]
