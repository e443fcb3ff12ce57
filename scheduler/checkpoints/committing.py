"""Getting a commit's files into the store as blobs: read once, upload only what is new.

For each file of the checkpoint folder (in order):

1. **Digest.** The file is opened and ``fstat``-ed; if :mod:`.digests` remembers its sha256
   for exactly this state, that is its digest and nothing is read. Otherwise it is read
   once, hashed, and ``fstat``-ed again; a state that moved meanwhile means the job is
   writing it, and it goes the frozen way (4.).
2. **Hold.** Every batch of digests (up to :data:`BATCH_BYTES` read or :data:`BATCH_FILES`
   files) is held against a concurrent prune, which is then waited for (:mod:`.holds`)
   before the store is asked which blobs it has.
3. **Upload.** A blob the store has (the previous checkpoint's, or any under its key) is
   not uploaded. A new one is streamed to a :class:`~.objectstore.StreamingObjectStore`
   straight from the open file, on :data:`UPLOADS_AT_ONCE` threads while the next files are
   hashed, through :class:`~.streaming.VerifyingReader`: an upload whose bytes do not hash
   to the key fails before it becomes visible, and that file starts again at 1. A file
   that changed in every try but the last goes the frozen way.
4. **Frozen.** The file is copied while hashed into a staging folder beside the checkpoint
   folder (the copy tried :data:`SNAPSHOT_TRIES` times until the source held still), and
   that copy is encoded and uploaded with ``put_file``: what a store without
   ``put_stream`` always gets for a new blob.

So a blob's bytes always hash to its key, a file is recorded with the digest of bytes it
held, and a commit of files that did not change reads and copies nothing.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from core.models import CheckpointManifest
from core.models.checkpoints import BlobEncoding
from scheduler.checkpoints import holds, keys
from scheduler.checkpoints.digests import DigestCache, FileState
from scheduler.checkpoints.encoding import encode_for_store
from scheduler.checkpoints.objectstore import ObjectStore
from scheduler.checkpoints.streaming import (
    READ_BYTES,
    FileChanged,
    VerifyingReader,
    ZstdReader,
    choose_encoding,
    zstd_size,
)

logger = logging.getLogger(__name__)

# A file whose state moves while it is copied is copied again this many times in all;
# after that the last copy is committed (its bytes and hash agree, but it may be torn).
SNAPSHOT_TRIES = 3
# Streamed tries of a file before it goes the frozen way.
STREAM_TRIES = 2
UPLOADS_AT_ONCE = 4
# Uploads submitted but not finished before hashing waits (each holds an open file).
MAX_PENDING = 2 * UPLOADS_AT_ONCE
BATCH_BYTES = 64 << 20
BATCH_FILES = 256

Stored = tuple[BlobEncoding, int]  # (encoding, stored bytes) of a blob


@dataclass(eq=False)
class FileToCommit:
    """One file of the commit: ``size``/``sha256`` of the bytes it is recorded with."""

    rel: str
    path: Path
    size: int = 0
    sha256: str = ""
    fh: BinaryIO | None = None
    copy: Path | None = None
    remember: FileState | None = None  # the state to cache the digest under, when safe
    frozen: bool = False

    def close(self) -> None:
        if self.fh is not None:
            self.fh.close()
            self.fh = None


@dataclass
class Stats:
    """What a commit did: files whose digest came from the cache, bytes hashed, blobs and
    bytes uploaded."""

    cached_files: int = 0
    hashed_bytes: int = 0
    uploaded_blobs: int = 0
    uploaded_bytes: int = 0
    retried_files: int = 0


@dataclass
class BlobWriter:
    """Stores the blobs of one commit; see the module doc. Use as a context manager (the
    exit closes files, waits for uploads, removes the staging folder and the holds)."""

    store: ObjectStore
    job_id: str
    src_dir: Path
    cache: DigestCache
    compress: bool
    previous: Callable[[], CheckpointManifest | None]
    stats: Stats = field(default_factory=Stats)

    def __post_init__(self) -> None:
        self.folder = str(Path(self.src_dir).absolute())
        self.streaming = callable(getattr(self.store, "put_stream", None))
        self.blobs: dict[str, Stored] = {}
        self.hold_keys: list[str] = []
        self._held: set[str] = set()
        self._known: dict[str, Stored] | None = None
        self._pending: dict[Future[Stored | None], FileToCommit] = {}
        self._sharing: dict[str, list[FileToCommit]] = {}  # sha -> files waiting on its upload
        self._retry: list[FileToCommit] = []
        self._staging: Path | None = None
        self._pool = ThreadPoolExecutor(UPLOADS_AT_ONCE, thread_name_prefix="checkpoint-put") \
            if self.streaming else None

    def __enter__(self) -> BlobWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        for f in self._pending.values():
            f.close()
        for key in self.hold_keys:
            holds.release(self.store, key)
        if self._staging is not None:
            shutil.rmtree(self._staging, ignore_errors=True)

    # -- the whole commit ------------------------------------------------------------------

    def write(self, entries: list[tuple[str, Path]]) -> list[FileToCommit]:
        """Store every file of ``entries`` (``(relative path, path)``, sorted); returns the
        files to record (those that vanished left out), each with its blob in
        :attr:`blobs`."""
        files = [FileToCommit(rel, path) for rel, path in entries]
        todo, tries = files, 0
        while todo:
            tries += 1
            for f in todo:
                f.frozen = f.frozen or not self.streaming or tries > STREAM_TRIES
            self._pass(todo, use_cache=tries == 1)
            todo, self._retry = self._retry, []
            self.stats.retried_files += len(todo)
        return [f for f in files if f.sha256]

    def remembered(self, files: list[FileToCommit]) -> dict[str, tuple[FileState, str]]:
        """Digest-cache entries of ``files`` that are safe to keep (see :mod:`.digests`)."""
        return {f.rel: (f.remember, f.sha256) for f in files if f.remember is not None}

    def _pass(self, files: list[FileToCommit], use_cache: bool) -> None:
        batch: list[FileToCommit] = []
        read = 0
        for f in files:
            before = self.stats.hashed_bytes
            if not self._digest(f, use_cache):
                continue
            batch.append(f)
            read += self.stats.hashed_bytes - before
            if read >= BATCH_BYTES or len(batch) >= BATCH_FILES:
                self._place(batch)
                batch, read = [], 0
        self._place(batch)
        self._drain(0)

    # -- 1. digest ---------------------------------------------------------------------------

    def _staging_dir(self) -> Path:
        if self._staging is None:
            self._staging = staging_dir(Path(self.src_dir), "staging")
        return self._staging

    def _digest(self, f: FileToCommit, use_cache: bool) -> bool:
        """Set ``f``'s size and sha256 (and its open file, or its frozen copy); ``False`` when
        it vanished. Raises ``OSError`` when it cannot be read."""
        f.close()
        f.sha256, f.copy, f.remember = "", None, None
        try:
            fh = open(f.path, "rb")  # noqa: SIM115 - kept open for the upload
        except FileNotFoundError:
            logger.info("checkpoint file %s vanished before it was read; left out", f.path)
            return False
        started_ns = time.time_ns()
        state = FileState.of(os.fstat(fh.fileno()))
        cached = self.cache.lookup(self.folder, f.rel, state) if use_cache else None
        if cached is not None:
            f.size, f.sha256, f.remember = state.size, cached, state
            if f.frozen:
                fh.close()  # copied only if the store turns out not to have it
            else:
                f.fh = fh
            self.stats.cached_files += 1
            return True
        if f.frozen:
            fh.close()
            return self._freeze(f)
        try:
            size, sha = _hash(fh)
        except BaseException:
            fh.close()
            raise
        self.stats.hashed_bytes += size
        if FileState.of(os.fstat(fh.fileno())) != state or size != state.size:
            fh.close()
            logger.info("checkpoint file %s changed while it was read; copying it", f.path)
            f.frozen = True
            return self._freeze(f)
        f.fh, f.size, f.sha256 = fh, size, sha
        f.remember = state if state.settled(started_ns) else None
        return True

    def _freeze(self, f: FileToCommit) -> bool:
        copy = self._staging_dir() / "files" / f.rel
        try:
            size, sha, state, started_ns = snapshot_file(f.path, copy)
        except FileNotFoundError:
            logger.info("checkpoint file %s vanished before it was copied; left out", f.path)
            return False
        self.stats.hashed_bytes += size
        f.size, f.sha256, f.copy = size, sha, copy
        f.remember = state if state is not None and state.settled(started_ns) else None
        return True

    # -- 2. hold, 3. upload ----------------------------------------------------------------

    def _place(self, batch: list[FileToCommit]) -> None:
        if not batch:
            return
        new = {f.sha256 for f in batch} - self._held
        if new:
            self.hold_keys.append(holds.put_hold(self.store, self.job_id, sha256s=new))
            self._held |= new
            holds.wait_for_prunes(self.store, self.job_id)
        if self._known is None:
            previous = self.previous()
            self._known = {m.sha256: (m.encoding, m.stored_size)
                           for m in previous.files} if previous else {}
        for f in batch:
            sha = f.sha256
            if sha in self.blobs:
                f.close()
            elif sha in self._sharing:
                self._sharing[sha].append(f)
                f.close()
            else:
                self._store_blob(f)

    def _store_blob(self, f: FileToCommit) -> None:
        sha = f.sha256
        known = self._known.get(sha) if self._known else None
        if known is not None and self.store.exists(keys.blob_key(self.job_id, sha, known[0])):
            self.blobs[sha] = known
            f.close()
            return
        if f.frozen:
            self._put_frozen(f)
            return
        assert f.fh is not None
        encoding = choose_encoding(f.fh.fileno(), f.size, self.compress)
        try:
            present = self._present(f, encoding)
        except FileChanged:
            f.close()
            self._retry.append(f)
            return
        if present is not None:
            self.blobs[sha] = present
            f.close()
            return
        self._drain(MAX_PENDING - 1)
        assert self._pool is not None
        self._sharing[sha] = [f]
        self._pending[self._pool.submit(self._stream, f, encoding)] = f

    def _present(self, f: FileToCommit, encoding: BlobEncoding) -> Stored | None:
        """How the store already holds ``f``'s blob (either encoding), or ``None``."""
        for enc in (encoding, BlobEncoding.ZSTD if encoding == BlobEncoding.RAW
                    else BlobEncoding.RAW):
            if enc == BlobEncoding.ZSTD and not self.compress:
                continue
            if self.store.exists(keys.blob_key(self.job_id, f.sha256, enc)):
                if enc == BlobEncoding.RAW:
                    return enc, f.size
                assert f.fh is not None
                return enc, zstd_size(f.fh, f.size, f.sha256)
        return None

    def _stream(self, f: FileToCommit, encoding: BlobEncoding) -> Stored | None:
        """Upload ``f``'s blob from its open file; ``None`` when the file changed."""
        assert f.fh is not None
        try:
            f.fh.seek(0)
            verified = VerifyingReader(f.fh, f.size, f.sha256)
            stream = verified if encoding == BlobEncoding.RAW else ZstdReader(verified, f.size)
            try:
                self.store.put_stream(  # type: ignore[attr-defined]
                    keys.blob_key(self.job_id, f.sha256, encoding), stream)
            except BaseException:
                if verified.changed:
                    return None
                raise
            stored = f.size if encoding == BlobEncoding.RAW else stream.produced  # type: ignore[union-attr]
            return encoding, stored
        finally:
            f.close()

    def _drain(self, keep: int) -> None:
        """Collect finished uploads until at most ``keep`` are in flight."""
        while len(self._pending) > keep:
            done, _ = wait(list(self._pending), return_when=FIRST_COMPLETED)
            for future in done:
                f = self._pending.pop(future)
                sharing = self._sharing.pop(f.sha256, [f])
                result = future.result()
                if result is None:
                    logger.info("checkpoint file %s changed while it was uploaded; again",
                                f.path)
                    self._retry.extend(sharing)
                    continue
                self.blobs[f.sha256] = result
                self.stats.uploaded_blobs += 1
                self.stats.uploaded_bytes += result[1]

    def _put_frozen(self, f: FileToCommit) -> None:
        if f.copy is None:  # the digest came from the first read or the cache: copy now
            old = f.sha256
            if not self._freeze(f):
                f.sha256 = ""
                return
            if f.sha256 != old:
                self._retry.append(f)  # new content: held and looked up again
                return
        assert f.copy is not None
        sha = f.sha256
        encoding, path, stored = encode_for_store(
            f.copy, self._staging_dir() / "zst" / sha, f.size, allow_compression=self.compress)
        key = keys.blob_key(self.job_id, sha, encoding)
        if not self.store.exists(key):
            self.store.put_file(key, path)
            self.stats.uploaded_blobs += 1
            self.stats.uploaded_bytes += stored
        self.blobs[sha] = (encoding, stored)
        for other in self._sharing.pop(sha, []):
            other.close()
        if path != f.copy:
            path.unlink(missing_ok=True)
        f.copy.unlink(missing_ok=True)  # the staging folder holds few copies at a time


def _hash(fh: BinaryIO) -> tuple[int, str]:
    digest, size = hashlib.sha256(), 0
    while chunk := fh.read(READ_BYTES):
        digest.update(chunk)
        size += len(chunk)
    return size, digest.hexdigest()


def snapshot_file(src: Path, dst: Path) -> tuple[int, str, FileState | None, int]:
    """Copy ``src`` to ``dst`` while hashing the bytes read; returns ``(size_bytes, sha256,
    state, read_started_ns)`` of exactly what ``dst`` holds, ``state`` being ``src``'s
    :class:`FileState` when it held still during the copy (``None`` when it never did in
    :data:`SNAPSHOT_TRIES` tries). Raises ``FileNotFoundError`` if ``src`` vanished."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    for attempt in range(1, SNAPSHOT_TRIES + 1):
        with open(src, "rb") as reader, open(dst, "wb") as writer:
            started_ns = time.time_ns()
            before = FileState.of(os.fstat(reader.fileno()))
            digest, size = hashlib.sha256(), 0
            while chunk := reader.read(1 << 20):
                digest.update(chunk)
                writer.write(chunk)
                size += len(chunk)
            try:
                after = FileState.of(os.stat(src))
            except FileNotFoundError:
                after = None
        if after == before and size == before.size:
            return size, digest.hexdigest(), before, started_ns
        logger.warning("checkpoint file %s changed while copying (try %d of %d)",
                       src, attempt, SNAPSHOT_TRIES)
    return size, digest.hexdigest(), None, started_ns


def staging_dir(beside: Path, label: str) -> Path:
    """A new hidden temp folder beside ``beside`` (else in the system temp folder)."""
    # Beside the source, not in /tmp: checkpoints can be many GiB and /tmp is often small tmpfs.
    try:
        beside.parent.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=f".{beside.name}.{label}-", dir=beside.parent))
    except OSError:
        return Path(tempfile.mkdtemp(prefix=f"ga-{label}-"))
