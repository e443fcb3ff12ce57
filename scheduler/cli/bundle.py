"""Read a job spec file and pack its working directory for submission."""

from __future__ import annotations

import base64
import io
import tarfile
from datetime import date, datetime
from pathlib import Path
from typing import Any

import yaml

from scheduler.cli.client import CliError
from scheduler.services.jobs import MAX_BUNDLE_BYTES

_SKIP = {"__pycache__", ".git", ".venv", "node_modules"}


def load_spec_file(path: Path) -> dict[str, Any]:
    """YAML → mapping, with ``workdir`` resolved against the file's folder.

    Raises ``CliError`` for a missing file, bad YAML or a missing workdir.
    """
    try:
        raw = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise CliError(f"{path}: no such file") from None
    except yaml.YAMLError as exc:
        raise CliError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(raw, dict):
        raise CliError(f"{path}: a job spec must be a mapping of fields, got {type(raw).__name__}")
    raw = _json_ready(raw)
    workdir = raw.get("workdir")
    if isinstance(workdir, str):
        resolved = (path.parent / workdir).resolve()
        if not resolved.is_dir():
            raise CliError(f"workdir: got {workdir!r}; {resolved} is not a directory")
        raw["workdir"] = str(resolved)
    return raw


def _json_ready(value: Any) -> Any:
    """YAML turns an unquoted ``2026-12-01T18:00:00Z`` into a datetime; send it as the ISO
    string it was written as (a naive one stays naive, so the API can say it needs a zone)."""
    if isinstance(value, dict):
        return {k: _json_ready(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_ready(v) for v in value]
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    return value


def pack_spec(raw: dict[str, Any]) -> str | None:
    """The bundle of a loaded spec mapping (see :func:`pack_workdir`)."""
    workdir = raw.get("workdir")
    checkpoint = raw.get("checkpoint")
    ckpt_dir = checkpoint.get("dir", "checkpoints") if isinstance(checkpoint, dict) else "checkpoints"
    return pack_workdir(workdir if isinstance(workdir, str) else None,
                        ckpt_dir if isinstance(ckpt_dir, str) else None)


def pack_workdir(workdir: str | None, checkpoint_dir: str | None = "checkpoints") -> str | None:
    """gzip tar of ``workdir`` as base64 (``None`` when there is no workdir).

    The job's checkpoint dir (relative to ``workdir``) is left out: a checkpoint left over from
    a local run must not be shipped and resumed; checkpoints travel only through the store.
    """
    if not workdir:
        return None
    root = Path(workdir)
    excluded = Path(checkpoint_dir).parts if checkpoint_dir else None

    def skip(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        parts = Path(info.name).parts
        if _SKIP & set(parts) or (excluded and parts[:len(excluded)] == excluded):
            return None
        return info

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for child in sorted(root.iterdir()):
            tar.add(child, arcname=child.name, filter=skip)
    if buffer.tell() > MAX_BUNDLE_BYTES:
        biggest = sorted((p for p in root.rglob("*") if p.is_file() and not p.is_symlink()),
                         key=lambda p: p.stat().st_size, reverse=True)[:3]
        listing = ", ".join(f"{p.relative_to(root)} ({p.stat().st_size / 2**20:.0f} MiB)"
                            for p in biggest)
        raise CliError(f"workdir: {root} packs to {buffer.tell() / 2**20:.0f} MiB, over the "
                       f"{MAX_BUNDLE_BYTES // 2**20} MiB limit for shipped code; largest files: "
                       f"{listing}. Ship data through your own storage instead.")
    return base64.b64encode(buffer.getvalue()).decode()
