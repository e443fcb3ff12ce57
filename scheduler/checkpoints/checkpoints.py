"""Checkpoints of one job in an :class:`ObjectStore`: commit, list, restore, prune.

Key layout (see :mod:`scheduler.checkpoints.keys`)::

    jobs/{job_id}/blobs/{sha256}[.zst]              file bytes, content-addressed by the sha256
                                                    of the original bytes (``.zst``: stored
                                                    zstd-compressed): a file that did not
                                                    change is not uploaded again
    jobs/{job_id}/checkpoints/{checkpoint_id}.json  the CheckpointManifest, written LAST
    jobs/{job_id}/holds/, prunes/                   commits/restores and prunes in progress

A checkpoint exists only once its manifest is stored, so a crash mid-commit leaves at worst
some unreferenced blobs, which :func:`prune_checkpoints` removes later. ``checkpoint_id`` is
``{created_ms:013d}-a{attempt}`` so ids sort in commit order. Commits, restores and prunes
of one job may run at once from several machines: :mod:`.holds` says how none of them
loses a blob another needs. Each file is stored zstd-compressed when that makes it at least
10 % smaller (:mod:`.encoding`); restore decodes and checks the original bytes' sha256.
A commit reads only the files that changed since this process's previous commit of the
folder (:mod:`.digests`) and streams new blobs to S3 straight from the job's files, each
verified against its sha256 before it becomes visible (:mod:`.committing`).

Files a job is still writing are left out of a checkpoint: any path part starting with ``.``
or ending in ``.tmp`` (the usual write-to-temp-then-rename pattern).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import time
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath

from pydantic import ValidationError

from core.models import CheckpointFile, CheckpointManifest, parse_lenient
from core.models.checkpoints import BlobEncoding
from scheduler.checkpoints import holds, keys
from scheduler.checkpoints.committing import BlobWriter, staging_dir
from scheduler.checkpoints.digests import PROCESS_CACHE, DigestCache
from scheduler.checkpoints.encoding import decode_blob
from scheduler.checkpoints.objectstore import (
    CheckpointCorrupt,
    ObjectNotFound,
    ObjectStore,
)
from scheduler.checkpoints.retention import Candidate, retained_ids

logger = logging.getLogger(__name__)

_CHUNK_BYTES = 1 << 20

Fingerprint = tuple[tuple[str, int, int], ...]


def _skipped(rel: PurePosixPath) -> bool:
    return any(part.startswith(".") or part.endswith(".tmp") for part in rel.parts)


def _portable(rel: PurePosixPath) -> bool:
    """Names that are not valid UTF-8 cannot be written into a JSON manifest (nor restored
    elsewhere reliably); they are left out with a warning rather than failing every commit."""
    try:
        str(rel).encode("utf-8")
    except UnicodeEncodeError:
        if str(rel) not in _WARNED_NAMES:  # the folder is scanned every second: say it once
            _WARNED_NAMES.add(str(rel))
            logger.warning("checkpoint file %r skipped: its name is not valid UTF-8", str(rel))
        return False
    return True


_WARNED_NAMES: set[str] = set()


def scan_checkpoint_dir(src_dir: Path) -> list[tuple[str, Path]]:
    """The files a commit would take from ``src_dir``: ``[(relative posix path, path)]``, sorted.

    Hidden names and ``*.tmp`` are skipped; symlinks to files are followed, symlinked folders
    are not. A missing ``src_dir`` gives ``[]``.
    """
    src_dir = Path(src_dir)
    found: list[tuple[str, Path]] = []
    if not src_dir.is_dir():
        return found
    for dirpath, dirnames, filenames in os.walk(src_dir):
        base = Path(dirpath)
        rel_base = PurePosixPath(base.relative_to(src_dir).as_posix())
        dirnames[:] = [d for d in dirnames
                       if not _skipped(PurePosixPath(d)) and _portable(PurePosixPath(d))]
        for name in filenames:
            rel = rel_base / name if str(rel_base) != "." else PurePosixPath(name)
            path = base / name
            if not _skipped(rel) and path.is_file() and _portable(rel):
                found.append((rel.as_posix(), path))
    return sorted(found)


def dir_fingerprint(src_dir: Path) -> Fingerprint:
    """A cheap change detector: ``((relative path, size_bytes, mtime_ns), ...)`` of the files
    :func:`scan_checkpoint_dir` would take. Equal fingerprints mean "nothing to commit"."""
    out = []
    for rel, path in scan_checkpoint_dir(src_dir):
        try:
            st = path.stat()
        except FileNotFoundError:
            continue
        out.append((rel, st.st_size, st.st_mtime_ns))
    return tuple(out)


def _next_created_ms(latest: str | None) -> int:
    now_ms = time.time_ns() // 1_000_000
    if latest is not None:
        try:
            # Keep ids in commit order even if this clock is behind the previous writer's.
            now_ms = max(now_ms, keys.created_ms_of(latest) + 1)
        except ValueError:
            pass
    return now_ms


def _latest_manifest(store: ObjectStore, job_id: str, ids: list[str]
                     ) -> CheckpointManifest | None:
    for checkpoint_id in reversed(ids):
        manifest = _read_manifest(store, job_id, checkpoint_id)
        if manifest is not None:
            return manifest
    return None


def commit_checkpoint(
    store: ObjectStore, job_id: str, src_dir: Path, attempt: int, final: bool = False,
    compression: str = "auto", *, digests: DigestCache | None = None,
) -> CheckpointManifest | None:
    """Commit the files under ``src_dir`` as a new checkpoint of ``job_id``.

    Files whose digest this process remembers from an earlier commit (unchanged since, see
    :mod:`.digests`) are neither read nor uploaded again; every other file is read once to
    hash it, and only blobs the store lacks are uploaded: streamed from the file itself
    and verified against its hash on the way (a file rewritten meanwhile is read again),
    or, to a store that cannot stream or for a file that keeps changing, from a frozen
    copy beside ``src_dir`` (:mod:`.committing`). Either way the stored bytes cannot
    disagree with the manifest. The manifest is written last. While the commit runs it
    holds its blobs against a concurrent prune (:mod:`.holds`), waiting first for a prune
    already running to end.

    - **store**: where to write. **job_id**: the job (letters, digits, ``._-``).
    - **src_dir**: the job's checkpoint folder (``SCHED_CHECKPOINT_DIR``).
    - **attempt**: the placement attempt (≥ 0), recorded in the manifest and the id.
    - **final**: ``True`` for the checkpoint taken after the command exited 0.
    - **compression**: ``auto`` (zstd per file where it saves at least 10 %: measured on
      the file up to 8 MiB, on samples of a larger one) or ``none`` (the spec's
      ``checkpoint.compression``).
    - **digests**: the digest cache to use and update (default: the process's own).

    Returns the committed :class:`CheckpointManifest`, or ``None`` when ``src_dir`` holds no
    eligible file (nothing is written then).

    Raises :class:`CheckpointStoreError` when the store cannot be written (nothing becomes
    visible: the manifest is not written), ``ValueError`` for a malformed ``job_id``,
    ``OSError`` for a file that cannot be read.
    """
    keys.manifests_prefix(job_id)  # validates job_id before any work
    if str(compression) not in ("auto", "none"):
        raise ValueError(f"compression must be 'auto' or 'none', got {compression!r}")
    entries = scan_checkpoint_dir(Path(src_dir))
    if not entries:
        return None
    cache = PROCESS_CACHE if digests is None else digests
    seen: dict[str, object] = {}

    def previous() -> CheckpointManifest | None:
        # Read once the first hold is in place, as the ids the new one follows.
        seen["ids"] = _checkpoint_ids(store, job_id)
        seen["previous"] = _latest_manifest(store, job_id, seen["ids"])  # type: ignore[arg-type]
        return seen["previous"]  # type: ignore[return-value]

    with BlobWriter(store, job_id, Path(src_dir), cache, str(compression) == "auto",
                    previous) as writer:
        written = writer.write(entries)
        if not written:
            return None
        ids: list[str] = seen["ids"]  # type: ignore[assignment]
        latest: CheckpointManifest | None = seen["previous"]  # type: ignore[assignment]
        created_ms = _next_created_ms(ids[-1] if ids else None)
        if latest is not None and latest.sequence is not None:
            sequence = latest.sequence + 1
        else:
            sequence = len(ids) + 1
        files = [CheckpointFile(path=f.rel, size_bytes=f.size, sha256=f.sha256,
                                encoding=writer.blobs[f.sha256][0],
                                stored_bytes=writer.blobs[f.sha256][1])
                 for f in written]
        manifest = CheckpointManifest(
            job_id=job_id,
            checkpoint_id=keys.make_checkpoint_id(created_ms, attempt),
            attempt=attempt,
            created_at=datetime.fromtimestamp(created_ms / 1000, tz=UTC),
            files=files,
            total_bytes=sum(f.size_bytes for f in files),
            final=final,
            sequence=sequence,
        )
        store.put_bytes(keys.manifest_key(job_id, manifest.checkpoint_id),
                        manifest.model_dump_json(indent=1, exclude_none=True).encode())
        cache.replace(writer.folder, writer.remembered(written))
        stats = writer.stats
        logger.info("committed checkpoint %s of job %s: %d file(s), %d bytes (%d stored); "
                    "%d digest(s) remembered, %d bytes hashed, %d new blob(s) of %d bytes",
                    manifest.checkpoint_id, job_id, len(files), manifest.total_bytes,
                    manifest.stored_bytes, stats.cached_files, stats.hashed_bytes,
                    stats.uploaded_blobs, stats.uploaded_bytes)
        return manifest


def latest_checkpoint_id(store: ObjectStore, job_id: str) -> str | None:
    """The newest committed checkpoint id of ``job_id`` (from manifest keys alone; the manifest
    is not read), or ``None``. Raises :class:`CheckpointStoreError` if the store is down."""
    ids = _checkpoint_ids(store, job_id)
    return ids[-1] if ids else None


def _checkpoint_ids(store: ObjectStore, job_id: str) -> list[str]:
    """Committed checkpoint ids, oldest first."""
    found = (keys.checkpoint_id_of(k) for k in store.list_keys(keys.manifests_prefix(job_id)))
    return sorted(i for i in found if i)


def _read_manifest(
    store: ObjectStore, job_id: str, checkpoint_id: str
) -> CheckpointManifest | None:
    key = keys.manifest_key(job_id, checkpoint_id)
    try:
        manifest = parse_lenient(CheckpointManifest, store.get_bytes(key))
    except ObjectNotFound:
        return None  # pruned between listing and reading
    except (ValidationError, ValueError) as exc:
        logger.warning("skipping checkpoint %s of job %s: unreadable manifest (%s)",
                       checkpoint_id, job_id, str(exc).splitlines()[0])
        return None
    if manifest.checkpoint_id != checkpoint_id or manifest.job_id != job_id:
        logger.warning("skipping checkpoint %s of job %s: manifest names %s of job %s",
                       checkpoint_id, job_id, manifest.checkpoint_id, manifest.job_id)
        return None
    return manifest


def list_checkpoints(store: ObjectStore, job_id: str) -> list[CheckpointManifest]:
    """Every readable committed checkpoint of ``job_id``, newest first.

    Manifests that do not parse (or name another job or id) are skipped with a warning.
    Raises :class:`CheckpointStoreError` when the store cannot be read.
    """
    manifests = []
    for checkpoint_id in reversed(_checkpoint_ids(store, job_id)):
        manifest = _read_manifest(store, job_id, checkpoint_id)
        if manifest is not None:
            manifests.append(manifest)
    return manifests


def _safe_rel(path: str) -> PurePosixPath:
    rel = PurePosixPath(path)
    if not path or rel.is_absolute() or any(p in ("", ".", "..") for p in path.split("/")):
        raise CheckpointCorrupt(f"manifest file path {path!r} is not a safe relative path")
    return rel


def _hash_file(path: Path) -> tuple[int, str]:
    digest, size = hashlib.sha256(), 0
    with open(path, "rb") as reader:
        while chunk := reader.read(_CHUNK_BYTES):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


def _download_verified(store: ObjectStore, manifest: CheckpointManifest, into: Path) -> None:
    """Download every file of ``manifest`` under ``into``, decode it, and check the stored
    size and the original bytes' size and sha256.

    Raises :class:`CheckpointCorrupt` or :class:`ObjectNotFound` for a bad checkpoint,
    :class:`CheckpointStoreError` when the store is unreachable.
    """
    done: dict[str, Path] = {}
    for item in manifest.files:
        dest = into / _safe_rel(item.path)
        dest.parent.mkdir(parents=True, exist_ok=True)
        if item.sha256 in done:
            shutil.copyfile(done[item.sha256], dest)
            continue
        blob = dest.with_name(f".{dest.name}.blob-{uuid.uuid4().hex[:8]}")
        store.get_file(keys.blob_key(manifest.job_id, item.sha256, item.encoding), blob)
        stored = blob.stat().st_size
        if stored != item.stored_size:
            blob.unlink(missing_ok=True)
            raise CheckpointCorrupt(f"{item.path}: stored blob has {stored} bytes, manifest "
                                    f"says {item.stored_size}")
        size, sha = decode_blob(blob, dest, item.encoding)
        if size != item.size_bytes or sha != item.sha256:
            raise CheckpointCorrupt(
                f"{item.path}: got {size} bytes sha256 {sha[:12]}…, manifest says "
                f"{item.size_bytes} bytes sha256 {item.sha256[:12]}…"
            )
        done[item.sha256] = dest


def _replace_dir(staging: Path, dest: Path) -> None:
    """Swap ``staging`` in as ``dest`` with renames (same folder, so no copy)."""
    if dest.exists():
        mode = dest.stat().st_mode & 0o7777
        old = dest.with_name(f".{dest.name}.old-{uuid.uuid4().hex[:8]}")
        os.rename(dest, old)
        os.chmod(staging, mode)
        os.rename(staging, dest)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.chmod(staging, 0o755)
        os.rename(staging, dest)


def restore_latest(store: ObjectStore, job_id: str, dest_dir: Path) -> CheckpointManifest | None:
    """Restore the newest checkpoint of ``job_id`` that verifies, into ``dest_dir``.

    Each candidate (newest first) is downloaded into a temp folder beside ``dest_dir`` and
    every file's size and sha256 is checked. A missing blob or a mismatch logs a warning naming
    the checkpoint and the next older committed one is tried. Only a fully verified checkpoint
    replaces ``dest_dir``'s contents (files not in it are removed); otherwise ``dest_dir`` is
    left untouched.

    Returns the restored manifest, or ``None`` when the job has no valid checkpoint.

    Raises :class:`CheckpointStoreError` when the store cannot be reached; an older checkpoint
    is never used just because the store is down.
    """
    dest = Path(dest_dir).absolute()
    ids = _checkpoint_ids(store, job_id)
    if not ids:
        return None
    # Held against a concurrent prune until the download is done (see .holds).
    hold = holds.put_hold(store, job_id, checkpoint_ids=ids)
    try:
        holds.wait_for_prunes(store, job_id)
        for checkpoint_id in reversed(ids):
            manifest = _read_manifest(store, job_id, checkpoint_id)
            if manifest is None:
                continue
            staging = staging_dir(dest, "restore")
            try:
                _download_verified(store, manifest, staging)
            except (CheckpointCorrupt, ObjectNotFound) as exc:
                logger.warning("checkpoint %s of job %s is unusable (%s); trying the previous "
                               "one", manifest.checkpoint_id, job_id, exc)
                shutil.rmtree(staging, ignore_errors=True)
                continue
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
            _replace_dir(staging, dest)
            logger.info("restored checkpoint %s of job %s into %s (%d file(s), %d bytes)",
                        manifest.checkpoint_id, job_id, dest, len(manifest.files),
                        manifest.total_bytes)
            return manifest
        return None
    finally:
        holds.release(store, hold)


def prune_checkpoints(store: ObjectStore, job_id: str, keep_last: int = 3,
                      keep_every: int = 0, protect: Iterable[str | None] = (), *,
                      keep: int | None = None) -> list[str]:
    """Apply retention to ``job_id``'s checkpoints and delete the blobs nothing needs.

    Kept (:func:`.retention.retained_ids`): the ``keep_last`` newest, every ``keep_every``-th
    by commit order, the newest complete one (what a restart restores), the ids in
    ``protect`` (the job record's ``last_checkpoint_id``, the one this placement restored),
    and whatever a commit or restore in progress holds (:mod:`.holds`). Manifests are deleted
    before blobs, so no checkpoint is ever visible with blobs missing; then every blob that
    no remaining manifest, new manifest or hold names. Safe while other machines commit,
    restore or prune the same job; a prune that finds another one running returns ``[]``.

    - **keep_last**, **keep_every**: the spec's ``checkpoint.keep_last`` / ``keep_every``.
    - **keep**: the former name of ``keep_last`` (used when given).

    Returns the deleted keys (manifests, then blobs).

    Raises ``ValueError`` if ``keep_last`` < 1 or ``keep_every`` < 0;
    :class:`CheckpointStoreError` when the store fails (what is left waits for the next prune).
    """
    keep_last = keep_last if keep is None else keep
    if keep_last < 1:
        raise ValueError(f"keep_last must be at least 1, got {keep_last}")
    if keep_every < 0:
        raise ValueError(f"keep_every must be 0 or more, got {keep_every}")
    lock = holds.take_prune_lock(store, job_id)
    if lock is None:
        logger.info("job %s: another prune is running; skipped", job_id)
        return []
    lock_key, started = lock
    try:
        return _prune_locked(store, job_id, keep_last, keep_every,
                             {i for i in protect if i}, started)
    finally:
        holds.release(store, lock_key)


def _prune_locked(store: ObjectStore, job_id: str, keep_last: int, keep_every: int,
                  protect: set[str], started: float) -> list[str]:
    ids = _checkpoint_ids(store, job_id)
    manifests = {i: _read_manifest(store, job_id, i) for i in ids}
    prefix = keys.blobs_prefix(job_id)
    blob_keys = store.list_keys(prefix)
    present = set(blob_keys)
    live_holds, expired_holds = holds.read_holds(store, job_id)
    held_ids = set().union(*(h.checkpoint_ids for h in live_holds))
    held_shas = set().union(*(h.sha256s for h in live_holds))

    def complete(m: CheckpointManifest | None) -> bool:
        return m is not None and all(
            keys.blob_key(job_id, f.sha256, f.encoding) in present for f in m.files)

    candidates = [Candidate(i, m.sequence if m else None, complete(m))
                  for i, m in manifests.items()]
    keep = retained_ids(candidates, keep_last, keep_every, protect | held_ids)
    doomed = [keys.manifest_key(job_id, i) for i in ids if i not in keep]
    if doomed and _within_lease(started, job_id):
        store.delete(doomed)
    else:
        doomed = []
    # Manifests that landed since the listing above name blobs that must stay; their holds
    # may already be gone, but a hold is removed only after its manifest is stored.
    for checkpoint_id in _checkpoint_ids(store, job_id):
        if checkpoint_id not in manifests:
            manifests[checkpoint_id] = _read_manifest(store, job_id, checkpoint_id)
            keep.add(checkpoint_id)
    referenced = {keys.blob_key(job_id, sha, enc)
                  for sha in held_shas for enc in BlobEncoding}
    for checkpoint_id in keep:
        manifest = manifests.get(checkpoint_id)
        if manifest is not None:
            referenced.update(keys.blob_key(job_id, f.sha256, f.encoding) for f in manifest.files)
    orphans = [k for k in blob_keys if k not in referenced]
    if orphans and _within_lease(started, job_id):
        store.delete(orphans)
    else:
        orphans = []
    if expired_holds:
        store.delete(expired_holds)
    _, expired_locks = holds.live_prune_locks(store, job_id)
    if expired_locks:
        store.delete(expired_locks)
    if doomed or orphans:
        logger.info("pruned job %s: %d checkpoint(s), %d blob(s)",
                    job_id, len(doomed), len(orphans))
    return doomed + orphans


def _within_lease(started: float, job_id: str) -> bool:
    if time.monotonic() - started <= holds.PRUNE_LEASE_S:
        return True
    logger.warning("prune of job %s ran past its %.0f s lease; the rest waits for the next one",
                   job_id, holds.PRUNE_LEASE_S)
    return False
