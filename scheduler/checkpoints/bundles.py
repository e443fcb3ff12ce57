"""Ship a job's working directory: pack it to ``jobs/{job_id}/code.tar.gz``, unpack it on the
instance."""

from __future__ import annotations

import io
import logging
import os
import tarfile
import tempfile
from pathlib import Path, PurePosixPath

from scheduler.checkpoints import keys
from scheduler.checkpoints.objectstore import ObjectNotFound, ObjectStore, UnsafeBundle

logger = logging.getLogger(__name__)

# Folders never shipped: caches and VCS metadata are large and useless on the instance.
EXCLUDED_DIRS = frozenset({"__pycache__", ".git"})


def _exclude(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    parts = PurePosixPath(info.name).parts
    return None if any(p in EXCLUDED_DIRS for p in parts) else info


def upload_workdir(store: ObjectStore, job_id: str, path: Path) -> str:
    """Pack the folder ``path`` (tar.gz, without ``__pycache__``/``.git``) and store it as the
    job's code bundle, replacing any previous one.

    Member names are relative to ``path``; symlinks are kept as links (download refuses those
    pointing outside the folder).

    Returns the bundle's key, ``jobs/{job_id}/code.tar.gz``.

    Raises ``NotADirectoryError`` if ``path`` is not a folder, ``ValueError`` for a malformed
    ``job_id``, :class:`CheckpointStoreError` when the store cannot be written.
    """
    key = keys.code_bundle_key(job_id)
    src = Path(path)
    if not src.is_dir():
        raise NotADirectoryError(f"job workdir {src} is not a folder")
    fd, tmp_name = tempfile.mkstemp(prefix="ga-bundle-", suffix=".tar.gz")
    os.close(fd)
    try:
        with tarfile.open(tmp_name, "w:gz") as tar:
            for child in sorted(src.iterdir()):
                tar.add(child, arcname=child.name, filter=_exclude)
        store.put_file(key, Path(tmp_name))
        logger.info("uploaded code bundle of job %s (%d bytes)", job_id, os.path.getsize(tmp_name))
    finally:
        Path(tmp_name).unlink(missing_ok=True)
    return key


def _check_members(tar: tarfile.TarFile) -> None:
    for member in tar.getmembers():
        name = member.name
        if name.startswith("/") or PurePosixPath(name).is_absolute():
            raise UnsafeBundle(f"code bundle member {name!r} has an absolute path")
        if ".." in PurePosixPath(name).parts:
            raise UnsafeBundle(f"code bundle member {name!r} contains '..'")
        if member.isdev():
            raise UnsafeBundle(f"code bundle member {name!r} is a device file")


def check_bundle(data: bytes) -> None:
    """Refuse, before anything is stored, a bundle the agent would refuse to unpack: the same
    member checks and tarfile's ``data`` filter (no absolute or escaping links, no devices).

    Raises :class:`UnsafeBundle` naming the member, ``tarfile.TarError`` if it does not parse.
    """
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        _check_members(tar)
        for member in tar.getmembers():
            try:
                tarfile.data_filter(member, "/bundle-check")
            except tarfile.FilterError as exc:
                raise UnsafeBundle(f"code bundle refused: {exc}") from None


def download_workdir(store: ObjectStore, job_id: str, dest_dir: Path) -> bool:
    """Unpack the job's code bundle into ``dest_dir`` (created if missing; files already there
    with the same names are overwritten).

    Members with absolute paths or ``..`` parts are refused before anything is written, and
    extraction uses tarfile's ``data`` filter, which also refuses links that leave ``dest_dir``.

    Returns ``True`` if a bundle was unpacked, ``False`` if the job has none.

    Raises :class:`UnsafeBundle` for a refused member, :class:`CheckpointStoreError` when the
    store cannot be read, ``tarfile.TarError`` for an archive that does not parse.
    """
    key = keys.code_bundle_key(job_id)
    dest = Path(dest_dir)
    dest.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix="ga-bundle-", suffix=".tar.gz")
    os.close(fd)
    try:
        try:
            store.get_file(key, Path(tmp_name))
        except ObjectNotFound:
            return False
        with tarfile.open(tmp_name, "r:gz") as tar:
            _check_members(tar)
            try:
                tar.extractall(dest, filter="data")
            except tarfile.FilterError as exc:
                raise UnsafeBundle(f"code bundle refused: {exc}") from exc
        logger.info("unpacked code bundle of job %s into %s", job_id, dest)
        return True
    finally:
        Path(tmp_name).unlink(missing_ok=True)
