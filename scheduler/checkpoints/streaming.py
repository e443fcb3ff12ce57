"""Streams that upload a checkpoint file straight from the job's folder, without a copy.

A blob's key is the sha256 of its bytes, known from a first read (or the digest cache)
before the upload starts; the job may rewrite the file in between. :class:`VerifyingReader`
hashes what it hands to the upload and raises :class:`FileChanged` at the end when that is
not exactly the expected size and sha256: the upload then fails before it completes (an S3
multipart upload is aborted, a single PUT is never sent), so nothing ever lands under a key
that is not its content's sha256. :class:`ZstdReader` compresses such a stream on the fly;
:func:`choose_encoding` decides on a sample whether that pays, so a large file is not
compressed once just to learn it is not worth it.
"""

from __future__ import annotations

import hashlib
import os
from typing import BinaryIO

import zstandard

from core.models.checkpoints import BlobEncoding
from scheduler.checkpoints.encoding import (
    MIN_COMPRESS_BYTES,
    MIN_SAVING,
    ZSTD_LEVEL,
    looks_compressed,
)

READ_BYTES = 8 << 20
# Files up to this size are compressed whole to decide; larger ones by SAMPLES pieces of
# SAMPLE_BYTES spread over the file (each compressed alone: a little pessimistic).
WHOLE_SAMPLE_BYTES = 8 << 20
SAMPLES = 8
SAMPLE_BYTES = 1 << 20


class FileChanged(Exception):
    """The file's bytes are no longer the ones its sha256 was taken of."""


def _read_full(read, n: int) -> bytes:
    """Up to ``n`` bytes from ``read`` (fewer only at the end); ``n < 0``: everything."""
    if n is None or n < 0:
        parts = []
        while chunk := read(READ_BYTES):
            parts.append(chunk)
        return b"".join(parts)
    parts, got = [], 0
    while got < n:
        chunk = read(n - got)
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
    return parts[0] if len(parts) == 1 else b"".join(parts)


class VerifyingReader:
    """A forward-only, non-seekable ``read(n)`` over ``fileobj`` from its current position
    (the file's start), that must yield exactly ``size`` bytes hashing to ``sha256``.

    Raises :class:`FileChanged` from the read that reaches the end (or passes ``size``)
    otherwise; ``changed`` is then ``True``. ``read`` returns ``n`` bytes except at the end.
    """

    def __init__(self, fileobj: BinaryIO, size: int, sha256: str) -> None:
        self._f, self._size, self._sha = fileobj, size, sha256
        self._digest = hashlib.sha256()
        self._pos = 0
        self._done = False
        self.changed = False

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def read(self, n: int = -1) -> bytes:
        if self._done:
            return b""
        room = self._size + 1 - self._pos  # one byte past the size tells a grown file
        want = room if n is None or n < 0 else min(n, room)
        data = _read_full(self._f.read, want)
        self._pos += len(data)
        self._digest.update(data)
        if self._pos > self._size:
            self._fail(f"grew past {self._size} bytes")
        if len(data) < want:
            self._done = True
            if self._pos != self._size:
                self._fail(f"shrank to {self._pos} of {self._size} bytes")
            if self._digest.hexdigest() != self._sha:
                self._fail("was rewritten after it was hashed")
        return data

    def _fail(self, why: str) -> None:
        self.changed = self._done = True
        raise FileChanged(f"the file {why}")


class ZstdReader:
    """``read(n)`` of the zstd frame (checksummed, level :data:`ZSTD_LEVEL`) of ``source``'s
    ``size`` bytes; ``n`` bytes except at the end. ``produced``: compressed bytes so far."""

    def __init__(self, source: VerifyingReader, size: int) -> None:
        compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_checksum=True)
        self._reader = compressor.stream_reader(source, size=size, read_size=1 << 20)
        self.produced = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def read(self, n: int = -1) -> bytes:
        data = _read_full(self._reader.read, n)
        self.produced += len(data)
        return data


def zstd_size(fileobj: BinaryIO, size: int, sha256: str) -> int:
    """The size of :class:`ZstdReader`'s frame of ``fileobj`` (read from its start); raises
    :class:`FileChanged` when the file no longer hashes to ``sha256``."""
    fileobj.seek(0)
    reader = ZstdReader(VerifyingReader(fileobj, size, sha256), size)
    while reader.read(READ_BYTES):
        pass
    return reader.produced


def choose_encoding(fd: int, size: int, allow_compression: bool) -> BlobEncoding:
    """``zstd`` when compressing the file behind ``fd`` (read with ``pread``, its position
    untouched) saves at least :data:`MIN_SAVING`: measured on the whole file up to
    :data:`WHOLE_SAMPLE_BYTES`, on :data:`SAMPLES` pieces spread over a larger one."""
    if not allow_compression or size < MIN_COMPRESS_BYTES:
        return BlobEncoding.RAW
    if looks_compressed(os.pread(fd, 16, 0)):
        return BlobEncoding.RAW
    compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_checksum=True)
    if size <= WHOLE_SAMPLE_BYTES:
        data = os.pread(fd, size, 0)
        pieces = [data]
    else:
        step = (size - SAMPLE_BYTES) // (SAMPLES - 1)
        pieces = [os.pread(fd, SAMPLE_BYTES, i * step) for i in range(SAMPLES)]
    raw = sum(len(p) for p in pieces)
    packed = sum(len(compressor.compress(p)) for p in pieces)
    return BlobEncoding.ZSTD if raw and packed <= raw * (1 - MIN_SAVING) else BlobEncoding.RAW
