"""Per-file zstd compression of checkpoint blobs, decided by measurement, streamed in chunks.

A file is stored compressed only when its zstd form is at least :data:`MIN_SAVING` (10 %)
smaller than the original; otherwise (already-compressed data: ``.npz`` written with
``savez_compressed``, ``.gz``, ``.zst``, JPEG, random bytes) it is stored as is. Formats that
are compressed by construction are recognised by their first bytes and not even tried, which
saves compressing a GiB to learn nothing. Memory stays bounded by :data:`CHUNK_BYTES` plus
zstd's window whatever the file's size.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import zstandard

from core.models.checkpoints import BlobEncoding
from scheduler.checkpoints.objectstore import CheckpointCorrupt

CHUNK_BYTES = 1 << 20
# zstd level 3 (the library's default): ~300 MB/s a core, most of the gain of higher levels
# on tensor data, which is what checkpoints hold.
ZSTD_LEVEL = 3
MIN_SAVING = 0.10  # keep the compressed form only when at least this fraction smaller
# Files smaller than this are stored as is: the saving is a few bytes, not worth a decode.
MIN_COMPRESS_BYTES = 512

# First bytes of formats that are compressed already (zip is NOT here: np.savez writes
# uncompressed zip members, which zstd does shrink).
_COMPRESSED_MAGIC: tuple[bytes, ...] = (
    b"\x1f\x8b",                 # gzip
    b"\x28\xb5\x2f\xfd",         # zstd frame
    b"\xfd7zXZ\x00",             # xz
    b"BZh",                      # bzip2
    b"\x04\x22\x4d\x18",         # lz4 frame
    b"7z\xbc\xaf\x27\x1c",       # 7z
    b"\xff\xd8\xff",             # JPEG
    b"\x89PNG\r\n\x1a\n",        # PNG
)


def looks_compressed(head: bytes) -> bool:
    """Whether ``head`` (a file's first bytes) starts like an already-compressed format."""
    return any(head.startswith(magic) for magic in _COMPRESSED_MAGIC)


def encode_for_store(src: Path, dst: Path, size_bytes: int,
                     allow_compression: bool = True) -> tuple[BlobEncoding, Path, int]:
    """Decide how to store the (frozen, staged) file ``src`` of ``size_bytes`` bytes.

    Compresses ``src`` into ``dst`` in chunks and keeps ``dst`` when it is at least
    :data:`MIN_SAVING` smaller; else removes ``dst``. Returns ``(encoding, path to upload,
    stored size in bytes)``: ``(ZSTD, dst, n)`` or ``(RAW, src, size_bytes)``.
    """
    if not allow_compression or size_bytes < MIN_COMPRESS_BYTES:
        return BlobEncoding.RAW, src, size_bytes
    with open(src, "rb") as reader:
        if looks_compressed(reader.read(16)):
            return BlobEncoding.RAW, src, size_bytes
    limit = size_bytes * (1 - MIN_SAVING)
    compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_checksum=True)
    stored = 0
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        with open(src, "rb") as reader, open(dst, "wb") as raw_out:
            chunker = compressor.chunker(size=size_bytes, chunk_size=CHUNK_BYTES)
            while chunk := reader.read(CHUNK_BYTES):
                for out in chunker.compress(chunk):
                    raw_out.write(out)
                    stored += len(out)
                if stored > limit:
                    break  # cannot end up small enough: stop spending CPU on it
            else:
                for out in chunker.finish():
                    raw_out.write(out)
                    stored += len(out)
    except BaseException:
        dst.unlink(missing_ok=True)
        raise
    if stored > limit:
        dst.unlink(missing_ok=True)
        return BlobEncoding.RAW, src, size_bytes
    return BlobEncoding.ZSTD, dst, stored


def decode_blob(blob: Path, dest: Path, encoding: BlobEncoding) -> tuple[int, str]:
    """Write the original bytes of the downloaded ``blob`` to ``dest`` (for ``raw``, ``blob``
    is renamed there); returns ``(size_bytes, sha256)`` of what ``dest`` now holds.

    Raises :class:`CheckpointCorrupt` when a zstd blob does not decode (damaged frame, bad
    checksum, truncated).
    """
    digest, size = hashlib.sha256(), 0
    if encoding == BlobEncoding.RAW:
        if blob != dest:
            blob.replace(dest)
        with open(dest, "rb") as reader:
            while chunk := reader.read(CHUNK_BYTES):
                digest.update(chunk)
                size += len(chunk)
        return size, digest.hexdigest()
    decompressor = zstandard.ZstdDecompressor()
    try:
        with (open(blob, "rb") as raw_in, open(dest, "wb") as writer,
              decompressor.stream_reader(raw_in, read_size=CHUNK_BYTES) as reader):
            while chunk := reader.read(CHUNK_BYTES):
                digest.update(chunk)
                writer.write(chunk)
                size += len(chunk)
    except zstandard.ZstdError as exc:
        raise CheckpointCorrupt(f"{dest.name}: zstd blob does not decode ({exc})") from None
    finally:
        blob.unlink(missing_ok=True)
    return size, digest.hexdigest()
