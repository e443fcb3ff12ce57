"""Read a job spec file and pack its working directory for submission."""

from __future__ import annotations

import base64
import io
import tarfile
from datetime import date, datetime
from pathlib import Path
from typing import Any

import yaml

from core import yaml_files
from core.models.limits import (
    BUNDLE_MAX_BYTES,
    BUNDLE_MAX_MEMBERS,
    BUNDLE_MAX_UNPACKED_BYTES,
)
from scheduler.cli.client import CliError

_SKIP = {"__pycache__", ".git", ".venv", "node_modules"}


def load_spec_file(path: Path) -> dict[str, Any]:
    """YAML → mapping, with ``workdir`` resolved against the file's folder.

    Raises ``CliError`` for a missing file, bad YAML or a missing workdir.
    """
    try:
        raw = yaml_files.load(path.read_text())
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

    Raises ``CliError`` naming ``workdir`` when the bundle would be over a limit the daemon
    refuses (:data:`~core.models.limits.BUNDLE_MAX_BYTES` packed,
    :data:`~core.models.limits.BUNDLE_MAX_UNPACKED_BYTES` unpacked,
    :data:`~core.models.limits.BUNDLE_MAX_MEMBERS` members); packing stops at the first
    limit crossed, so a huge folder is not read to the end first.
    """
    if not workdir:
        return None
    root = Path(workdir)
    excluded = Path(checkpoint_dir).parts if checkpoint_dir else None
    buffer = io.BytesIO()
    members = 0

    def skip(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        nonlocal members
        parts = Path(info.name).parts
        if _SKIP & set(parts) or (excluded and parts[:len(excluded)] == excluded):
            return None
        members += 1
        if (buffer.tell() > BUNDLE_MAX_BYTES or members > BUNDLE_MAX_MEMBERS
                or tar.offset + info.size > BUNDLE_MAX_UNPACKED_BYTES):
            raise _OverLimit
        return info

    try:
        with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
            for child in sorted(root.iterdir()):
                tar.add(child, arcname=child.name, filter=skip)
    except _OverLimit:
        raise _too_big(root, buffer.tell(), members) from None
    if buffer.tell() > BUNDLE_MAX_BYTES:
        raise _too_big(root, buffer.tell(), members)
    return base64.b64encode(buffer.getvalue()).decode()


class _OverLimit(Exception):
    pass


def _too_big(root: Path, packed: int, members: int) -> CliError:
    biggest = sorted((p for p in root.rglob("*") if p.is_file() and not p.is_symlink()),
                     key=lambda p: p.stat().st_size, reverse=True)[:3]
    listing = ", ".join(f"{p.relative_to(root)} ({p.stat().st_size / 2**20:.0f} MiB)"
                        for p in biggest)
    return CliError(f"workdir: {root} is over the limits for shipped code "
                    f"({BUNDLE_MAX_BYTES // 2**20} MiB packed, "
                    f"{BUNDLE_MAX_UNPACKED_BYTES // 2**20} MiB unpacked, "
                    f"{BUNDLE_MAX_MEMBERS} files; got {packed / 2**20:.0f} MiB packed and "
                    f"{members} files before stopping); largest files: {listing}. Ship data "
                    "through your own storage instead.")
