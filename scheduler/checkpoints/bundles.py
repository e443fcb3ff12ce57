"""Ship a job's working directory: pack it to ``jobs/{job_id}/code.tar.gz``, unpack it on the
instance."""

from __future__ import annotations

import gzip
import io
import logging
import os
import tarfile
import tempfile
import zlib
from pathlib import Path, PurePosixPath

from core.models.limits import BUNDLE_MAX_MEMBERS, BUNDLE_MAX_UNPACKED_BYTES
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
    _check_members_of(tar.getmembers())


def _check_members_of(members: list[tarfile.TarInfo]) -> None:
    for member in members:
        name = member.name
        if name.startswith("/") or PurePosixPath(name).is_absolute():
            raise UnsafeBundle(f"code bundle member {name!r} has an absolute path")
        if ".." in PurePosixPath(name).parts:
            raise UnsafeBundle(f"code bundle member {name!r} contains '..'")
        if member.isdev():
            raise UnsafeBundle(f"code bundle member {name!r} is a device file")


def check_bundle(data: bytes, *, max_unpacked_bytes: int = BUNDLE_MAX_UNPACKED_BYTES,
                 max_members: int = BUNDLE_MAX_MEMBERS) -> None:
    """Refuse, before anything is stored, a bundle the agent would refuse or fail to unpack:
    the same member checks and tarfile's ``data`` filter (no absolute or escaping links, no
    devices); every byte decompressed (a truncated or corrupt gzip stream, a tar cut short,
    which tarfile itself would read as a shorter archive); at most ``max_members`` members
    and ``max_unpacked_bytes`` of tar stream. Nothing past that size is ever decompressed, so
    a gzip bomb costs no more than the limit; memory stays at one member's header.

    ``data``: the gzip tar, as uploaded. Raises :class:`UnsafeBundle` naming the member or the
    limit, ``tarfile.TarError`` (a ``ReadError`` saying what is wrong) if it does not parse.
    """
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data), mode="rb") as unzipped:
            stream = _Capped(unzipped, max_unpacked_bytes)
            with tarfile.open(fileobj=stream, mode="r:") as tar:
                members = 0
                data_end = 0
                # next() by hand, dropping each member once checked: TarFile keeps them all.
                while (member := tar.next()) is not None:
                    tar.members.clear()
                    members += 1
                    if members > max_members:
                        raise UnsafeBundle(f"code bundle has more than {max_members} members")
                    data_end = member.offset_data + member.size
                    if data_end > max_unpacked_bytes:
                        raise stream.over()
                    _check_members_of([member])
                    try:
                        tarfile.data_filter(member, "/bundle-check")
                    except tarfile.FilterError as exc:
                        raise UnsafeBundle(f"code bundle refused: {exc}") from None
                _check_ending(stream, tar.offset, data_end)
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise tarfile.ReadError(f"not a complete gzip stream ({exc})") from None


class _Capped(io.RawIOBase):
    """A read-only view of the decompressed stream that refuses to go past ``limit`` bytes."""

    def __init__(self, raw: gzip.GzipFile, limit: int) -> None:
        self.raw, self.limit = raw, limit

    def over(self) -> UnsafeBundle:
        return UnsafeBundle(f"code bundle unpacks to more than {self.limit} bytes")

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.raw.tell()

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence != io.SEEK_SET or offset > self.limit:
            raise self.over()
        return self.raw.seek(offset)

    def read(self, size: int = -1) -> bytes:
        room = self.limit - self.raw.tell()
        if size is None or size < 0 or size > room:
            chunk = self.raw.read(room + 1)
            if len(chunk) > room:
                raise self.over()
            return chunk
        return self.raw.read(size)


def _check_ending(stream: _Capped, offset: int, data_end: int) -> None:
    """An end-of-archive block must follow the last member's data (tarfile stops without a
    word at a header that is missing or cut), and the gzip stream must decompress to its
    end, where its CRC is checked."""
    if offset < data_end:
        raise tarfile.ReadError("the tar archive is cut short inside a member's data")
    stream.seek(offset)
    marker = stream.read(tarfile.BLOCKSIZE)
    if len(marker) < tarfile.BLOCKSIZE or marker.strip(b"\0"):
        raise tarfile.ReadError("the tar archive is cut short (no end-of-archive block)")
    while stream.read(1024 * 1024):
        pass


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
