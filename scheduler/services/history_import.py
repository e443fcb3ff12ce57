"""``schedctl history import PATH``: load recorded real prices into the history store.

Import writes to Redis directly (``REDIS_URL``, else the embedded Redis of ``GA_HOME``, via
:func:`scheduler.store.connection.connect`): no daemon is needed, and large dumps do not go
through the HTTP API. It is idempotent: importing the same files again stores nothing new.

Accepted inputs (a file, or a folder searched recursively):

- ``*.json``: ``aws ec2 describe-spot-price-history`` outputs;
- ``*.tsv``: the public AWS spot price archive (zone id, type, product, price, timestamp);
- ``*.csv``: a SkyPilot ``vms.csv`` catalog snapshot: every on-demand and spot price becomes an
  observation at the snapshot's date (``--at``, else the first ``YYYY-MM-DD`` in the path),
  under the provider given by ``--provider``, else the cloud named in the path (``aws``,
  ``gcp``, ``azure``, ``lambda``, ``vast``, ...). The catalog's hardware fills the
  series → instance-type map.

All files are read first and their observations appended oldest first per series. A source
covers its region up to its newest record, so each series of a region is known ("seen") up
to the newest timestamp of any file of that region.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from core.models import OfferKey, PriceObservation
from providers.catalog.dumps import parse_spot_history_json, parse_spot_tsv
from providers.catalog.provider import offers_from_entries
from providers.catalog.reader import parse_catalog
from scheduler.store import Store
from scheduler.store.rollups import AppendResult

KNOWN_CLOUDS = ("aws", "gcp", "azure", "lambda", "vast", "aliyun", "oci", "runpod", "paperspace",
                "fluidstack", "cudo", "do", "ibm", "scp", "kubernetes", "nebius", "hyperbolic")
_DATE_RE = re.compile(r"(\d{4}-\d{2}-\d{2})")


class HistoryImportError(ValueError):
    """A file could not be imported; the message names it and why. Nothing of that call
    was stored (files are all read before anything is written)."""


@dataclass
class ImportReport:
    """What an import read and stored (see :meth:`as_dict`)."""

    files: int = 0
    records: int = 0
    skipped: Counter = field(default_factory=Counter)
    observations: int = 0
    unique: int = 0
    series: int = 0
    appended: AppendResult = field(default_factory=AppendResult)  # what history stored of them
    hardware: int = 0
    first: str | None = None
    last: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """``files``, ``records`` read, ``skipped`` (reason → count), ``observations`` kept,
        ``unique`` (distinct series/time/price: overlapping dumps repeat records),
        ``series``, ``stored`` (price changes written), ``unchanged`` (observations repeating
        the price in force, not stored), ``late`` (older than the raw window: not re-stored, that period is kept as hourly
        roll-ups; a re-import of the same files reports its old records here),
        ``compacted`` series, ``hardware`` entries learned, ``first``/``last`` times."""
        done = self.appended
        return {"files": self.files, "records": self.records, "skipped": dict(self.skipped),
                "observations": self.observations, "unique": self.unique, "series": self.series,
                "stored": done.stored, "unchanged": done.unchanged, "late": done.late,
                "compacted": done.compacted, "hardware": self.hardware, "first": self.first,
                "last": self.last}


def _guess_provider(path: Path) -> str | None:
    for part in reversed(path.parts):
        token = re.split(r"[_\-.]", part.lower())[0]
        if token in KNOWN_CLOUDS:
            return token
    return None


def _guess_date(path: Path) -> datetime | None:
    m = _DATE_RE.search(str(path))
    if not m:
        return None
    return datetime.fromisoformat(m.group(1)).replace(tzinfo=UTC)


def _files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise HistoryImportError(f"{path}: no such file or folder")
    files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in (".json", ".tsv", ".csv"))
    if not files:
        raise HistoryImportError(f"{path}: no .json, .tsv or .csv file inside")
    return files


def read_sources(path: Path, provider: str | None = None, at: datetime | None = None
                 ) -> tuple[list[PriceObservation], dict[str, dict[str, Any]], ImportReport]:
    """Parse every file under ``path`` (no Redis). Returns the observations, the hardware
    learned from catalogs (``"provider/instance_type"`` → hardware) and the report so far.

    Raises:
        HistoryImportError: a file is of an unknown kind, malformed, or a catalog lacks a provider
            or a date; names the file.
    """
    report = ImportReport()
    observations: list[PriceObservation] = []
    hardware: dict[str, dict[str, Any]] = {}
    for file in _files(path):
        report.files += 1
        try:
            text = file.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise HistoryImportError(f"{file}: cannot read: {exc}") from None
        try:
            if file.suffix == ".json":
                read = parse_spot_history_json(text, str(file))
            elif file.suffix == ".tsv":
                read = parse_spot_tsv(text, str(file))
            elif file.suffix == ".csv":
                observations += _catalog_observations(file, text, provider, at, hardware, report)
                continue
            else:
                raise HistoryImportError(f"{file}: unknown kind; expected .json, .tsv or .csv")
        except ValueError as exc:
            raise HistoryImportError(str(exc)) from None
        report.records += read.records
        report.skipped.update(read.skipped)
        observations += read.observations
    return observations, hardware, report


def _catalog_observations(file: Path, text: str, provider: str | None, at: datetime | None,
                          hardware: dict[str, dict[str, Any]], report: ImportReport
                          ) -> list[PriceObservation]:
    name = provider or _guess_provider(file)
    if name is None:
        raise HistoryImportError(f"{file}: which cloud is this catalog? give --provider")
    when = at or _guess_date(file)
    if when is None:
        raise HistoryImportError(f"{file}: a catalog snapshot needs its date: give --at YYYY-MM-DD "
                           "(or keep the date in its path)")
    read = parse_catalog(text, str(file))
    report.records += read.rows
    report.skipped.update(read.skipped)
    offers = offers_from_entries(name, read.entries, when, 0.0)
    for o in offers:
        hardware[f"{o.provider}/{o.instance_type}"] = {
            "gpu_model": o.gpu_model, "gpu_count": o.gpu_count, "vram_gib": o.vram_gib,
            "vcpus": o.vcpus, "memory_gib": o.memory_gib, "source": f"catalog {file.name}"}
    return [PriceObservation(series=o.key.series(), observed_at=when,
                             price_usd_per_hour=o.price_usd_per_hour) for o in offers]


def import_path(store: Store, path: Path, provider: str | None = None,
                at: datetime | None = None) -> ImportReport:
    """Read everything under ``path`` (:func:`read_sources`), then append it to history.

    Returns the :class:`ImportReport`. Raises :class:`HistoryImportError` before writing anything
    when a file is bad.
    """
    observations, hardware, report = read_sources(path, provider, at)
    report.observations = len(observations)
    unique = {(o.series, o.observed_at, o.price_usd_per_hour) for o in observations}
    report.unique = len(unique)
    report.series = len({o.series for o in observations})
    if observations:
        report.first = min(o.observed_at for o in observations).isoformat()
        report.last = max(o.observed_at for o in observations).isoformat()
    newest_by_region: dict[tuple[str, str], datetime] = {}
    for o in observations:
        key = OfferKey.from_series(o.series)
        region = (key.provider, key.region)
        if region not in newest_by_region or o.observed_at > newest_by_region[region]:
            newest_by_region[region] = o.observed_at
    seen_until = {}
    for o in observations:
        key = OfferKey.from_series(o.series)
        seen_until[o.series] = newest_by_region[(key.provider, key.region)]
    history = store.offers.history
    report.appended = history.append(observations, seen_until=seen_until)
    report.hardware = history.remember_hardware(hardware)
    return report
