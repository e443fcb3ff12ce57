import os

from scheduler.checkpoints.checkpoints import commit_checkpoint, restore_latest
from scheduler.checkpoints.local import LocalObjectStore


def test_names_that_are_not_utf8_are_skipped_not_fatal(tmp_path):
    src = tmp_path / "ckpt"
    src.mkdir()
    (src / "state.bin").write_bytes(b"weights")
    with open(os.fsencode(src) + b"/note-\xff.txt", "wb") as fh:
        fh.write(b"odd")
    store = LocalObjectStore(tmp_path / "store")
    manifest = commit_checkpoint(store, "job", src, attempt=1)
    assert [f.path for f in manifest.files] == ["state.bin"]
    restored = restore_latest(store, "job", tmp_path / "out")
    assert restored.checkpoint_id == manifest.checkpoint_id
    assert (tmp_path / "out" / "state.bin").read_bytes() == b"weights"
