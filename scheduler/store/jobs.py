"""Jobs in Redis: one JSON document per job, written with optimistic concurrency.

Every write goes through :meth:`JobStore.save`, which WATCHes the job key, refuses to overwrite
a newer version (:class:`StaleJobError`) and queues its side writes (indexes, events, figures,
spend) in the job's outbox in the same MULTI, over the job's hash slot only (so it works on
Redis Cluster), then applies them (:mod:`scheduler.store.outbox`): a crash after the commit
leaves them queued, and the next write of the job or :func:`~scheduler.store.outbox.repair`
applies them, each once. A store bound to a job's control
lease (:meth:`JobStore.fenced`) also WATCHes the lease and refuses to write once the lease is
no longer that acquisition's (:class:`LeaseLostError`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable

import redis

from core.models import Job, parse_lenient, utcnow
from scheduler.store import keys, outbox
from scheduler.store.job_writes import after_commit, after_write
from scheduler.store.leases import Lease
from scheduler.store.multi import mget, transaction
from scheduler.timing import JOB_LOG_MAX_LINES

# A stored log line is at most this many UTF-8 bytes (longer ones are cut, ending in
# LOG_LINE_CUT_MARKER), so a job's log list holds at most JOB_LOG_MAX_LINES × 4 KiB ≈ 40 MiB
# whatever its command prints: one line could otherwise be as large as an agent report (MBs).
JOB_LOG_MAX_LINE_BYTES = 4096
LOG_LINE_CUT_MARKER = " …[line cut]"
# Job ids read per round trip when listing one owner's jobs (JobStore.list).
OWNER_SCAN_PAGE = 500
# Tries of a create whose transaction lost its connection (a failover) with nothing stored.
_CREATE_ATTEMPTS = 3

log = logging.getLogger(__name__)


def cap_log_line(line: str, limit: int = JOB_LOG_MAX_LINE_BYTES) -> str:
    """``line`` if it fits in ``limit`` UTF-8 bytes, else its start (cut on a character
    boundary) followed by :data:`LOG_LINE_CUT_MARKER`, ``limit`` bytes in all."""
    data = line.encode("utf-8", "surrogatepass")
    if len(data) <= limit:
        return line
    room = limit - len(LOG_LINE_CUT_MARKER.encode())
    return data[:room].decode("utf-8", "ignore") + LOG_LINE_CUT_MARKER


class JobExistsError(Exception):
    """A job with this id is already stored."""


class StaleJobError(Exception):
    """The job changed since it was read; re-read and retry the step."""


class LeaseLostError(StaleJobError):
    """The job's control lease is no longer ours (it expired, or another replica took it):
    nothing was written; the lease's holder acts on the job now."""


class JobStore:
    """CRUD for :class:`Job` plus per-job logs. Thread-safe (one redis-py client)."""

    def __init__(self, client: redis.Redis, lease: Lease | None = None,
                 lease_ttl_s: float | None = None) -> None:
        self._r = client
        self.lease = lease
        self._lease_ttl_ms = int(lease_ttl_s * 1000) if lease_ttl_s else None

    def fenced(self, lease: Lease, ttl_s: float | None = None) -> JobStore:
        """This store with every :meth:`save` fenced by ``lease`` (a job control lease, see
        :class:`~scheduler.store.leases.Leases`): a save checks, in its transaction, that the
        lease key still holds this acquisition, and extends it by ``ttl_s`` when given (so a
        long step that keeps saving keeps its lease)."""
        return JobStore(self._r, lease, ttl_s)

    def create(self, job: Job) -> Job:
        """Store a new job. Raises :class:`JobExistsError` if the id is taken,
        :class:`StaleJobError` when its slot lost the connection on every try."""
        job = job.model_copy(update={"version": 1})
        for _ in range(_CREATE_ATTEMPTS):
            with transaction(self._r) as pipe:
                try:
                    pipe.watch(keys.job(job.id))
                    if pipe.exists(keys.job(job.id)):
                        raise JobExistsError(job.id)
                    entries = self._commit(pipe, job)
                    break
                except redis.WatchError as exc:
                    # Another create of the id, or the connection was lost (a failover)
                    # before or after our EXEC: the stored document tells which.
                    stored = self._r.get(keys.job(job.id))
                    if stored == job.model_dump_json():
                        entries = outbox.pending(self._r, job.id)
                        break
                    if stored is not None:
                        raise JobExistsError(job.id) from exc
        else:
            raise StaleJobError(f"job {job.id}: its slot kept failing over; submit again")
        self._apply(job.id, entries)
        after_commit(None, job)
        return job

    def get(self, job_id: str) -> Job | None:
        raw = self._r.get(keys.job(job_id))
        return parse_lenient(Job, raw) if raw else None

    def exists(self, job_id: str) -> bool:
        return bool(self._r.exists(keys.job(job_id)))

    def get_many(self, job_ids: list[str]) -> dict[str, Job]:
        """The stored jobs among ``job_ids`` (one MGET; one per hash slot, pipelined, on a
        cluster); missing ones are left out."""
        raws = mget(self._r, [keys.job(i) for i in job_ids])
        return {i: parse_lenient(Job, raw) for i, raw in zip(job_ids, raws, strict=True) if raw}

    def save(self, job: Job) -> Job:
        """Write ``job`` if the stored version is still ``job.version``; return it with the
        version bumped. Raises :class:`StaleJobError` otherwise, :class:`LeaseLostError` when
        the store is :meth:`fenced` and the lease is no longer ours."""
        key = keys.job(job.id)
        lease = self.lease
        with transaction(self._r) as pipe:
            try:
                pipe.watch(key, *([lease.key] if lease else []))
                if lease is not None and pipe.get(lease.key) != lease.value:
                    raise LeaseLostError(f"job {job.id}: control lease {lease.value} lost "
                                         f"(now {pipe.get(lease.key) or 'free'})")
                raw = pipe.get(key)
                previous = parse_lenient(Job, raw) if raw else None
                stored = previous.version if previous else None
                if stored != job.version:
                    raise StaleJobError(f"job {job.id}: stored v{stored}, writing from v{job.version}")
                new = job.model_copy(update={"version": job.version + 1, "updated_at": utcnow()})
                extend = self._lease_ttl_ms if lease is not None else None
                entries = self._commit(pipe, new, previous,
                                       (lease.key, extend) if extend else None)
            except redis.WatchError as exc:
                raise StaleJobError(f"job {job.id} changed during the write") from exc
        self._apply(job.id, entries)
        after_commit(previous, new)
        return new

    def _apply(self, job_id: str, entries: list[str]) -> None:
        """Apply the committed write's outbox; a Redis failure now (a failover, say) leaves
        it queued for the job's next write or the next repair, and the write stands."""
        try:
            outbox.apply(self._r, job_id, entries)
        except redis.RedisError as exc:
            log.warning("job %s: written; its side writes wait for the next repair: %s",
                        job_id, exc)

    def _commit(self, pipe: redis.client.Pipeline, job: Job, previous: Job | None = None,
                extend: tuple[str, int] | None = None) -> list[str]:
        """In the WATCHing ``pipe``: mark the write dirty, then one MULTI over the job's slot
        writing the document and queueing its side writes in its outbox (and extending the
        lease ``extend`` = (key, ms)). Returns the outbox after the write (raw entries).
        Raises ``redis.WatchError``."""
        box = after_write(previous, job)
        outbox.mark_dirty(self._r, box.entry_id)  # another slot: not in the MULTI
        pipe.multi()
        pipe.set(keys.job(job.id), job.model_dump_json())
        pipe.rpush(keys.job_outbox(job.id), box.entry())
        if extend is not None:
            pipe.pexpire(*extend)
        pipe.lrange(keys.job_outbox(job.id), 0, -1)
        return pipe.execute()[-1]

    def active_ids(self) -> list[str]:
        return sorted(self._r.smembers(keys.ACTIVE_JOBS))

    def list(self, limit: int = 100, owner: str | None = None) -> list[Job]:
        """Newest first, at most ``limit``; of ``owner`` (``spec.owner``) only when given.

        With ``owner`` the index is read in pages of :data:`OWNER_SCAN_PAGE` until ``limit``
        of theirs are found or the index ends; a stored document is parsed only when its text
        holds the owner's name (the parse is most of a listing's time)."""
        if owner is None:
            ids = self._r.zrevrange(keys.JOBS_INDEX, 0, max(0, limit - 1))
            if not ids:
                return []
            raws = mget(self._r, [keys.job(i) for i in ids])
            return [parse_lenient(Job, raw) for raw in raws if raw]
        needle = f'"owner":{json.dumps(owner)}'
        found: list[Job] = []
        start = 0
        while len(found) < limit:
            ids = self._r.zrevrange(keys.JOBS_INDEX, start, start + OWNER_SCAN_PAGE - 1)
            if not ids:
                break
            start += len(ids)
            for raw in mget(self._r, [keys.job(i) for i in ids]):
                if raw and needle in raw:
                    job = parse_lenient(Job, raw)
                    if job.spec.owner == owner:
                        found.append(job)
                        if len(found) == limit:
                            break
        return found

    def append_logs(self, job_id: str, lines: Iterable[str]) -> None:
        """Append ``lines``, each capped by :func:`cap_log_line`; keeps the newest
        ``JOB_LOG_MAX_LINES``."""
        lines = [cap_log_line(line) for line in lines]
        if not lines:
            return
        with self._r.pipeline(transaction=True) as pipe:
            pipe.rpush(keys.job_logs(job_id), *lines)
            pipe.ltrim(keys.job_logs(job_id), -JOB_LOG_MAX_LINES, -1)
            pipe.execute()

    def logs(self, job_id: str, start: int = 0) -> list[str]:
        """Log lines from index ``start`` (negative counts from the end)."""
        return self._r.lrange(keys.job_logs(job_id), start, -1)
