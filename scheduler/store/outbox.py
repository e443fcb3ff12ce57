"""The per-job outbox: a job write's side writes to global keys, applied after it commits.

A job write (:mod:`scheduler.store.jobs`) is one WATCH/MULTI over its job's hash slot only
(``{job_id}``: document, lease, outbox), so it works on Redis Cluster. The side writes it
used to make in the same MULTI (indexes, event stream, ``/metrics`` figures, owner spend:
keys of other slots) are instead RPUSHed there to ``keys.job_outbox(job_id)`` as one entry
``{"id": "<job_id>:<new version>", "w": "<write id>", "ops": [op, ...]}`` (the write id is
random: a version may be written twice, see below), and applied once it committed:

1. before the MULTI the writer ZADDs the entry id to ``keys.JOBS_DIRTY`` (score: ms now);
2. the MULTI writes the job and RPUSHes the entry; its EXEC answers the whole outbox;
3. :func:`apply` runs every op of every entry, in outbox order, each through :data:`_APPLY`
   in its target key's slot (pipelined: one round trip), then LREMs those entries and ZREMs
   their ids (one round trip).

A writer that dies between 2 and 3 leaves the entry and its dirty id: the job's next write
applies it (it applies the whole outbox), and :func:`repair` (each reconcile pass) applies
the outbox of every id dirty for longer than ``grace_ms``. Repair drops or requeues an id
only if its score is still the one it read (a live writer may have marked it again).

An op is applied at most once and never undoes a newer one, whoever applies it and in which
order, by a guard key in the target's slot (``keys.op_once`` / ``keys.op_version``, TTL
:data:`GUARD_TTL_MS`):

- ``once`` (deltas: XADD, HINCRBY, INCRBYFLOAT): applied if its op id (entry id, write id,
  op index) was never applied;
- ``ver`` (a job's state in a shared key: SADD/SREM of the active set, HSET/HDEL of its
  figures, HSET of its spend in its owner's ledger): applied unless that key holds a newer
  version of the job (the same version again writes the same state), so a slow
  applier's SADD of v2 cannot resurrect a job v3 removed;
- ``none`` (idempotent and order-free: ZADD of the constant created score; ``HMAX``: a hash
  field raised to a value unless it holds more).

An op is ``[guard, target, command, *args]`` with ``guard`` as above. The event stream keeps
one global order, but an event an applier adds late (after a crash) follows newer ones.
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
import time
from collections.abc import Sequence
from typing import Any

import redis
from redis.exceptions import NoScriptError

from scheduler.store import keys, multi

log = logging.getLogger(__name__)

# A guard key outlives any realistic delay between a commit and its repair (one day).
GUARD_TTL_MS = 86_400_000
# Seconds between two repair() runs of a daemon (scheduler/daemon.py).
REPAIR_INTERVAL_S = 5.0
# repair() leaves ids younger than this (ms) to their writer, which may not have committed yet.
REPAIR_GRACE_MS = 30_000

Op = list[Any]

# KEYS[1] target, KEYS[2] guard; ARGV: guard kind, job version, ttl ms, command, args...
_APPLY_LUA = """
local kind = ARGV[1]
if kind == 'once' then
  if not redis.call('SET', KEYS[2], '1', 'NX', 'PX', ARGV[3]) then return 0 end
elseif kind == 'ver' then
  local seen = tonumber(redis.call('GET', KEYS[2]) or '0')
  if seen > tonumber(ARGV[2]) then return 0 end
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
end
local cmd = ARGV[4]
if cmd == 'HMAX' then
  local old = redis.call('HGET', KEYS[1], ARGV[5])
  if old and tonumber(old) >= tonumber(ARGV[6]) then return 0 end
  redis.call('HSET', KEYS[1], ARGV[5], ARGV[6])
  return 1
end
local reply = redis.call(cmd, KEYS[1], unpack(ARGV, 5))
if kind == 'none' then return reply end
return 1
"""


class Outbox:
    """The op list of one job write: ops are added in the order they must apply."""

    def __init__(self, job_id: str, version: int) -> None:
        self.job_id = job_id
        self.version = version
        # A version can be written twice: a write acknowledged by a cluster master that died
        # before replicating it is gone from the promoted master, whose next write of the job
        # has the same version. Its ``once`` ops must not pass for the lost write's.
        self.write = secrets.token_hex(6)
        self.ops: list[Op] = []

    @property
    def entry_id(self) -> str:
        return f"{self.job_id}:{self.version}"

    def once(self, target: str, command: str, *args: Any) -> None:
        """A delta op (applied at most once)."""
        self.ops.append(["once", target, command, *args])

    def state(self, target: str, command: str, *args: Any) -> None:
        """A job-state op (applied unless ``target`` holds a newer version of the job)."""
        self.ops.append(["ver", target, command, *args])

    def plain(self, target: str, command: str, *args: Any) -> None:
        """An idempotent, order-free op (ZADD of a constant score, ``HMAX``)."""
        self.ops.append(["none", target, command, *args])

    def entry(self) -> str:
        return json.dumps({"id": self.entry_id, "w": self.write, "ops": self.ops},
                          separators=(",", ":"))


def mark_dirty(client: Any, entry_id: str) -> None:
    """Record that a write of ``entry_id`` (``<job_id>:<version>``) begins (one ZADD)."""
    client.zadd(keys.JOBS_DIRTY, {entry_id: int(time.time() * 1000)})


def _calls(entries: Sequence[str]) -> list[tuple[list[str], list[Any]]]:
    calls = []
    for raw in entries:
        entry = json.loads(raw)
        job_id, _, version = entry["id"].rpartition(":")
        # Entries queued before writes had their own id ("w") keep their op ids.
        write_id = f"{entry['id']}:{entry['w']}" if "w" in entry else entry["id"]
        for index, (guard, target, command, *args) in enumerate(entry["ops"]):
            if guard == "once":
                guard_key = keys.op_once(target, f"{write_id}:{index}")
            elif guard == "ver":
                guard_key = keys.op_version(target, job_id)
            else:
                guard_key = target  # unused; keeps the call's keys in one slot
            calls.append(([target, guard_key],
                          [guard, version, GUARD_TTL_MS, command, *args]))
    return calls


_APPLY_SHA = hashlib.sha1(_APPLY_LUA.encode()).hexdigest()


def _run_all(client: Any, calls: list[tuple[list[str], list[Any]]]) -> list[Any]:
    """:data:`_APPLY_LUA` for each call, pipelined (one round trip; a cluster client splits
    it by node). A raw EVALSHA, not a registered script: a redis-py pipeline asks SCRIPT
    EXISTS first on every execute (one more round trip). A node that lacks the script (new,
    restarted, promoted) gets it loaded and its calls repeated one by one, in order.
    Raises ``redis.RedisError``: the first error a call got."""
    with client.pipeline(transaction=False) as pipe:
        for keys_, args in calls:
            multi.queue_evalsha(pipe, client, _APPLY_SHA, keys_, args)
        replies = pipe.execute(raise_on_error=False)
    for index, reply in enumerate(replies):
        if isinstance(reply, NoScriptError):
            keys_, args = calls[index]
            try:
                replies[index] = client.eval(_APPLY_LUA, len(keys_), *keys_, *args)
            except redis.ResponseError as exc:
                if not _never_applies(exc):
                    raise
                replies[index] = exc
        if isinstance(replies[index], Exception):
            if not _never_applies(replies[index]):
                raise replies[index]
            keys_, args = calls[index]
            log.error("side write %s %s failed and is dropped (it would fail on every "
                      "retry): %s", args[3], keys_[0], replies[index])
            replies[index] = 0
    return replies


# Errors an op gets again on every retry (a key of another type, a figure that is not a
# number): retrying would keep the job's whole outbox, growing by one entry per write of
# the job, each write re-sending all of it. Anything else (a failover, OOM, READONLY,
# BUSY) may pass: the op is retried.
# (Matched anywhere: a script's error wraps the command's, differently by Redis version.)
_DETERMINISTIC = ("WRONGTYPE", "hash value is not", "value is not a valid float",
                  "value is not an integer", "would produce NaN or Infinity")


def _never_applies(error: Exception) -> bool:
    text = str(error)
    return isinstance(error, redis.ResponseError) and any(s in text for s in _DETERMINISTIC)


def apply(client: Any, job_id: str, entries: Sequence[str]) -> int:
    """Apply the ops of ``entries`` (raw outbox entries of ``job_id``, oldest first), then
    drop those entries from the outbox and their ids from the dirty set. Returns the ops
    that changed something (guarded ops not skipped, plain ops that added something). An
    op that fails in a way no retry changes (a key of another type: WRONGTYPE; a figure
    that is not a number) is logged at ERROR and dropped. Raises ``redis.RedisError`` for
    any other failure (nothing is dropped then: a retry or :func:`repair` applies what is
    left, each op still at most once)."""
    if not entries:
        return 0
    replies = _run_all(client, _calls(entries))
    ids = [json.loads(raw)["id"] for raw in entries]
    with client.pipeline(transaction=False) as pipe:
        for raw in entries:
            pipe.lrem(keys.job_outbox(job_id), 1, raw)
        pipe.zrem(keys.JOBS_DIRTY, *ids)
        pipe.execute()
    return sum(r for r in replies if isinstance(r, int))


def pending(client: Any, job_id: str) -> list[str]:
    """The raw entries in ``job_id``'s outbox, oldest first."""
    return client.lrange(keys.job_outbox(job_id), 0, -1)


# KEYS[1] the dirty zset; ARGV[1] ms now; then (action, id, score read) triples: 'drop'
# removes the id, 'later' re-scores it to now (back of the queue), each only if its score is
# still the one read: a writer that marked the same id since (a new write of that version)
# has a write of its own to finish, or to leave to a later repair.
_SETTLE_DIRTY_LUA = """
local done = 0
for i = 2, #ARGV, 3 do
  local score = redis.call('ZSCORE', KEYS[1], ARGV[i + 1])
  if score and tonumber(score) == tonumber(ARGV[i + 2]) then
    if ARGV[i] == 'drop' then
      redis.call('ZREM', KEYS[1], ARGV[i + 1])
    else
      redis.call('ZADD', KEYS[1], 'XX', ARGV[1], ARGV[i + 1])
    end
    done = done + 1
  end
end
return done
"""


def repair(client: Any, limit: int = 1000, grace_ms: int = REPAIR_GRACE_MS,
           now_ms: int | None = None) -> int:
    """Apply the outbox of each job with an id dirty for ``grace_ms`` or more (at most
    ``limit`` ids, oldest first) and drop the ids whose outbox is empty (a write that never
    committed). An id marked again meanwhile (by a live write of that version) is kept for
    a later pass. A job whose outbox fails to apply has its ids moved to the back of the
    queue (dirty as of ``now_ms``), so a job that keeps failing delays the others by one
    pass at most instead of holding the oldest ``limit`` places. Returns the ops applied.
    Raises ``redis.RedisError``."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    listed = client.zrangebyscore(keys.JOBS_DIRTY, "-inf", now_ms - grace_ms, start=0,
                                  num=limit, withscores=True)
    applied = 0
    settle: list[Any] = []
    by_job: dict[str, list[tuple[str, int]]] = {}
    for entry_id, score in listed:
        by_job.setdefault(entry_id.rpartition(":")[0], []).append((entry_id, int(score)))
    for job_id, ids in by_job.items():
        action = "drop"
        try:
            entries = pending(client, job_id)
            applied += apply(client, job_id, entries)
        except redis.RedisError:
            log.warning("job %s: its outbox could not be applied; a later pass retries",
                        job_id, exc_info=True)
            action = "later"
        for entry_id, score in ids:
            settle += [action, entry_id, score]
    if settle:
        client.eval(_SETTLE_DIRTY_LUA, 1, keys.JOBS_DIRTY, now_ms, *settle)
    if applied:
        log.info("applied %d side writes of %d job writes that stopped after committing",
                 applied, len(listed))
    return applied


__all__ = ["GUARD_TTL_MS", "Outbox", "apply", "mark_dirty", "pending", "repair"]
