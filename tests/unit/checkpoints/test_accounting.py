"""Storage and transfer cost of a job's checkpoints, worked out by hand."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from core.models.checkpoints import CheckpointFile, CheckpointManifest
from scheduler.checkpoints.accounting import (
    BYTES_PER_GIB,
    EGRESS_USD_PER_GB,
    S3_STANDARD_USD_PER_GB_MONTH,
    checkpoint_cost,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
GIB = int(BYTES_PER_GIB)
MONTH = timedelta(hours=730)


def manifest(n: int, at: datetime, files: list[CheckpointFile]) -> CheckpointManifest:
    return CheckpointManifest(job_id="j", checkpoint_id=f"{n:013d}-a0", attempt=0,
                              created_at=at, files=files,
                              total_bytes=sum(f.size_bytes for f in files), sequence=n)


def file(path: str, sha: str, size: int, stored: int | None = None) -> CheckpointFile:
    if stored is None:
        return CheckpointFile(path=path, size_bytes=size, sha256=sha * 64)
    return CheckpointFile(path=path, size_bytes=size, sha256=sha * 64, encoding="zstd",
                          stored_bytes=stored)


def test_shared_blob_counted_once_and_gib_months_by_first_seen() -> None:
    # c1 at T0: weights (4 GiB, stored 2 GiB compressed) + config (1 GiB raw).
    # c2 at T0 + 1 month: the same config, new weights (4 GiB stored 2 GiB).
    c1 = manifest(1, T0, [file("w", "a", 4 * GIB, 2 * GIB), file("cfg", "b", GIB)])
    c2 = manifest(2, T0 + MONTH, [file("w", "c", 4 * GIB, 2 * GIB), file("cfg", "b", GIB)])
    cost = checkpoint_cost([c2, c1], until=T0 + 2 * MONTH, restores=[T0 + MONTH / 2])
    assert cost.checkpoints == 2
    assert cost.original_bytes == 9 * GIB
    assert cost.stored_bytes == 5 * GIB
    # a: 2 GiB x 2 months, b: 1 GiB x 2 months, c: 2 GiB x 1 month = 8 GiB-months.
    assert cost.gib_months == pytest.approx(8.0)
    # one restore between c1 and c2 downloads c1 as stored: 3 GiB.
    assert cost.restored_bytes == 3 * GIB
    assert cost.uploaded_bytes == 5 * GIB and cost.transfer_bytes == 8 * GIB
    assert cost.storage_usd == pytest.approx(8 * S3_STANDARD_USD_PER_GB_MONTH)  # $0.184
    assert cost.transfer_usd == pytest.approx(8 * EGRESS_USD_PER_GB)  # $0.72
    assert cost.total_usd == pytest.approx(0.184 + 0.72)
    assert cost.compression_ratio == pytest.approx(9 / 5)


def test_old_manifest_counts_original_size_and_restore_before_any_checkpoint_is_free() -> None:
    c1 = manifest(1, T0, [file("w", "a", GIB)])  # no stored_bytes: stored as is
    cost = checkpoint_cost([c1], until=T0 + MONTH, restores=[T0 - MONTH],
                           time_scale=3.0, storage_usd_per_gb_month=1.0,
                           transfer_usd_per_gb=0.0)
    assert cost.stored_bytes == GIB and cost.restored_bytes == 0
    assert cost.gib_months == pytest.approx(3.0)  # one wall month at 3x market time
    assert cost.storage_usd == pytest.approx(3.0) and cost.transfer_usd == 0.0


def test_no_manifests() -> None:
    cost = checkpoint_cost([], until=T0)
    assert (cost.stored_bytes, cost.gib_months, cost.total_usd) == (0, 0.0, 0.0)
    assert cost.compression_ratio is None
    with pytest.raises(ValueError):
        checkpoint_cost([], until=T0, time_scale=-1)
