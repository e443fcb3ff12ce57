"""Holds and prune locks: how commits, restores and prunes of one job share a store safely.

Blobs are content-addressed and shared between checkpoints, and a commit does not upload a
blob the store already has. So a prune that deletes a blob it saw unreferenced could take
the bytes a commit in flight is about to name in its manifest (the commit saw the blob
exist a moment before), or a checkpoint a new placement is restoring. Object stores offer
no locks or compare-and-swap here, so both sides write first and look second:

- A **commit** writes a hold naming the sha256s it will reference, then looks for prune
  locks; while a live one exists it waits (at most :data:`PRUNE_LOCK_EXPIRY_S`), and only
  then checks which blobs the store has and uploads the rest. It deletes its hold after its
  manifest landed. A **restore** holds the checkpoint ids it may read the same way.
- A **prune** writes its lock, then reads the holds (their blobs and checkpoints are kept),
  decides, deletes, and deletes its lock. It stops deleting once :data:`PRUNE_LEASE_S` of its
  own time has passed since before it wrote the lock (what is left waits for the next prune).

Either the committer's look came after the prune's lock was written (then it waits until the
prune ended before trusting ``exists``), or the prune's look came after the hold was written
(then it keeps what the hold names): no interleaving loses a blob a manifest names. Holds
and locks carry their writer's wall-clock time; one older than its expiry is a crashed
writer's and is ignored (and removed by the next prune).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from scheduler.checkpoints import keys
from scheduler.checkpoints.objectstore import (
    CheckpointStoreError,
    ObjectNotFound,
    ObjectStore,
)

logger = logging.getLogger(__name__)

# A prune issues no delete after this many seconds of its own (monotonic) time.
PRUNE_LEASE_S = 60.0
# A lock is a dead prune's after this many seconds of the reader's wall clock: the lease, plus
# a delete request still in flight (S3 retries) and clock skew between machines.
PRUNE_LOCK_EXPIRY_S = PRUNE_LEASE_S + 120.0
# A hold is a dead writer's after this long: far longer than any upload or download of one
# checkpoint; until then a crashed commit's blobs are merely kept a while longer.
HOLD_EXPIRY_S = 24 * 3600.0
WAIT_POLL_S = 0.5


@dataclass(frozen=True)
class Hold:
    """A commit or restore in progress: ``sha256s`` / ``checkpoint_ids`` a prune must keep.
    ``created_s``: the writer's Unix time."""

    key: str
    created_s: float
    sha256s: frozenset[str]
    checkpoint_ids: frozenset[str]


def _token() -> str:
    return f"{time.time_ns() // 1_000_000:013d}-{uuid.uuid4().hex[:12]}"


def put_hold(store: ObjectStore, job_id: str, sha256s: Iterable[str] = (),
             checkpoint_ids: Iterable[str] = ()) -> str:
    """Write a hold; returns its key (pass it to :func:`release`)."""
    key = keys.holds_prefix(job_id) + _token() + ".json"
    body = {"created_s": time.time(), "sha256s": sorted(set(sha256s)),
            "checkpoint_ids": sorted(set(checkpoint_ids))}
    store.put_bytes(key, json.dumps(body).encode())
    return key


def release(store: ObjectStore, key: str | None) -> None:
    """Delete a hold or lock; failures are logged (it expires by itself)."""
    if key is None:
        return
    try:
        store.delete([key])
    except CheckpointStoreError as exc:  # housekeeping: an expired hold is ignored and removed later
        logger.warning("could not remove %s (%s); it expires by itself", key, exc)


def _created_s(store: ObjectStore, key: str) -> tuple[float, dict] | None:
    try:
        body = json.loads(store.get_bytes(key))
        return float(body["created_s"]), body
    except ObjectNotFound:
        return None
    except (ValueError, KeyError, TypeError):
        return 0.0, {}  # unreadable: as old as can be, so expired and removed


def read_holds(store: ObjectStore, job_id: str, now_s: float | None = None
               ) -> tuple[list[Hold], list[str]]:
    """The live holds of ``job_id`` and the keys of expired (or unreadable) ones."""
    now_s = time.time() if now_s is None else now_s
    live, expired = [], []
    for key in store.list_keys(keys.holds_prefix(job_id)):
        got = _created_s(store, key)
        if got is None:
            continue
        created, body = got
        if now_s - created > HOLD_EXPIRY_S:
            expired.append(key)
            continue
        live.append(Hold(key, created, frozenset(body.get("sha256s", ())),
                         frozenset(body.get("checkpoint_ids", ()))))
    return live, expired


def live_prune_locks(store: ObjectStore, job_id: str, now_s: float | None = None,
                     ignore: str | None = None) -> tuple[list[str], list[str]]:
    """``(live lock keys, expired lock keys)`` of ``job_id``, leaving out ``ignore``."""
    now_s = time.time() if now_s is None else now_s
    live, expired = [], []
    for key in store.list_keys(keys.prunes_prefix(job_id)):
        if key == ignore:
            continue
        got = _created_s(store, key)
        if got is None:
            continue
        (live if now_s - got[0] <= PRUNE_LOCK_EXPIRY_S else expired).append(key)
    return live, expired


def wait_for_prunes(store: ObjectStore, job_id: str) -> None:
    """Return once no live prune lock of ``job_id`` is left (each expires by itself, so this
    waits at most :data:`PRUNE_LOCK_EXPIRY_S` in all)."""
    deadline = time.monotonic() + PRUNE_LOCK_EXPIRY_S + WAIT_POLL_S
    warned = False
    while time.monotonic() < deadline:
        live, _ = live_prune_locks(store, job_id)
        if not live:
            return
        if not warned:
            logger.info("job %s: waiting for a prune of its checkpoints to end (%s)",
                        job_id, live[0])
            warned = True
        time.sleep(WAIT_POLL_S)


def take_prune_lock(store: ObjectStore, job_id: str) -> tuple[str, float] | None:
    """Write a prune lock; returns ``(key, monotonic start)``, or ``None`` (lock removed again)
    when another live prune of the job holds an older lock: one prune at a time is enough."""
    started = time.monotonic()
    key = keys.prunes_prefix(job_id) + _token() + ".json"
    store.put_bytes(key, json.dumps({"created_s": time.time()}).encode())
    others, _ = live_prune_locks(store, job_id, ignore=key)
    if any(other < key for other in others):
        release(store, key)
        return None
    return key, started
