"""Read instance catalogs in SkyPilot's ``vms.csv`` format, for any cloud (pure: text in,
rows out).

Column sets differ per cloud; columns are found by name. Observed variants (shared data
``catalogs/aws_skypilot_v7_gpu``, ``catalogs/anycloud_2026-05-20/{gcp,azure,lambda,vast}``):

- AWS: zone ids in ``AvailabilityZone`` (``use1-az1``); ``GpuInfo`` a Python-literal dict with
  ``Gpus[0].MemoryInfo.SizeInMiB``; some rows repeat (``p4de.24xlarge``).
- GCP: rows with no ``AcceleratorName`` are CPU VMs (skipped); GPU rows have an **empty**
  ``InstanceType``: the GPU is an attachable accelerator priced alone (host VM extra). Its
  instance type here is ``{accelerator}:{count}`` (SkyPilot's notation), vCPUs/memory 0.
  TPU rows (``tpu-*``) are skipped: not GPUs.
- Azure: no zones (zone = region); ``GpuInfo`` is just the model name (VRAM from
  :data:`providers.catalog.gpus.VRAM_GIB`); fractional ``AcceleratorCount`` (GPU partitions,
  0.167-0.5) are skipped.
- Lambda: no zones, no spot prices. Vast: ``Region`` like ``"Denmark, DK, EU"`` (made a slug,
  ``denmark-dk-eu``), ``SpotPrice`` 0.00 means none.

Prices are USD/hour for the whole instance. Several rows for one (instance type, region,
zone) merge into one with the lowest price of each market (SkyPilot's AWS catalog lists
``p4de.24xlarge`` twice per zone, once without a spot price).

Both the catalog provider and a replayed market's ``catalogs:`` read catalogs here.
"""

from __future__ import annotations

import ast
import csv
import io
import re
from collections import Counter
from dataclasses import dataclass, field, fields, replace
from typing import Any

from providers.catalog.gpus import vram_gib_for

MIB_PER_GIB = 1024.0


class CatalogFormatError(ValueError):
    """The text is not a ``vms.csv`` catalog (a required column is missing)."""


@dataclass
class GpuMachine:
    """One GPU instance type in one zone: VRAM per GPU and host memory in GiB; ``zone`` is the
    region when the cloud has none. The part of an offer a catalog row describes."""

    instance_type: str
    gpu_model: str
    gpu_count: int
    vram_gib: float
    vcpus: int
    memory_gib: float
    region: str
    zone: str


def machine_of(source: Any) -> dict[str, Any]:
    """The :class:`GpuMachine` fields of ``source`` (any object that has them: an entry, a
    market file's offer) as keyword arguments, e.g. for an :class:`core.models.Offer`."""
    return {f.name: getattr(source, f.name) for f in fields(GpuMachine)}


@dataclass
class CatalogEntry(GpuMachine):
    """One GPU configuration of a catalog. Prices USD/hour (``None``: the market is not sold
    there)."""

    on_demand_price_usd_per_hour: float | None
    spot_price_usd_per_hour: float | None


@dataclass
class CatalogRead:
    """Entries of one catalog, and how many rows were skipped and why."""

    entries: list[CatalogEntry] = field(default_factory=list)
    rows: int = 0
    skipped: Counter = field(default_factory=Counter)

    def summary(self) -> str:
        why = ", ".join(f"{n} {reason}" for reason, n in self.skipped.most_common())
        return f"{len(self.entries)} GPU offers from {self.rows} rows" + (f" (skipped: {why})" if why else "")


_REQUIRED = ("InstanceType", "AcceleratorName", "AcceleratorCount", "Price", "Region")


def slug(text: str) -> str:
    """``"Denmark, DK, EU"`` → ``"denmark-dk-eu"``; names without odd characters unchanged."""
    if re.fullmatch(r"[A-Za-z0-9._-]+", text):
        return text
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "unknown"


def _num(value: str | None) -> float | None:
    value = (value or "").strip()
    return float(value) if value else None


def vram_gib(gpu_info: str, model: str) -> float | None:
    """GiB per GPU: ``Gpus[0].MemoryInfo.SizeInMiB`` / 1024 of a ``GpuInfo`` literal (AWS),
    else the table's figure for ``model`` (:func:`providers.catalog.gpus.vram_gib_for`), else
    ``None``."""
    text = (gpu_info or "").strip()
    if text.startswith("{"):
        try:
            size = ast.literal_eval(text)["Gpus"][0]["MemoryInfo"]["SizeInMiB"]
            return float(size) / MIB_PER_GIB
        except (ValueError, SyntaxError, KeyError, IndexError, TypeError):
            pass
    return vram_gib_for(model)


def _entry(row: dict[str, str], skipped: Counter) -> CatalogEntry | None:
    model = (row.get("AcceleratorName") or "").strip()
    if not model:
        skipped["CPU VMs"] += 1
        return None
    if model.lower().startswith("tpu"):
        skipped["TPUs"] += 1
        return None
    count = float(row.get("AcceleratorCount") or 0)
    if count < 1 or count != int(count):
        skipped["fractional GPUs"] += 1
        return None
    on_demand, spot = _num(row.get("Price")), _num(row.get("SpotPrice"))
    spot = spot if spot else None  # Vast writes 0.00 for "no spot price"
    if on_demand is None and spot is None:
        skipped["no price"] += 1
        return None
    vram = vram_gib(row.get("GpuInfo", ""), model)
    if vram is None:
        skipped[f"unknown VRAM ({model})"] += 1
        return None
    region = slug(row["Region"].strip())
    itype = row["InstanceType"].strip() or f"{model}:{int(count)}"
    return CatalogEntry(
        instance_type=itype, gpu_model=model, gpu_count=int(count), vram_gib=round(float(vram), 3),
        vcpus=int(_num(row.get("vCPUs")) or 0), memory_gib=_num(row.get("MemoryGiB")) or 0.0,
        region=region, zone=slug((row.get("AvailabilityZone") or "").strip() or region),
        on_demand_price_usd_per_hour=on_demand, spot_price_usd_per_hour=spot,
    )


def parse_catalog(text: str, source: str = "catalog") -> CatalogRead:
    """GPU entries of a ``vms.csv`` catalog's text, merged per (type, region, zone).

    Raises:
        CatalogFormatError: a required column (``InstanceType``, ``AcceleratorName``,
            ``AcceleratorCount``, ``Price``, ``Region``) is missing; names ``source``.
        ValueError: a GPU row has an unreadable number (message names ``source`` and line).
    """
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in _REQUIRED if c not in (reader.fieldnames or [])]
    if missing:
        raise CatalogFormatError(f"{source}: not a SkyPilot vms.csv catalog; missing column(s) "
                                 f"{', '.join(missing)}")
    out = CatalogRead()
    merged: dict[tuple[str, str, str], CatalogEntry] = {}
    for line, row in enumerate(reader, start=2):
        out.rows += 1
        try:
            entry = _entry(row, out.skipped)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{source}:{line}: bad catalog row: {exc}") from None
        if entry is None:
            continue
        key = (entry.instance_type, entry.region, entry.zone)
        first = merged.get(key)
        merged[key] = entry if first is None else replace(
            first, on_demand_price_usd_per_hour=_low(first.on_demand_price_usd_per_hour,
                                                     entry.on_demand_price_usd_per_hour),
            spot_price_usd_per_hour=_low(first.spot_price_usd_per_hour,
                                         entry.spot_price_usd_per_hour))
        if first is not None:
            out.skipped["merged duplicates"] += 1
    out.entries = list(merged.values())
    return out


def _low(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else min(a, b)
