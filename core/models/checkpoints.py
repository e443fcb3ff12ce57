"""Checkpoint manifests. A checkpoint exists only once its manifest has been written, last."""

from __future__ import annotations

from datetime import datetime
from enum import Enum

from pydantic import Field, field_validator

from core.models.base import StrictModel, ensure_utc


class BlobEncoding(str, Enum):
    """How a file's bytes are stored as a blob: ``raw`` (as is) or ``zstd`` (one zstd frame)."""

    RAW = "raw"
    ZSTD = "zstd"


class CheckpointFile(StrictModel):
    """One file of a checkpoint.

    - **path**: relative to the checkpoint dir (posix).
    - **size_bytes**, **sha256**: of the ORIGINAL bytes; restore checks both after decoding.
    - **encoding**: how the blob is stored; manifests written before compression existed have
      no such field and mean ``raw``.
    - **stored_bytes**: the blob's size in the store (``None``: written before compression
      existed, the same as ``size_bytes``).
    """

    path: str
    size_bytes: int = Field(ge=0)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    encoding: BlobEncoding = BlobEncoding.RAW
    stored_bytes: int | None = Field(default=None, ge=0)

    @property
    def stored_size(self) -> int:
        """Bytes the blob takes in the store."""
        return self.size_bytes if self.stored_bytes is None else self.stored_bytes


class CheckpointManifest(StrictModel):
    """A committed checkpoint of one job.

    ``checkpoint_id`` sorts in commit order (``{created_ms:013d}-a{attempt}``); ``files`` lists
    every file with its sha256, which restore verifies. ``sequence`` is the checkpoint's
    1-based commit ordinal within the job (what ``keep_every`` counts; ``None`` in manifests
    written before it was recorded). ``total_bytes`` is the files' original size.
    """

    job_id: str
    checkpoint_id: str
    attempt: int = Field(ge=0)
    created_at: datetime
    files: list[CheckpointFile]
    total_bytes: int = Field(ge=0)
    final: bool = Field(default=False, description="written after the command exited 0")
    sequence: int | None = Field(default=None, ge=1)

    _utc = field_validator("created_at")(ensure_utc)

    @property
    def stored_bytes(self) -> int:
        """Bytes of this checkpoint's distinct blobs in the store (shared blobs counted once)."""
        return sum({(f.sha256, f.encoding): f.stored_size for f in self.files}.values())
