"""Read instance catalogs in SkyPilot's ``vms.csv`` format into replay offer rows.

Source: SkyPilot catalogs (e.g. ``catalogs/aws_skypilot_v7_gpu/vms_gpu_rows_partial.csv`` in the
shared data folder): one row per instance type and availability zone with columns
``InstanceType, AcceleratorName, AcceleratorCount, vCPUs, MemoryGiB, GpuInfo, Price, SpotPrice,
Region, AvailabilityZone``. ``GpuInfo`` is a Python-literal dict such as
``{'Gpus': [{'Name': 'V100', 'Count': 1, 'MemoryInfo': {'SizeInMiB': 16384}}], ...}``.
"""

from __future__ import annotations

import ast
import csv
from collections.abc import Collection
from dataclasses import dataclass, replace
from pathlib import Path


class CatalogError(ValueError):
    """A catalog file is missing or a row cannot be read; the message names file and line."""


@dataclass(frozen=True)
class CatalogRow:
    """One GPU row of a catalog: hardware, on-demand and spot prices (USD/hour, ``None`` when the
    catalog has none), region and zone (as the catalog spells it, e.g. zone id ``usw2-az1``)."""

    instance_type: str
    gpu_model: str
    gpu_count: int
    vram_gib: float
    vcpus: int
    memory_gib: float
    on_demand_price_usd_per_hour: float | None
    spot_price_usd_per_hour: float | None
    region: str
    zone: str


def vram_gib_from_gpu_info(gpu_info: str) -> float:
    """GPU memory per GPU in GiB from a ``GpuInfo`` literal (``Gpus[0].MemoryInfo.SizeInMiB``
    / 1024). Raises ``ValueError`` when the literal has no such field."""
    info = ast.literal_eval(gpu_info)
    try:
        size_mib = info["Gpus"][0]["MemoryInfo"]["SizeInMiB"]
    except (KeyError, IndexError, TypeError):
        raise ValueError("GpuInfo has no Gpus[0].MemoryInfo.SizeInMiB") from None
    return float(size_mib) / 1024


def _price(value: str) -> float | None:
    value = (value or "").strip()
    return float(value) if value else None


def _parse_row(row: dict[str, str]) -> CatalogRow | None:
    if not (row.get("AcceleratorName") or "").strip():
        return None  # CPU-only VM: a GPU market has no use for it
    on_demand = _price(row.get("Price", ""))
    spot = _price(row.get("SpotPrice", ""))
    if on_demand is None and spot is None:
        return None
    return CatalogRow(
        instance_type=row["InstanceType"].strip(),
        gpu_model=row["AcceleratorName"].strip(),
        gpu_count=int(float(row["AcceleratorCount"])),
        vram_gib=vram_gib_from_gpu_info(row["GpuInfo"]),
        vcpus=int(float(row["vCPUs"])),
        memory_gib=float(row["MemoryGiB"]),
        on_demand_price_usd_per_hour=on_demand,
        spot_price_usd_per_hour=spot,
        region=row["Region"].strip(),
        zone=row["AvailabilityZone"].strip(),
    )


def read_catalog(
    path: str | Path,
    *,
    instance_types: Collection[str] | None = None,
    regions: Collection[str] | None = None,
    zones: Collection[str] | None = None,
) -> list[CatalogRow]:
    """GPU rows of a SkyPilot ``vms.csv`` catalog, in file order.

    Rows without an accelerator (CPU VMs) or without any price are skipped. Each filter, when
    given, keeps only rows whose value is in it.

    Raises ``CatalogError`` (naming file and line) when the file is missing or a kept row has an
    unreadable number or ``GpuInfo``.
    """
    path = Path(path)
    rows: list[CatalogRow] = []
    try:
        handle = path.open(newline="")
    except OSError as exc:
        raise CatalogError(f"{path}: cannot open catalog: {exc.strerror or exc}") from None
    with handle:
        for line_no, raw in enumerate(csv.DictReader(handle), start=2):
            if instance_types is not None and raw.get("InstanceType") not in instance_types:
                continue
            if regions is not None and raw.get("Region") not in regions:
                continue
            if zones is not None and raw.get("AvailabilityZone") not in zones:
                continue
            try:
                parsed = _parse_row(raw)
            except (KeyError, TypeError, ValueError, SyntaxError) as exc:
                raise CatalogError(f"{path}:{line_no}: bad catalog row: {exc}") from None
            if parsed is not None:
                rows.append(parsed)
    return rows


def merge_duplicate_rows(rows: list[CatalogRow]) -> list[CatalogRow]:
    """One row per (instance type, region, zone), in first-seen order.

    Real catalogs repeat some rows (SkyPilot's AWS catalog lists ``p4de.24xlarge`` twice per
    zone, once without a spot price). The first row's hardware wins; each price is the first
    one any duplicate gives.
    """
    merged: dict[tuple[str, str, str], CatalogRow] = {}
    for row in rows:
        key = (row.instance_type, row.region, row.zone)
        first = merged.get(key)
        if first is None:
            merged[key] = row
            continue
        merged[key] = replace(
            first,
            on_demand_price_usd_per_hour=(first.on_demand_price_usd_per_hour
                                          if first.on_demand_price_usd_per_hour is not None
                                          else row.on_demand_price_usd_per_hour),
            spot_price_usd_per_hour=(first.spot_price_usd_per_hour
                                     if first.spot_price_usd_per_hour is not None
                                     else row.spot_price_usd_per_hour),
        )
    return list(merged.values())
