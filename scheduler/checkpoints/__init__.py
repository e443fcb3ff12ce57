"""Checkpoint store: object stores (local folder, S3) and the checkpoint logic on top.

A checkpoint is committed by writing its manifest last; restore verifies every sha256 and falls
back to the previous committed checkpoint when one is damaged; files are zstd-compressed
where that pays; retention keeps the last N, every K-th and what a restart needs. See
:mod:`.checkpoints`, :mod:`.retention`, :mod:`.encoding`, :mod:`.holds`, :mod:`.accounting`.
"""

from scheduler.checkpoints.accounting import CheckpointCost, checkpoint_cost
from scheduler.checkpoints.bundles import download_workdir, upload_workdir
from scheduler.checkpoints.checkpoints import (
    commit_checkpoint,
    dir_fingerprint,
    latest_checkpoint_id,
    list_checkpoints,
    prune_checkpoints,
    restore_latest,
    scan_checkpoint_dir,
)
from scheduler.checkpoints.digests import DigestCache
from scheduler.checkpoints.local import LocalObjectStore
from scheduler.checkpoints.objectstore import (
    CheckpointCorrupt,
    CheckpointStoreError,
    ObjectNotFound,
    ObjectStore,
    StreamingObjectStore,
    UnsafeBundle,
)
from scheduler.checkpoints.retention import Candidate, retained_ids
from scheduler.checkpoints.s3 import S3ObjectStore
from scheduler.checkpoints.urls import open_store

__all__ = [
    "Candidate",
    "CheckpointCorrupt",
    "CheckpointCost",
    "CheckpointStoreError",
    "DigestCache",
    "LocalObjectStore",
    "ObjectNotFound",
    "ObjectStore",
    "S3ObjectStore",
    "StreamingObjectStore",
    "UnsafeBundle",
    "checkpoint_cost",
    "commit_checkpoint",
    "dir_fingerprint",
    "download_workdir",
    "latest_checkpoint_id",
    "list_checkpoints",
    "open_store",
    "prune_checkpoints",
    "restore_latest",
    "retained_ids",
    "scan_checkpoint_dir",
    "upload_workdir",
]
