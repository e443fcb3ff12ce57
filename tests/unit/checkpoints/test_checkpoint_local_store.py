"""LocalObjectStore specifics and commit/restore behaviour that needs a store double."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
import zstandard

from scheduler.checkpoints import (
    CheckpointStoreError,
    LocalObjectStore,
    commit_checkpoint,
    dir_fingerprint,
    keys,
    restore_latest,
    scan_checkpoint_dir,
)


def test_a_crashed_write_leaves_no_object(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = LocalObjectStore(tmp_path)
    store.put_bytes("k/obj", b"old")

    def crash(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(CheckpointStoreError, match="disk full"):
        store.put_bytes("k/obj", b"new")
    with pytest.raises(CheckpointStoreError):
        store.put_bytes("k/other", b"new")
    monkeypatch.undo()
    assert store.get_bytes("k/obj") == b"old"
    assert store.list_keys("") == ["k/obj"]
    assert sorted(p.name for p in (tmp_path / "k").iterdir()) == ["obj"]  # temp files removed


def test_temp_files_are_never_listed(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    store.put_bytes("a/b", b"1")
    (tmp_path / "a" / ".ga-tmp-abc").write_bytes(b"half")
    assert store.list_keys("a/") == ["a/b"]


@pytest.mark.parametrize("key", ["", "/abs", "a/../b", "a//b", "a/", "./a", "a/.ga-tmp-x"])
def test_bad_keys_are_refused(tmp_path: Path, key: str) -> None:
    with pytest.raises(ValueError):
        LocalObjectStore(tmp_path).put_bytes(key, b"x")


def test_bad_job_ids_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="job id"):
        commit_checkpoint(LocalObjectStore(tmp_path / "s"), "../evil", tmp_path, attempt=1)


def test_scan_skips_files_being_written(tmp_path: Path) -> None:
    for rel in ["model.pt", "sub/opt.pt", "model.pt.tmp", ".model.pt.swp", ".partial/x", "a.tmp/y"]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(b"x")
    assert [rel for rel, _ in scan_checkpoint_dir(tmp_path)] == ["model.pt", "sub/opt.pt"]
    before = dir_fingerprint(tmp_path)
    (tmp_path / "model.pt.tmp").write_bytes(b"more")
    assert dir_fingerprint(tmp_path) == before
    (tmp_path / "model.pt").write_bytes(b"changed")
    assert dir_fingerprint(tmp_path) != before


def test_rewrite_during_upload_cannot_break_the_checkpoint(tmp_path: Path) -> None:
    """The job rewrites its file while the agent uploads: what lands must match the manifest."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "state.bin").write_bytes(b"A" * 10_000)

    class RewritingStore(LocalObjectStore):
        def put_file(self, key: str, path: Path) -> None:
            (src / "state.bin").write_bytes(b"B" * 7_000)  # the job saves again mid-commit
            super().put_file(key, path)

    store = RewritingStore(tmp_path / "store")
    manifest = commit_checkpoint(store, "j", src, attempt=1)
    assert manifest is not None
    entry = manifest.files[0]
    blob = tmp_path / "store" / keys.blob_key("j", entry.sha256, entry.encoding)
    assert entry.encoding == "zstd"  # 10,000 equal bytes compress
    assert zstandard.decompress(blob.read_bytes()) == b"A" * 10_000
    assert hashlib.sha256(b"A" * 10_000).hexdigest() == entry.sha256
    assert restore_latest(store, "j", tmp_path / "dest") is not None


def test_store_outage_during_restore_raises_instead_of_using_an_older_checkpoint(
    tmp_path: Path,
) -> None:
    store = LocalObjectStore(tmp_path / "store")
    src = tmp_path / "src"
    src.mkdir()
    for step in (1, 2):
        (src / "s").write_bytes(str(step).encode())
        commit_checkpoint(store, "j", src, attempt=1)

    class Down(LocalObjectStore):
        def get_file(self, key: str, dest_path: Path) -> None:
            raise CheckpointStoreError("connection refused")

    with pytest.raises(CheckpointStoreError):
        restore_latest(Down(tmp_path / "store"), "j", tmp_path / "dest")
    assert not (tmp_path / "dest").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
