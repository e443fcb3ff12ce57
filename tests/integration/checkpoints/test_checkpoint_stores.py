"""The checkpoint store contract, run against BOTH stores: a local folder and a real S3 server
(SeaweedFS, started once per session by ``tests/fixtures/s3_server.py``)."""

from __future__ import annotations

import io
import logging
import tarfile
from pathlib import Path

import pytest

from scheduler.checkpoints import (
    ObjectNotFound,
    ObjectStore,
    UnsafeBundle,
    commit_checkpoint,
    download_workdir,
    keys,
    latest_checkpoint_id,
    list_checkpoints,
    prune_checkpoints,
    restore_latest,
    upload_workdir,
)
from tests.integration.checkpoints.conftest import write

JOB = "job-1"


class Counting:
    """Wraps a store and counts blob uploads (to see deduplication), from a file or (a store
    that has ``put_stream``) a stream."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.blob_puts: list[str] = []

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def put_file(self, key: str, path: Path) -> None:
        if "/blobs/" in key:
            self.blob_puts.append(key)
        self.inner.put_file(key, path)

    def _put_stream(self, key: str, stream) -> None:
        if "/blobs/" in key:
            self.blob_puts.append(key)
        self.inner.put_stream(key, stream)

    def __getattribute__(self, name: str):
        if name == "put_stream":  # only where the wrapped store streams
            inner = object.__getattribute__(self, "inner")
            if not hasattr(inner, "put_stream"):
                raise AttributeError(name)
            return object.__getattribute__(self, "_put_stream")
        return object.__getattribute__(self, name)


def read_tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file()}


def flip_one_byte(store: ObjectStore, key: str) -> None:
    data = bytearray(store.get_bytes(key))
    data[len(data) // 2] ^= 0x01
    store.put_bytes(key, bytes(data))


# -- the object-store protocol ---------------------------------------------------------------


def test_object_store_basics(store: ObjectStore, tmp_path: Path) -> None:
    store.put_bytes("a/b/2", b"two")
    store.put_bytes("a/b/1", b"one")
    store.put_bytes("a/c", b"")
    assert store.get_bytes("a/b/2") == b"two"
    assert store.get_bytes("a/c") == b""
    assert store.list_keys("a/b/") == ["a/b/1", "a/b/2"]
    assert store.list_keys("a/") == ["a/b/1", "a/b/2", "a/c"]
    assert store.list_keys("zzz/") == []
    assert store.exists("a/b/1") and not store.exists("a/b/3")
    with pytest.raises(ObjectNotFound) as info:
        store.get_bytes("a/missing")
    assert info.value.key == "a/missing"
    src = tmp_path / "big.bin"
    src.write_bytes(bytes(range(256)) * 4096)  # 1 MiB
    store.put_file("files/big", src)
    store.get_file("files/big", tmp_path / "out" / "big.bin")
    assert (tmp_path / "out" / "big.bin").read_bytes() == src.read_bytes()
    with pytest.raises(ObjectNotFound):
        store.get_file("files/none", tmp_path / "out" / "none")
    store.delete(["a/b/1", "a/never-existed"])
    assert store.list_keys("a/") == ["a/b/2", "a/c"]


# -- checkpoints -------------------------------------------------------------------------------


def test_commit_and_restore_roundtrip(store: ObjectStore, tmp_path: Path) -> None:
    files = {"model.pt": bytes(range(256)) * 100, "opt/state.bin": b"\x00\x01\x02",
             "empty": b"", "nested/deep/notes.txt": "héllo\n".encode()}
    src = write(tmp_path / "src", {**files, "partial.tmp": b"half", ".lock": b"x",
                                   ".cache/x": b"y"})
    manifest = commit_checkpoint(store, JOB, src, attempt=2)
    assert manifest is not None
    assert manifest.checkpoint_id.endswith("-a2") and manifest.attempt == 2 and not manifest.final
    assert sorted(f.path for f in manifest.files) == sorted(files)
    assert manifest.total_bytes == sum(len(v) for v in files.values())
    assert latest_checkpoint_id(store, JOB) == manifest.checkpoint_id

    dest = write(tmp_path / "dest", {"stale.txt": b"from an older run"})
    restored = restore_latest(store, JOB, dest)
    assert restored is not None and restored.checkpoint_id == manifest.checkpoint_id
    assert read_tree(dest) == files  # stale file gone, temp/hidden files never shipped
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left


def test_empty_dir_commits_nothing(store: ObjectStore, tmp_path: Path) -> None:
    src = write(tmp_path / "src", {"only.tmp": b"x"})
    assert commit_checkpoint(store, JOB, src, attempt=1) is None
    assert commit_checkpoint(store, JOB, tmp_path / "missing", attempt=1) is None
    assert store.list_keys("jobs/") == []
    assert restore_latest(store, JOB, tmp_path / "dest") is None


def test_unchanged_files_are_not_uploaded_again(store: ObjectStore, tmp_path: Path) -> None:
    counting = Counting(store)
    src = write(tmp_path / "src", {"weights.bin": b"w" * 5000, "step.txt": b"1", "copy.bin": b"w" * 5000})
    first = commit_checkpoint(counting, JOB, src, attempt=1)
    assert len(counting.blob_puts) == 2  # identical files share one blob
    write(src, {"step.txt": b"2"})
    second = commit_checkpoint(counting, JOB, src, attempt=1)
    assert len(counting.blob_puts) == 3  # only step.txt's new content
    assert first and second and second.checkpoint_id > first.checkpoint_id


def test_checkpoint_ids_sort_in_commit_order(store: ObjectStore, tmp_path: Path) -> None:
    src = tmp_path / "src"
    ids = []
    for step in range(4):
        write(src, {"step": str(step).encode()})
        manifest = commit_checkpoint(store, JOB, src, attempt=1 if step < 2 else 2)
        assert manifest is not None
        ids.append(manifest.checkpoint_id)
    assert ids == sorted(ids) and len(set(ids)) == 4
    assert [m.checkpoint_id for m in list_checkpoints(store, JOB)] == ids[::-1]


def test_blobs_without_manifest_are_invisible(store: ObjectStore, tmp_path: Path) -> None:
    class CrashBeforeManifest(Counting):
        def put_bytes(self, key: str, data: bytes) -> None:
            if "/checkpoints/" in key:
                raise RuntimeError("agent died before writing the manifest")
            self.inner.put_bytes(key, data)

    src = write(tmp_path / "src", {"a": b"aaa", "b": b"bbb"})
    with pytest.raises(RuntimeError):
        commit_checkpoint(CrashBeforeManifest(store), JOB, src, attempt=1)
    assert len(store.list_keys(keys.blobs_prefix(JOB))) == 2  # the blobs did land
    assert list_checkpoints(store, JOB) == []
    assert latest_checkpoint_id(store, JOB) is None
    assert restore_latest(store, JOB, tmp_path / "dest") is None
    assert not (tmp_path / "dest").exists()


def test_corrupted_blob_falls_back_to_previous_checkpoint(
    store: ObjectStore, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    src = write(tmp_path / "src", {"model.bin": b"epoch-1 " * 1000, "config.json": b"{}"})
    older = commit_checkpoint(store, JOB, src, attempt=1)
    write(src, {"model.bin": b"epoch-2 " * 1000})
    newer = commit_checkpoint(store, JOB, src, attempt=1)
    assert older and newer
    newer_blob = next(f for f in newer.files if f.path == "model.bin")
    flip_one_byte(store, keys.blob_key(JOB, newer_blob.sha256, newer_blob.encoding))

    with caplog.at_level(logging.WARNING, logger="scheduler.checkpoints"):
        restored = restore_latest(store, JOB, tmp_path / "dest")
    assert restored is not None and restored.checkpoint_id == older.checkpoint_id
    assert (tmp_path / "dest" / "model.bin").read_bytes() == b"epoch-1 " * 1000
    assert any(newer.checkpoint_id in r.getMessage() for r in caplog.records)


def test_missing_blob_falls_back_and_nothing_valid_leaves_dest_alone(
    store: ObjectStore, tmp_path: Path
) -> None:
    src = write(tmp_path / "src", {"model.bin": b"v1"})
    older = commit_checkpoint(store, JOB, src, attempt=1)
    write(src, {"model.bin": b"v2"})
    newer = commit_checkpoint(store, JOB, src, attempt=1)
    assert older and newer
    store.delete([keys.blob_key(JOB, newer.files[0].sha256)])
    assert restore_latest(store, JOB, tmp_path / "dest").checkpoint_id == older.checkpoint_id

    flip_one_byte(store, keys.blob_key(JOB, older.files[0].sha256))
    dest = write(tmp_path / "dest2", {"mine": b"keep me"})
    assert restore_latest(store, JOB, dest) is None
    assert read_tree(dest) == {"mine": b"keep me"}


def test_unreadable_manifest_is_skipped(
    store: ObjectStore, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    good = commit_checkpoint(store, JOB, write(tmp_path / "src", {"a": b"1"}), attempt=1)
    assert good
    store.put_bytes(keys.manifest_key(JOB, "9999999999999-a9"), b"{not json")
    with caplog.at_level(logging.WARNING):
        manifests = list_checkpoints(store, JOB)
    assert [m.checkpoint_id for m in manifests] == [good.checkpoint_id]
    assert "9999999999999-a9" in caplog.text
    assert restore_latest(store, JOB, tmp_path / "dest").checkpoint_id == good.checkpoint_id


def test_prune_keeps_newest_and_their_blobs(store: ObjectStore, tmp_path: Path) -> None:
    src = tmp_path / "src"
    manifests = []
    for step in range(5):
        write(src, {"shared.bin": b"same every time", "step.txt": f"step {step}".encode()})
        manifests.append(commit_checkpoint(store, JOB, src, attempt=1))
    store.put_bytes(keys.blob_key(JOB, "0" * 64), b"orphan of a crashed commit")

    deleted = prune_checkpoints(store, JOB, keep=3)

    kept = [m.checkpoint_id for m in list_checkpoints(store, JOB)]
    assert kept == [m.checkpoint_id for m in manifests[:1:-1]]
    wanted = {f.sha256 for m in manifests[2:] for f in m.files}
    blob_prefix = keys.blobs_prefix(JOB)
    assert {k[len(blob_prefix):] for k in store.list_keys(blob_prefix)} == wanted
    assert keys.manifest_key(JOB, manifests[0].checkpoint_id) in deleted
    assert restore_latest(store, JOB, tmp_path / "dest").checkpoint_id == manifests[-1].checkpoint_id
    assert (tmp_path / "dest" / "step.txt").read_bytes() == b"step 4"
    with pytest.raises(ValueError):
        prune_checkpoints(store, JOB, keep=0)


# -- code bundles ------------------------------------------------------------------------------


def test_workdir_bundle_roundtrip(store: ObjectStore, tmp_path: Path) -> None:
    src = write(tmp_path / "code", {"train.py": b"print('hi')\n", "pkg/mod.py": b"X = 1\n",
                                    "pkg/__pycache__/mod.cpython-311.pyc": b"junk",
                                    ".git/HEAD": b"ref: refs/heads/main"})
    assert download_workdir(store, JOB, tmp_path / "none") is False
    key = upload_workdir(store, JOB, src)
    assert key == "jobs/job-1/code.tar.gz"
    assert download_workdir(store, JOB, tmp_path / "out") is True
    assert read_tree(tmp_path / "out") == {"train.py": b"print('hi')\n", "pkg/mod.py": b"X = 1\n"}


@pytest.mark.parametrize("member", ["../escape.txt", "/etc/evil", "ok/../../escape.txt"])
def test_unsafe_bundle_is_refused(store: ObjectStore, tmp_path: Path, member: str) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        info = tarfile.TarInfo(member)
        info.size = 4
        tar.addfile(info, io.BytesIO(b"evil"))
    store.put_bytes(keys.code_bundle_key(JOB), buffer.getvalue())
    with pytest.raises(UnsafeBundle, match="member"):
        download_workdir(store, JOB, tmp_path / "out" / "job")
    assert not (tmp_path / "out" / "escape.txt").exists()
    assert not list((tmp_path / "out" / "job").iterdir())
