"""A checkpoint store in a local folder: the embedded default, and the test double for S3."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import BinaryIO

from scheduler.checkpoints.objectstore import (
    CheckpointStoreError,
    ObjectNotFound,
    check_key,
)

# Names of half-written objects; list_keys never shows them and keys may not use the prefix.
_TEMP_PREFIX = ".ga-tmp-"


def _write_replacing(final: Path, fill: Callable[[BinaryIO], object], what: str) -> None:
    """Write ``final`` through a temp file in its folder (``fill`` writes the bytes), fsynced
    and then renamed over it (``os.replace``), so an interrupted write leaves no torn file.

    Raises :class:`CheckpointStoreError` ``"cannot {what}: ..."`` for an I/O error; the temp
    file is removed whatever happens.
    """
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=_TEMP_PREFIX, dir=final.parent)
    except OSError as exc:
        raise CheckpointStoreError(f"cannot {what}: {exc}") from exc
    try:
        with os.fdopen(fd, "wb") as out:
            fill(out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp_name, final)
    except BaseException as exc:
        Path(tmp_name).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise CheckpointStoreError(f"cannot {what}: {exc}") from exc
        raise


class LocalObjectStore:
    """An :class:`~scheduler.checkpoints.objectstore.ObjectStore` over the folder ``root``.

    Key ``a/b/c`` is the file ``root/a/b/c``. Every write goes to a temp file in the same folder,
    is fsynced, then renamed over the final name (``os.replace``), so a crash never leaves a
    half-written object under its final key. Safe to share between threads and processes:
    concurrent writers of one key leave one complete version.

    - **root**: the folder (created if missing).

    Raises :class:`CheckpointStoreError` for I/O errors other than a missing key.
    """

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root).expanduser().resolve()
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CheckpointStoreError(f"cannot create store folder {self.root}: {exc}") from exc

    def __repr__(self) -> str:
        return f"LocalObjectStore({str(self.root)!r})"

    def _path(self, key: str) -> Path:
        check_key(key)
        if any(part.startswith(_TEMP_PREFIX) for part in key.split("/")):
            raise ValueError(f"object key {key!r} may not use the reserved prefix {_TEMP_PREFIX!r}")
        return self.root / key

    def _write_atomic(self, key: str, fill: Callable[[BinaryIO], object]) -> None:
        _write_replacing(self._path(key), fill, f"write {key}")

    def put_bytes(self, key: str, data: bytes) -> None:
        self._write_atomic(key, lambda out: out.write(data))

    def put_file(self, key: str, path: Path) -> None:
        try:
            src = open(path, "rb")  # noqa: SIM115 - opened apart to tell a read error from a write one
        except OSError as exc:
            raise CheckpointStoreError(f"cannot read {path} for {key}: {exc}") from exc
        with src:
            self._write_atomic(key, lambda out: shutil.copyfileobj(src, out, 1 << 20))

    def get_bytes(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise ObjectNotFound(key) from None
        except OSError as exc:
            raise CheckpointStoreError(f"cannot read {key}: {exc}") from exc

    def get_file(self, key: str, dest_path: Path) -> None:
        try:
            src = open(self._path(key), "rb")  # noqa: SIM115 - a missing key is ObjectNotFound
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise ObjectNotFound(key) from None
        except OSError as exc:
            raise CheckpointStoreError(f"cannot read {key}: {exc}") from exc
        with src:
            # Same temp + rename as writes, so an interrupted download leaves no torn file.
            _write_replacing(Path(dest_path), lambda out: shutil.copyfileobj(src, out, 1 << 20),
                             f"download {key} to {dest_path}")

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def list_keys(self, prefix: str) -> list[str]:
        # Walk only the deepest folder the prefix names, not the whole store.
        base_rel = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        base = self.root / base_rel if base_rel else self.root
        if not base.is_dir():
            return []
        keys = []
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = [d for d in dirnames if not d.startswith(_TEMP_PREFIX)]
            rel_dir = Path(dirpath).relative_to(self.root).as_posix()
            for name in filenames:
                if name.startswith(_TEMP_PREFIX):
                    continue
                key = name if rel_dir == "." else f"{rel_dir}/{name}"
                if key.startswith(prefix):
                    keys.append(key)
        return sorted(keys)

    def delete(self, keys: Iterable[str]) -> None:
        for key in keys:
            path = self._path(key)
            try:
                # Empty folders are left in place: removing them would race with a writer
                # that has just created the folder for its temp file.
                path.unlink(missing_ok=True)
            except OSError as exc:
                raise CheckpointStoreError(f"cannot delete {key}: {exc}") from exc
