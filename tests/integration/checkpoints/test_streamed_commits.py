"""Commits that stream new files straight to S3 and skip unchanged ones, against a real S3
server (SeaweedFS, ``tests/fixtures/s3_server.py``) and, where the store does not matter,
the local one too: a file rewritten mid-commit is never recorded with a wrong digest,
an incremental commit sends only the changed bytes, and what is restored is the source."""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

import numpy as np
import pytest
import zstandard

from scheduler.checkpoints import (
    ObjectStore,
    S3ObjectStore,
    commit_checkpoint,
    committing,
    digests,
    keys,
    open_store,
    restore_latest,
)
from scheduler.checkpoints.digests import DigestCache
from tests.integration.checkpoints.conftest import write

JOB = "job-s"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file()}


def blob_bytes(store: ObjectStore, sha256: str, encoding: str) -> bytes:
    data = store.get_bytes(keys.blob_key(JOB, sha256, encoding))
    return zstandard.ZstdDecompressor().decompress(data) if encoding == "zstd" else data


class BlobBodies:
    """Counts the body bytes of blob PutObject / UploadPart requests an S3 store's boto3
    client sends (the wire, not the store's own bookkeeping)."""

    def __init__(self, store: S3ObjectStore) -> None:
        self.sent = 0
        for op in ("PutObject", "UploadPart"):
            store._client.meta.events.register(f"before-send.s3.{op}", self._count)

    def _count(self, request, **_) -> None:  # noqa: ANN001 - botocore's prepared request
        if "/blobs/" in request.url:
            size = (request.headers.get("X-Amz-Decoded-Content-Length")
                    or request.headers.get("Content-Length"))
            self.sent += int(size or 0)


@pytest.fixture
def s3(s3_store_url: str) -> S3ObjectStore:
    store = open_store(s3_store_url)
    assert isinstance(store, S3ObjectStore)
    return store


class RewriteOnUpload:
    """Streams through ``inner``; the upload of ``key`` first rewrites ``path`` (same size,
    mtime put back) before it starts reading, as a job saving again between hash and
    upload."""

    def __init__(self, inner: S3ObjectStore, key: str, path: Path, data: bytes) -> None:
        self.inner, self.key, self.path, self.data = inner, key, path, data
        self.rewritten_key: str | None = None

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def put_stream(self, key: str, stream) -> None:
        if self.rewritten_key is None and key == self.key:
            self.rewritten_key = key
            st = os.stat(self.path)
            with open(self.path, "r+b") as out:  # in place: the commit's open file sees it
                out.write(self.data)
            os.utime(self.path, ns=(st.st_atime_ns, st.st_mtime_ns))
        self.inner.put_stream(key, stream)


def test_file_rewritten_between_hash_and_upload_is_recorded_with_what_was_stored(
        s3: S3ObjectStore, tmp_path: Path) -> None:
    first, second = os.urandom(12 << 20), os.urandom(12 << 20)  # multipart: 2 parts
    src = write(tmp_path / "src", {"state.bin": first, "config.json": b"{}"})
    racing = RewriteOnUpload(s3, keys.blob_key(JOB, sha(first), "raw"), src / "state.bin",
                             second)
    manifest = commit_checkpoint(racing, JOB, src, attempt=1, digests=DigestCache())
    assert manifest is not None and racing.rewritten_key is not None
    entry = {f.path: f for f in manifest.files}["state.bin"]
    # The upload under the first content's key failed before it completed: no object, and
    # no multipart upload left behind; the file was read again and its new bytes committed.
    assert racing.rewritten_key == keys.blob_key(JOB, sha(first), "raw")
    assert not s3.exists(racing.rewritten_key)
    assert not s3._client.list_multipart_uploads(Bucket=s3.bucket).get("Uploads")
    assert entry.sha256 == sha(second) and entry.size_bytes == len(second)
    assert blob_bytes(s3, entry.sha256, entry.encoding) == second
    got = restore_latest(s3, JOB, tmp_path / "dest")
    assert got is not None and got.checkpoint_id == manifest.checkpoint_id
    assert read_tree(tmp_path / "dest") == {"state.bin": second, "config.json": b"{}"}


def test_file_rewritten_all_through_the_commit_never_gets_a_wrong_digest(
        store: ObjectStore, tmp_path: Path) -> None:
    versions = [bytes([i]) * (3 << 20) for i in range(1, 5)]  # 3 MiB each, compressible
    src = write(tmp_path / "src", {"hot.bin": versions[0], "cold.bin": b"c" * 1000})
    stop = threading.Event()

    def keep_saving() -> None:
        i = 0
        while not stop.is_set():
            i += 1
            with open(src / "hot.bin", "r+b") as out:  # in place, in 1 MiB writes: torn reads
                for start in range(0, 3 << 20, 1 << 20):
                    out.write(versions[i % 4][start:start + (1 << 20)])

    saver = threading.Thread(target=keep_saving)
    saver.start()
    try:
        manifest = commit_checkpoint(store, JOB, src, attempt=1, digests=DigestCache())
    finally:
        stop.set()
        saver.join()
    assert manifest is not None
    for entry in manifest.files:
        assert sha(blob_bytes(store, entry.sha256, entry.encoding)) == entry.sha256
        assert entry.size_bytes == (3 << 20 if entry.path == "hot.bin" else 1000)
    assert restore_latest(store, JOB, tmp_path / "dest") is not None


def test_incremental_commit_sends_only_the_changed_bytes_and_restores_the_source(
        s3: S3ObjectStore, tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    files = {
        "dense.bin": rng.normal(0, 0.02, 3 << 20).astype(np.float32).tobytes(),  # 12 MiB raw
        "ramp.bin": np.repeat(np.arange(3 << 16, dtype=np.float32), 16).tobytes(),  # zstd
        "opt/moments.bin": os.urandom(9 << 20),
        "step.txt": b"100",
        "twin.bin": b"",
    }
    files["twin.bin"] = files["opt/moments.bin"]  # same bytes: one blob
    src = write(tmp_path / "src", files)
    counted = BlobBodies(s3)
    cache = DigestCache()
    full = commit_checkpoint(s3, JOB, src, attempt=1, digests=cache)
    assert full is not None
    by_path = {f.path: f for f in full.files}
    assert by_path["ramp.bin"].encoding == "zstd" and by_path["dense.bin"].encoding == "raw"
    assert counted.sent == sum(f.stored_size for f in full.files) - by_path["twin.bin"].size_bytes
    counted.sent = 0
    changed = os.urandom(9 << 20)
    write(src, {"opt/moments.bin": changed, "step.txt": b"200"})
    incremental = commit_checkpoint(s3, JOB, src, attempt=1, digests=cache)
    assert incremental is not None
    assert counted.sent == len(changed) + 3
    counted.sent = 0
    again = commit_checkpoint(s3, JOB, src, attempt=1, digests=DigestCache())  # cache cold
    assert again is not None and counted.sent == 0
    got = restore_latest(s3, JOB, tmp_path / "dest")
    assert got is not None and got.checkpoint_id == again.checkpoint_id
    assert read_tree(tmp_path / "dest") == {**files, "opt/moments.bin": changed,
                                            "step.txt": b"200"}


@pytest.fixture
def hashed(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Sizes of every file a commit reads to hash it in place."""
    sizes: list[int] = []
    real = committing._hash

    def counting(fh):  # noqa: ANN001, ANN202 - committing._hash's own signature
        got = real(fh)
        sizes.append(got[0])
        return got

    monkeypatch.setattr(committing, "_hash", counting)
    return sizes


def test_unchanged_settled_files_are_not_read_again(
        s3: S3ObjectStore, tmp_path: Path, hashed: list[int],
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Written "long ago" (the settle margin made 0 rather than waiting 2 s).
    monkeypatch.setattr(digests, "SETTLE_NS", 0)
    src = write(tmp_path / "src", {"a.bin": b"a" * 1000, "b.bin": b"b" * 2000,
                                   "c.bin": b"c" * 3000})
    cache = DigestCache()
    assert commit_checkpoint(s3, JOB, src, attempt=1, digests=cache) is not None
    assert sorted(hashed) == [1000, 2000, 3000]
    hashed.clear()
    write(src, {"b.bin": b"B" * 2000})
    second = commit_checkpoint(s3, JOB, src, attempt=1, digests=cache)
    assert hashed == [2000]
    hashed.clear()
    # Same size, mtime put back: ctime still moves, so it is read again.
    st = os.stat(src / "c.bin")
    write(src, {"c.bin": b"C" * 3000})
    os.utime(src / "c.bin", ns=(st.st_atime_ns, st.st_mtime_ns))
    third = commit_checkpoint(s3, JOB, src, attempt=1, digests=cache)
    assert hashed == [3000]
    assert second and third and {f.path: f.sha256 for f in third.files}["c.bin"] == sha(
        b"C" * 3000)
    hashed.clear()
    assert commit_checkpoint(s3, JOB, src, attempt=1, digests=cache) is not None
    assert hashed == []


def test_files_written_just_before_a_commit_are_hashed_again_next_time(
        store: ObjectStore, tmp_path: Path, hashed: list[int]) -> None:
    src = write(tmp_path / "src", {"a.bin": b"a" * 1000, "b.bin": b"b" * 2000})
    cache = DigestCache()
    first = commit_checkpoint(store, JOB, src, attempt=1, digests=cache)
    hashed.clear()
    second = commit_checkpoint(store, JOB, src, attempt=1, digests=cache)
    assert first and second and first.files == second.files
    # Not remembered (written < 2 s before the first read): a write in the same timestamp
    # tick could not be told apart. A store without put_stream hashes while copying.
    if hasattr(store, "put_stream"):
        assert sorted(hashed) == [1000, 2000]
