"""The pieces a streamed commit is made of: the verifying reader, the zstd stream, the sampled
compression choice and the digest cache's trust rule."""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path

import numpy as np
import pytest
import zstandard

from core.models.checkpoints import BlobEncoding
from scheduler.checkpoints.digests import SETTLE_NS, DigestCache, FileState
from scheduler.checkpoints.streaming import (
    FileChanged,
    VerifyingReader,
    ZstdReader,
    choose_encoding,
)


def drain(stream, n: int) -> bytes:
    out = []
    while chunk := stream.read(n):
        out.append(chunk)
    return b"".join(out)


@pytest.mark.parametrize("n", [1, 7, 4096, 1 << 20, -1])
def test_verifying_reader_hands_out_the_bytes_when_they_match(n: int) -> None:
    data = os.urandom(100_000)
    reader = VerifyingReader(io.BytesIO(data), len(data), hashlib.sha256(data).hexdigest())
    assert not reader.seekable()
    assert drain(reader, n) == data and not reader.changed
    assert reader.read(10) == b""


@pytest.mark.parametrize("actual", [b"B" * 1000, b"A" * 999, b"A" * 1001, b""])
def test_verifying_reader_raises_at_the_end_when_the_bytes_differ(actual: bytes) -> None:
    expected = b"A" * 1000
    reader = VerifyingReader(io.BytesIO(actual), len(expected),
                             hashlib.sha256(expected).hexdigest())
    with pytest.raises(FileChanged):
        drain(reader, 256)
    assert reader.changed


def test_reads_are_full_sized_until_the_end() -> None:
    # An S3 part other than the last must be full: a short read would make a part too small.
    data = np.random.default_rng(1).integers(0, 16, 3_000_000, dtype=np.uint8).tobytes()
    sha = hashlib.sha256(data).hexdigest()
    zstd = ZstdReader(VerifyingReader(io.BytesIO(data), len(data), sha), len(data))
    sizes, frame = [], b""
    while chunk := zstd.read(100_000):
        sizes.append(len(chunk))
        frame += chunk
    assert all(s == 100_000 for s in sizes[:-1]) and len(sizes) > 2
    assert zstd.produced == len(frame) < 0.7 * len(data)
    assert zstandard.ZstdDecompressor().decompress(frame) == data


def test_zstd_stream_of_a_changed_file_fails() -> None:
    data = b"weights " * 50_000
    stream = ZstdReader(VerifyingReader(io.BytesIO(data[:-1] + b"X"), len(data),
                                        hashlib.sha256(data).hexdigest()), len(data))
    with pytest.raises(FileChanged):
        drain(stream, 1 << 16)


def test_compression_is_chosen_on_samples_of_a_large_file(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    cases = {
        "dense.bin": rng.normal(0, 0.02, 5 << 20).astype(np.float32).tobytes(),  # 20 MiB
        "ramp.bin": np.repeat(np.arange(5 << 16, dtype=np.float32), 16).tobytes(),
        "noise.bin": os.urandom(3 << 20),
        "small.txt": b"tiny",
        "gz.bin": b"\x1f\x8b" + b"\x00" * 100_000,  # compressed by its magic: not tried
    }
    got = {}
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        with open(tmp_path / name, "rb") as fh:
            got[name] = choose_encoding(fh.fileno(), len(data), allow_compression=True)
            assert choose_encoding(fh.fileno(), len(data), allow_compression=False) == "raw"
    assert got == {"dense.bin": BlobEncoding.RAW, "ramp.bin": BlobEncoding.ZSTD,
                   "noise.bin": BlobEncoding.RAW, "small.txt": BlobEncoding.RAW,
                   "gz.bin": BlobEncoding.RAW}


def test_digest_cache_trusts_only_an_unchanged_settled_state(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x")
    state = FileState.of(os.stat(path))
    written = max(state.mtime_ns, state.ctime_ns)
    assert not state.settled(written + SETTLE_NS - 1)
    assert state.settled(written + SETTLE_NS)
    cache = DigestCache(max_folders=2)
    cache.replace("dir", {"f": (state, "ab" * 32)})
    assert cache.lookup("dir", "f", state) == "ab" * 32
    path.write_bytes(b"y")  # same size: mtime and ctime move
    os.utime(path, ns=(state.mtime_ns, state.mtime_ns))  # mtime put back; ctime does not go back
    assert cache.lookup("dir", "f", FileState.of(os.stat(path))) is None
    assert cache.lookup("other", "f", state) is None
    cache.replace("d2", {})
    cache.replace("d3", {})
    assert cache.lookup("dir", "f", state) is None  # the least recent folder was dropped
