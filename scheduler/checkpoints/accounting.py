"""What a job's checkpoints cost to keep and to move: a pure function over its manifests.

Prices are list prices in USD, written here with where they come from; a caller (``schedctl
cost-report``) may pass others.

- :data:`S3_STANDARD_USD_PER_GB_MONTH` = 0.023: Amazon S3 Standard storage, first 50 TB a
  month, us-east-1 (aws.amazon.com/s3/pricing, "Storage pricing"). AWS bills storage per
  "GB-month" of 2**30 bytes, so sizes here are GiB.
- :data:`EGRESS_USD_PER_GB` = 0.09: AWS data transfer out to the internet, first 10 TB a
  month (aws.amazon.com/s3/pricing, "Data transfer"; the same rate on EC2's page). A
  checkpoint moved to or from a machine in another cloud or market crosses it once.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from core.models.checkpoints import CheckpointManifest
from core.units import HOURS_PER_MONTH

S3_STANDARD_USD_PER_GB_MONTH = 0.023
EGRESS_USD_PER_GB = 0.09
BYTES_PER_GIB = float(1 << 30)


@dataclass(frozen=True)
class CheckpointCost:
    """Storage and transfer of one job's checkpoints (see :func:`checkpoint_cost`).

    Bytes are integers; ``gib_months`` is GiB × months (a month is 730 h); money in USD.
    """

    checkpoints: int        # manifests seen
    original_bytes: int     # distinct blobs, original (uncompressed) size
    stored_bytes: int       # distinct blobs as stored (after compression): what is billed
    gib_months: float       # stored GiB integrated from each blob's first checkpoint to `until`
    uploaded_bytes: int     # distinct blobs' stored bytes: each was uploaded once
    restored_bytes: int     # stored bytes downloaded by the restores passed in
    transfer_bytes: int     # uploaded + restored
    storage_usd: float
    transfer_usd: float

    @property
    def total_usd(self) -> float:
        return self.storage_usd + self.transfer_usd

    @property
    def compression_ratio(self) -> float | None:
        """original ÷ stored bytes (1.0 without compression; ``None`` with nothing stored)."""
        return self.original_bytes / self.stored_bytes if self.stored_bytes else None


def checkpoint_cost(manifests: Sequence[CheckpointManifest], until: datetime,
                    restores: Iterable[datetime] = (), *, time_scale: float = 1.0,
                    storage_usd_per_gb_month: float = S3_STANDARD_USD_PER_GB_MONTH,
                    transfer_usd_per_gb: float = EGRESS_USD_PER_GB) -> CheckpointCost:
    """Storage and transfer cost of one job's checkpoints, from the manifests in its store.

    - **manifests**: the job's committed manifests (any order; one job's), e.g.
      :func:`scheduler.checkpoints.checkpoints.list_checkpoints`. Blobs are content-addressed
      per encoding (``sha256``, ``encoding``): a blob shared by several checkpoints is stored
      and uploaded once. Pruned checkpoints are not seen, so these are lower bounds on what
      the job ever stored; the blobs seen are all stored now.
    - **until**: the end of the storage period (the job's end, or now); UTC.
    - **restores**: when each restore happened (e.g. each later placement's start); each
      downloads the stored bytes of the newest checkpoint committed at or before it (none
      before: nothing).
    - **time_scale**: market seconds per wall second (replayed markets): durations between
      ``created_at`` and ``until`` are multiplied by it, like compute hours.
    - **storage_usd_per_gb_month**, **transfer_usd_per_gb**: prices (module constants by
      default); storage per GiB-month, transfer per GiB moved. Every upload and restore is
      charged as crossing a cloud boundary (an upper bound when job and store share a cloud).

    Returns a :class:`CheckpointCost`. Raises ``ValueError`` for a negative ``time_scale``.
    """
    if time_scale < 0:
        raise ValueError(f"time_scale must be 0 or more, got {time_scale}")
    ordered = sorted(manifests, key=lambda m: (m.created_at, m.checkpoint_id))
    first_seen: dict[tuple[str, str], tuple[int, int, datetime]] = {}
    for m in ordered:
        for f in m.files:
            first_seen.setdefault((f.sha256, f.encoding.value),
                                  (f.size_bytes, f.stored_size, m.created_at))
    original = sum(size for size, _, _ in first_seen.values())
    stored = sum(s for _, s, _ in first_seen.values())
    gib_months = sum(
        s / BYTES_PER_GIB * max(0.0, (until - at).total_seconds()) * time_scale / 3600
        / HOURS_PER_MONTH
        for _, s, at in first_seen.values())
    restored = 0
    for at in restores:
        before = [m for m in ordered if m.created_at <= at]
        if before:
            restored += before[-1].stored_bytes
    transfer = stored + restored
    return CheckpointCost(
        checkpoints=len(ordered), original_bytes=original, stored_bytes=stored,
        gib_months=gib_months, uploaded_bytes=stored, restored_bytes=restored,
        transfer_bytes=transfer,
        storage_usd=gib_months * storage_usd_per_gb_month,
        transfer_usd=transfer / BYTES_PER_GIB * transfer_usd_per_gb)
