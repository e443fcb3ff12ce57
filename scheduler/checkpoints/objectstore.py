"""The object-store protocol that checkpoints and code bundles are written through, and the
errors every store raises.

::

    CheckpointStoreError      the store could not do it (unreachable, refused, bad credentials)
    ├── ObjectNotFound        the key does not exist
    ├── CheckpointCorrupt     an object's bytes or a manifest do not match what was committed
    └── UnsafeBundle          a code bundle holds a member that would land outside its folder

Callers retry on ``CheckpointStoreError`` itself (the store may come back) but not on its
subclasses, which will not change by retrying. Messages never contain credentials.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO, Protocol, runtime_checkable


class CheckpointStoreError(Exception):
    """Base of every checkpoint-store failure; raised as-is for transport and permission errors."""


class ObjectNotFound(CheckpointStoreError):
    """``key`` does not exist in the store."""

    def __init__(self, key: str) -> None:
        super().__init__(f"object not found: {key}")
        self.key = key


class CheckpointCorrupt(CheckpointStoreError):
    """A downloaded blob or a manifest does not match its recorded size or sha256."""


class UnsafeBundle(CheckpointStoreError):
    """A code bundle member has an absolute path, a ``..`` part, or is a link or device."""


@runtime_checkable
class ObjectStore(Protocol):
    """A flat key → bytes store (a local folder or an S3 bucket prefix).

    Keys are ``/``-separated relative paths (``jobs/j1/blobs/ab12…``) without ``..`` or empty
    parts. Every write is atomic: a reader sees the old object, the new one, or none, never a
    partial one. All methods may block on I/O and raise :class:`CheckpointStoreError` when the
    store cannot be reached.
    """

    def put_bytes(self, key: str, data: bytes) -> None:
        """Store ``data`` under ``key``, replacing any object already there."""
        ...

    def get_bytes(self, key: str) -> bytes:
        """The whole object. Raises :class:`ObjectNotFound` when ``key`` does not exist."""
        ...

    def put_file(self, key: str, path: Path) -> None:
        """Upload the local file ``path`` to ``key`` (streamed; fine for files of many GiB)."""
        ...

    def get_file(self, key: str, dest_path: Path) -> None:
        """Download ``key`` to ``dest_path`` (parent folders created; an existing file replaced).

        Raises :class:`ObjectNotFound` when ``key`` does not exist.
        """
        ...

    def exists(self, key: str) -> bool:
        """Whether an object is stored under ``key``."""
        ...

    def list_keys(self, prefix: str) -> list[str]:
        """Every key starting with ``prefix`` (plain string prefix), sorted ascending."""
        ...

    def delete(self, keys: Iterable[str]) -> None:
        """Delete ``keys``; keys that do not exist are ignored."""
        ...


def check_key(key: str) -> str:
    """Return ``key`` if it is a safe relative key, else raise ``ValueError`` naming the problem."""
    if not key or key.startswith("/") or key.endswith("/"):
        raise ValueError(f"object key {key!r} must be a non-empty relative path not ending in '/'")
    for part in key.split("/"):
        if part in ("", ".", ".."):
            raise ValueError(f"object key {key!r} has an empty, '.' or '..' part")
    return key


@runtime_checkable
class StreamingObjectStore(ObjectStore, Protocol):
    """An :class:`ObjectStore` that can also upload from a stream (S3). A commit uploads
    each new file straight from the job's folder through it; to a store without it, a
    commit uploads a frozen copy of the file (:meth:`ObjectStore.put_file`)."""

    def put_stream(self, key: str, stream: BinaryIO) -> None:
        """Store what ``stream.read(n)`` yields until ``b''`` under ``key``. An exception
        from ``stream.read`` is raised as is and nothing becomes visible under ``key``."""
        ...
