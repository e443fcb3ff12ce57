"""Checkpoint manifests. A checkpoint exists only once its manifest has been written, last."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field, field_validator

from core.models.base import StrictModel, ensure_utc


class CheckpointFile(StrictModel):
    """One file of a checkpoint: path relative to the checkpoint dir, size in bytes, sha256 hex."""

    path: str
    size_bytes: int = Field(ge=0)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class CheckpointManifest(StrictModel):
    """A committed checkpoint of one job.

    ``checkpoint_id`` sorts in commit order (``{created_ms:013d}-a{attempt}``); ``files`` lists
    every file with its sha256, which restore verifies.
    """

    job_id: str
    checkpoint_id: str
    attempt: int = Field(ge=0)
    created_at: datetime
    files: list[CheckpointFile]
    total_bytes: int = Field(ge=0)
    final: bool = Field(default=False, description="written after the command exited 0")

    _utc = field_validator("created_at")(ensure_utc)
