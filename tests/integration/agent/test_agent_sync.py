"""CheckpointSync: uploads in the background, retries while the store is down, keeps the
files local until one lands."""

from __future__ import annotations

from pathlib import Path

from core.models import CheckpointSpec
from scheduler.agent.sync import CheckpointSync
from scheduler.checkpoints import (
    CheckpointStoreError,
    LocalObjectStore,
    list_checkpoints,
)
from tests.fixtures.waiting import wait_until


class FlakyStore(LocalObjectStore):
    """A local store whose writes fail while ``down`` is set."""

    down = False
    failed_writes = 0

    def put_file(self, key: str, path: Path) -> None:
        if self.down:
            self.failed_writes += 1
            raise CheckpointStoreError("connection refused")
        super().put_file(key, path)


def tick_until(sync: CheckpointSync, done, timeout_s: float = 10.0) -> None:
    def ticked() -> bool:
        if not done():
            sync.tick()
        return done()

    wait_until(ticked, timeout_s, "the sync to get there")


def test_periodic_sync_retries_until_the_store_is_back(tmp_path: Path) -> None:
    store = FlakyStore(tmp_path / "store")
    src = tmp_path / "ckpt"
    src.mkdir()
    (src / "state").write_text("1")
    sync = CheckpointSync(store, "job-1", 1, src, CheckpointSpec(sync_interval_s=1))
    sync._due_mono = 0  # first sync due now
    store.down = True
    tick_until(sync, lambda: store.failed_writes >= 2)  # retried well before a second interval
    assert sync.checkpoint_id is None and (src / "state").read_text() == "1"
    store.down = False
    tick_until(sync, lambda: sync.checkpoint_id is not None)
    assert [m.checkpoint_id for m in list_checkpoints(store, "job-1")] == [sync.checkpoint_id]

    first = sync.checkpoint_id
    sync._due_mono = 0
    sync.tick()  # unchanged folder: nothing to do
    sync.final_commit(final=False, force=False)
    assert sync.checkpoint_id == first
    sync.close()


def test_final_commit_waits_out_a_short_outage(tmp_path: Path) -> None:
    store = FlakyStore(tmp_path / "store")
    src = tmp_path / "ckpt"
    src.mkdir()
    (src / "weights").write_bytes(b"w" * 100)
    sync = CheckpointSync(store, "job-1", 1, src, CheckpointSpec(sync_interval_s=60))
    store.down = True
    waits: list[int] = []

    def on_wait() -> None:  # the agent heartbeats here; the store comes back after two tries
        waits.append(1)
        if len(waits) == 2:
            store.down = False

    checkpoint_id = sync.final_commit(final=True, force=True, on_wait=on_wait)
    assert checkpoint_id is not None and len(waits) == 2
    assert list_checkpoints(store, "job-1")[0].final
    sync.close()


def test_retention_follows_the_spec_and_spares_the_restored_checkpoint(tmp_path: Path) -> None:
    """keep_last 2, keep_every 3 over 7 commits (sequences 1-7): kept are the last two (6, 7),
    every third by commit order (1, 4), and the checkpoint this attempt restored from (2)."""
    store = LocalObjectStore(tmp_path / "store")
    src = tmp_path / "ckpt"
    src.mkdir()
    spec = CheckpointSpec(sync_interval_s=60, keep_last=2, keep_every=3)
    sync = CheckpointSync(store, "job-1", 1, src, spec)
    ids = []
    for n in range(7):
        (src / "state").write_text(str(n))
        ids.append(sync.final_commit(final=False, force=True))
        if n == 1:
            sync.mark_restored(ids[1])  # as if the attempt had restored the second one
    kept = [m.checkpoint_id for m in list_checkpoints(store, "job-1")]
    assert kept == [ids[6], ids[5], ids[3], ids[1], ids[0]]  # newest first
    sync.close()


def test_compression_none_stores_files_as_they_are(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path / "store")
    src = tmp_path / "ckpt"
    src.mkdir()
    (src / "zeros").write_bytes(bytes(1 << 16))  # compresses to almost nothing
    for choice, encoding in (("none", "raw"), ("auto", "zstd")):
        sync = CheckpointSync(store, f"job-{choice}", 1, src,
                              CheckpointSpec(sync_interval_s=60, compression=choice))
        sync.final_commit(final=False, force=True)
        [manifest] = list_checkpoints(store, f"job-{choice}")
        assert [f.encoding for f in manifest.files] == [encoding]
        sync.close()


def test_keep_last_one_keeps_exactly_the_newest(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path / "store")
    src = tmp_path / "ckpt"
    src.mkdir()
    sync = CheckpointSync(store, "job-1", 1, src, CheckpointSpec(sync_interval_s=60, keep_last=1))
    for n in range(3):
        (src / "state").write_text(str(n))
        newest = sync.final_commit(final=n == 2, force=True)
    assert [m.checkpoint_id for m in list_checkpoints(store, "job-1")] == [newest]
    sync.close()
