"""Per-file zstd: kept only when it saves at least 10 %, streamed, verified on decode."""

from __future__ import annotations

import gzip
import hashlib
import os
from pathlib import Path

import numpy as np
import pytest

from core.models.checkpoints import BlobEncoding
from scheduler.checkpoints.encoding import (
    CHUNK_BYTES,
    decode_blob,
    encode_for_store,
    looks_compressed,
)
from scheduler.checkpoints.objectstore import CheckpointCorrupt


def _encode(path: Path) -> tuple[BlobEncoding, Path, int]:
    return encode_for_store(path, path.with_name(path.name + ".zst"), path.stat().st_size)


def test_compressible_file_spanning_many_chunks_round_trips_byte_exact(tmp_path: Path) -> None:
    # A float32 tensor with structure (a slow ramp): 3 MiB, more than one chunk.
    data = np.repeat(np.arange(0, 3 * CHUNK_BYTES // 64, dtype=np.float32), 16).tobytes()
    assert len(data) == 3 * CHUNK_BYTES
    src = tmp_path / "weights.bin"
    src.write_bytes(data)
    encoding, stored_path, stored = _encode(src)
    assert encoding == BlobEncoding.ZSTD and stored_path != src
    assert stored == stored_path.stat().st_size <= 0.9 * len(data)
    size, sha = decode_blob(stored_path, tmp_path / "out.bin", encoding)
    assert (size, sha) == (len(data), hashlib.sha256(data).hexdigest())
    assert (tmp_path / "out.bin").read_bytes() == data
    assert not stored_path.exists()  # the downloaded blob is consumed


def test_random_bytes_are_stored_raw(tmp_path: Path) -> None:
    src = tmp_path / "noise.bin"
    src.write_bytes(os.urandom(2 * CHUNK_BYTES + 17))
    encoding, stored_path, stored = _encode(src)
    assert (encoding, stored_path, stored) == (BlobEncoding.RAW, src, 2 * CHUNK_BYTES + 17)
    assert not src.with_name("noise.bin.zst").exists()


def test_a_saving_under_ten_percent_is_stored_raw(tmp_path: Path) -> None:
    # 95 % random bytes, 5 % zeros: zstd saves about 5 %, under the 10 % bar.
    src = tmp_path / "mostly-noise.bin"
    src.write_bytes(os.urandom(950_000) + bytes(50_000))
    assert _encode(src)[0] == BlobEncoding.RAW


def test_gzip_is_recognised_without_compressing(tmp_path: Path) -> None:
    src = tmp_path / "data.gz"
    src.write_bytes(gzip.compress(b"a" * 100_000))
    assert looks_compressed(src.read_bytes()[:16])
    assert _encode(src)[0] == BlobEncoding.RAW
    assert not looks_compressed(b"PK\x03\x04")  # zip (np.savez) is measured, not skipped


def test_compression_off_and_tiny_files_stay_raw(tmp_path: Path) -> None:
    src = tmp_path / "zeros.bin"
    src.write_bytes(bytes(100_000))
    assert encode_for_store(src, tmp_path / "z", 100_000, allow_compression=False)[0] == "raw"
    tiny = tmp_path / "tiny"
    tiny.write_bytes(bytes(100))
    assert _encode(tiny)[0] == BlobEncoding.RAW


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_damaged_zstd_blob_is_refused_or_detected(tmp_path: Path, damage: str) -> None:
    data = b"checkpoint " * 50_000
    src = tmp_path / "state.bin"
    src.write_bytes(data)
    encoding, blob, _ = _encode(src)
    assert encoding == BlobEncoding.ZSTD
    raw = bytearray(blob.read_bytes())
    if damage == "flip":
        raw[len(raw) // 2] ^= 0x40
    else:
        del raw[len(raw) // 2:]
    blob.write_bytes(bytes(raw))
    try:
        size, sha = decode_blob(blob, tmp_path / "out", encoding)
    except CheckpointCorrupt:
        return
    # A decoder that does not notice must at least give bytes whose size or hash differ.
    assert (size, sha) != (len(data), hashlib.sha256(data).hexdigest())
