"""Retention, compression, old manifests and concurrent commit/prune/restore, against BOTH
stores: a local folder and a real S3 server (SeaweedFS, ``tests/fixtures/s3_server.py``)."""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from pathlib import Path

import numpy as np

from scheduler.checkpoints import (
    ObjectStore,
    commit_checkpoint,
    keys,
    list_checkpoints,
    prune_checkpoints,
    restore_latest,
)
from scheduler.checkpoints import holds as holds_module
from tests.integration.checkpoints.conftest import write

JOB = "job-r"


def blob_keys_of(store: ObjectStore) -> set[str]:
    return set(store.list_keys(keys.blobs_prefix(JOB)))


def referenced(store: ObjectStore) -> set[str]:
    return {keys.blob_key(JOB, f.sha256, f.encoding)
            for m in list_checkpoints(store, JOB) for f in m.files}


def commit_steps(store: ObjectStore, src: Path, steps: range) -> list[str]:
    out = []
    for step in steps:
        write(src, {"shared.bin": b"same every time", "step.txt": f"step {step}".encode()})
        manifest = commit_checkpoint(store, JOB, src, attempt=1)
        assert manifest is not None and manifest.sequence == step
        out.append(manifest.checkpoint_id)
    return out


def test_retention_keeps_last_and_every_kth_by_commit_order(
        store: ObjectStore, tmp_path: Path) -> None:
    src = tmp_path / "src"
    ids = commit_steps(store, src, range(1, 8))  # sequences 1..7
    store.put_bytes(keys.blob_key(JOB, "0" * 64), b"orphan of a crashed commit")
    # keep_last 2 -> 6, 7; keep_every 3 -> 1, 4, 7.
    deleted = prune_checkpoints(store, JOB, keep_last=2, keep_every=3)
    kept = sorted(m.checkpoint_id for m in list_checkpoints(store, JOB))
    assert kept == [ids[0], ids[3], ids[5], ids[6]]
    assert keys.blob_key(JOB, "0" * 64) in deleted
    assert blob_keys_of(store) == referenced(store)
    # One more (sequence 8) and prune again: 7, 8 and 1, 4, 7; 6 goes.
    ids += commit_steps(store, src, range(8, 9))
    prune_checkpoints(store, JOB, keep_last=2, keep_every=3)
    kept = sorted(m.checkpoint_id for m in list_checkpoints(store, JOB))
    assert kept == [ids[0], ids[3], ids[6], ids[7]]
    assert blob_keys_of(store) == referenced(store)
    got = restore_latest(store, JOB, tmp_path / "dest")
    assert got is not None and got.checkpoint_id == ids[7]
    assert (tmp_path / "dest" / "step.txt").read_bytes() == b"step 8"
    # Nothing of the protocol is left behind.
    assert store.list_keys(keys.holds_prefix(JOB)) == []
    assert store.list_keys(keys.prunes_prefix(JOB)) == []


def test_protected_checkpoint_survives(store: ObjectStore, tmp_path: Path) -> None:
    ids = commit_steps(store, tmp_path / "src", range(1, 5))
    prune_checkpoints(store, JOB, keep_last=1, protect=[ids[1], None])
    assert sorted(m.checkpoint_id for m in list_checkpoints(store, JOB)) == [ids[1], ids[3]]
    assert blob_keys_of(store) == referenced(store)


def test_tensor_is_compressed_and_random_stored_raw_both_round_trip(
        store: ObjectStore, tmp_path: Path) -> None:
    tensor = np.linspace(0, 1, 600_000, dtype=np.float32).round(3).tobytes()  # 2.4 MB
    noise = os.urandom(1_500_000)
    src = write(tmp_path / "src", {"model.bin": tensor, "noise.bin": noise})
    manifest = commit_checkpoint(store, JOB, src, attempt=1)
    assert manifest is not None
    by_path = {f.path: f for f in manifest.files}
    assert by_path["model.bin"].encoding == "zstd"
    assert by_path["model.bin"].stored_size <= 0.9 * len(tensor)
    assert by_path["model.bin"].sha256 == hashlib.sha256(tensor).hexdigest()
    assert by_path["noise.bin"].encoding == "raw"
    assert by_path["noise.bin"].stored_size == len(noise)
    assert blob_keys_of(store) == {
        keys.blob_key(JOB, by_path["model.bin"].sha256) + ".zst",
        keys.blob_key(JOB, by_path["noise.bin"].sha256)}
    assert restore_latest(store, JOB, tmp_path / "dest") is not None
    assert (tmp_path / "dest" / "model.bin").read_bytes() == tensor
    assert (tmp_path / "dest" / "noise.bin").read_bytes() == noise
    # Unchanged files are not encoded or uploaded again; with compression off a new blob is raw.
    write(src, {"extra.bin": bytes(100_000)})
    second = commit_checkpoint(store, JOB, src, attempt=1, compression="none")
    assert second is not None
    assert {f.path: f.encoding.value for f in second.files} == {
        "model.bin": "zstd", "noise.bin": "raw", "extra.bin": "raw"}
    assert second.stored_bytes < second.total_bytes


def test_only_checkpoint_with_a_corrupted_compressed_blob_is_refused(
        store: ObjectStore, tmp_path: Path) -> None:
    src = write(tmp_path / "src", {"state.bin": b"weights " * 100_000})
    manifest = commit_checkpoint(store, JOB, src, attempt=1)
    assert manifest is not None and manifest.files[0].encoding == "zstd"
    key = keys.blob_key(JOB, manifest.files[0].sha256, "zstd")
    data = bytearray(store.get_bytes(key))
    data[len(data) // 2] ^= 0x01
    store.put_bytes(key, bytes(data))
    dest = write(tmp_path / "dest", {"mine": b"untouched"})
    assert restore_latest(store, JOB, dest) is None
    assert (dest / "mine").read_bytes() == b"untouched" and not (dest / "state.bin").exists()


def test_manifest_from_before_compression_restores_and_is_reused(
        store: ObjectStore, tmp_path: Path) -> None:
    data = b"old checkpoint " * 10_000  # compressible, but stored raw by the old version
    sha = hashlib.sha256(data).hexdigest()
    store.put_bytes(keys.blob_key(JOB, sha), data)
    old = {"job_id": JOB, "checkpoint_id": "1700000000000-a0", "attempt": 0,
           "created_at": "2023-11-14T22:13:20Z", "total_bytes": len(data), "final": False,
           "files": [{"path": "state.bin", "size_bytes": len(data), "sha256": sha}]}
    store.put_bytes(keys.manifest_key(JOB, "1700000000000-a0"), json.dumps(old).encode())
    restored = restore_latest(store, JOB, tmp_path / "job")
    assert restored is not None and restored.files[0].encoding == "raw"
    assert restored.sequence is None
    assert (tmp_path / "job" / "state.bin").read_bytes() == data
    # The resumed job commits the same file: the raw blob is reused, not compressed anew.
    new = commit_checkpoint(store, JOB, tmp_path / "job", attempt=1)
    assert new is not None and new.sequence == 2
    assert new.files[0].encoding == "raw" and new.files[0].stored_bytes == len(data)
    assert blob_keys_of(store) == {keys.blob_key(JOB, sha)}
    prune_checkpoints(store, JOB, keep_last=1)
    assert [m.checkpoint_id for m in list_checkpoints(store, JOB)] == [new.checkpoint_id]
    assert blob_keys_of(store) == {keys.blob_key(JOB, sha)}


class PruneWhenBlobChecked:
    """A store through which a commit runs; when the commit asks whether ``blob`` exists, a
    prune (another machine's, through the plain store) runs to completion first."""

    def __init__(self, inner: ObjectStore, blob: str, keep_last: int) -> None:
        self.inner, self.blob, self.keep_last = inner, blob, keep_last
        self.pruned: list[str] | None = None

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def exists(self, key: str) -> bool:
        answer = self.inner.exists(key)
        if key == self.blob and self.pruned is None:
            self.pruned = prune_checkpoints(self.inner, JOB, keep_last=self.keep_last)
        return answer


def test_prune_during_commit_keeps_the_blob_the_commit_relies_on(
        store: ObjectStore, tmp_path: Path) -> None:
    # A holds content x, B holds y; C returns to x, whose blob exists (A's). A prune with
    # keep_last 1 running while C is between "x exists" and its manifest would see x named
    # by A alone (doomed) and delete it; C's hold must keep it.
    src = tmp_path / "src"
    x, y = b"x-state " * 5_000, b"y-state " * 5_000
    write(src, {"s.bin": x})
    a = commit_checkpoint(store, JOB, src, attempt=1)
    write(src, {"s.bin": y})
    b = commit_checkpoint(store, JOB, src, attempt=1)
    assert a and b
    write(src, {"s.bin": x})
    # C's previous checkpoint is B, so x is encoded anew and its existence checked.
    racing = PruneWhenBlobChecked(store, keys.blob_key(JOB, a.files[0].sha256, "zstd"), 1)
    c = commit_checkpoint(racing, JOB, src, attempt=1)
    assert c is not None and racing.pruned is not None
    assert keys.manifest_key(JOB, a.checkpoint_id) in racing.pruned  # the prune did run
    assert keys.blob_key(JOB, a.files[0].sha256, "zstd") not in racing.pruned
    got = restore_latest(store, JOB, tmp_path / "dest")
    assert got is not None and got.checkpoint_id == c.checkpoint_id
    assert (tmp_path / "dest" / "s.bin").read_bytes() == x


class CommitDuringBlobDelete:
    """A store through which a prune runs; just before it deletes blobs, another machine starts
    a commit (through the plain store) and the prune goes on once that commit has written its
    hold, so the commit finds the prune's lock live."""

    def __init__(self, inner: ObjectStore, src: Path) -> None:
        self.inner, self.src = inner, src
        self.thread: threading.Thread | None = None
        self.committed: list[object] = []

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def delete(self, keys_: object) -> None:
        batch = list(keys_)  # type: ignore[call-overload]
        if self.thread is None and any("/blobs/" in k for k in batch):
            self.thread = threading.Thread(target=lambda: self.committed.append(
                commit_checkpoint(self.inner, JOB, self.src, attempt=2)))
            self.thread.start()
            deadline = time.monotonic() + 20
            while not self.inner.list_keys(keys.holds_prefix(JOB)):
                assert time.monotonic() < deadline, "the commit never wrote its hold"
                time.sleep(0.01)
            time.sleep(0.2)  # the commit now looks for prune locks and sees this one
        self.inner.delete(batch)


def test_commit_during_prune_waits_and_uploads_what_the_prune_deleted(
        store: ObjectStore, tmp_path: Path) -> None:
    src = tmp_path / "src"
    x, y = b"x-state " * 5_000, b"y-state " * 5_000
    write(src, {"s.bin": x})
    a = commit_checkpoint(store, JOB, src, attempt=1)
    write(src, {"s.bin": y})
    b = commit_checkpoint(store, JOB, src, attempt=1)
    assert a and b
    write(src, {"s.bin": x})  # the racing commit returns to content x, A's blob
    racing = CommitDuringBlobDelete(store, src)
    deleted = prune_checkpoints(racing, JOB, keep_last=1)
    assert racing.thread is not None
    racing.thread.join(timeout=60)
    x_key = keys.blob_key(JOB, a.files[0].sha256, "zstd")
    assert x_key in deleted  # A's blob went (the prune saw no hold when it read them) ...
    c = racing.committed[0]
    assert c is not None
    assert store.exists(x_key)  # ... and the waiting commit uploaded it again
    got = restore_latest(store, JOB, tmp_path / "dest")
    assert got is not None and got.checkpoint_id == c.checkpoint_id  # type: ignore[attr-defined]
    assert (tmp_path / "dest" / "s.bin").read_bytes() == x


class PruneDuringRestore:
    """While a restore downloads its first blob, another agent commits and prunes to 1."""

    def __init__(self, inner: ObjectStore, other_src: Path) -> None:
        self.inner, self.other_src, self.done = inner, other_src, False

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def get_file(self, key: str, dest_path: Path) -> None:
        if not self.done:
            self.done = True
            commit_checkpoint(self.inner, JOB, self.other_src, attempt=2)
            prune_checkpoints(self.inner, JOB, keep_last=1)
        self.inner.get_file(key, dest_path)


def test_checkpoint_being_restored_is_not_pruned(store: ObjectStore, tmp_path: Path) -> None:
    a = commit_checkpoint(store, JOB, write(tmp_path / "src", {"s.bin": b"a" * 9_999}), 1)
    assert a is not None
    other = write(tmp_path / "other", {"s.bin": b"b" * 9_999})
    got = restore_latest(PruneDuringRestore(store, other), JOB, tmp_path / "dest")
    assert got is not None and got.checkpoint_id == a.checkpoint_id
    assert (tmp_path / "dest" / "s.bin").read_bytes() == b"a" * 9_999
    # The hold is gone now: the next prune applies keep_last 1.
    prune_checkpoints(store, JOB, keep_last=1)
    assert len(list_checkpoints(store, JOB)) == 1 and blob_keys_of(store) == referenced(store)


def test_concurrent_commits_and_prunes_never_lose_a_referenced_blob(
        store: ObjectStore, tmp_path: Path) -> None:
    """Two agents of one job commit (contents that come back, so blobs are reused) while two
    prune with keep_last 1; afterwards every committed checkpoint still listed restores."""
    contents = [b"A" * 20_000, b"B" * 20_000, os.urandom(20_000)]
    errors: list[BaseException] = []

    def agent(n: int) -> None:
        src = tmp_path / f"agent{n}"
        try:
            for i in range(8):
                write(src, {"s.bin": contents[(i + n) % 3], "n.txt": str(n).encode()})
                commit_checkpoint(store, JOB, src, attempt=n)
                prune_checkpoints(store, JOB, keep_last=1)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test thread below
            errors.append(exc)

    threads = [threading.Thread(target=agent, args=(n,)) for n in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=240)
    assert not errors, errors
    present = blob_keys_of(store)
    manifests = list_checkpoints(store, JOB)
    assert manifests
    for m in manifests:
        for f in m.files:
            assert keys.blob_key(JOB, f.sha256, f.encoding) in present, m.checkpoint_id
    got = restore_latest(store, JOB, tmp_path / "dest")
    assert got is not None and got.checkpoint_id == manifests[0].checkpoint_id
    assert holds_module.read_holds(store, JOB)[0] == []
