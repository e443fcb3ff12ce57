"""The sha256 of checkpoint files hashed by earlier commits of this process, so a commit does
not read again the files that did not change since.

An entry maps a file (the checkpoint folder, its relative path) to the :class:`FileState`
it had while it was read and the sha256 of what was read. It is trusted only while the file
still has exactly that state (device, inode, size, mtime_ns, ctime_ns) AND the file had
been quiet for :data:`SETTLE_NS` before the read began: a write lands at a timestamp at
least that much later, so it changes the state even where timestamps are coarse (FAT: 2 s;
most Linux filesystems: one clock tick). A file written less than 2 s before a commit is
therefore hashed again by the next commit, which then remembers it. A rename over the file
(new inode), a write that restores the mtime (``ctime`` moves) and a truncate all miss.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from dataclasses import dataclass

SETTLE_NS = 2_000_000_000
# Checkpoint folders remembered per process (the agent commits one; tests and tools more).
MAX_FOLDERS = 16


@dataclass(frozen=True)
class FileState:
    """What ``fstat`` says of a file: changes whenever its bytes do (see the module doc)."""

    dev: int
    ino: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, st: os.stat_result) -> FileState:
        return cls(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)

    def settled(self, read_started_ns: int) -> bool:
        """Whether the file was last written at least :data:`SETTLE_NS` before
        ``read_started_ns`` (Unix time in ns, taken before the state was)."""
        return max(self.mtime_ns, self.ctime_ns) <= read_started_ns - SETTLE_NS


class DigestCache:
    """``(folder, relative path) -> (FileState, sha256)``, the last commit's of each folder.

    Thread-safe. :meth:`replace` swaps a folder's entries as a whole after a commit, so a
    folder's entries never outgrow its files; at most :data:`MAX_FOLDERS` folders are kept
    (least recently committed dropped first).
    """

    def __init__(self, max_folders: int = MAX_FOLDERS) -> None:
        self._folders: OrderedDict[str, dict[str, tuple[FileState, str]]] = OrderedDict()
        self._max = max_folders
        self._lock = threading.Lock()

    def lookup(self, folder: str, rel: str, state: FileState) -> str | None:
        """The remembered sha256 of ``rel`` if the file still has ``state``, else ``None``."""
        with self._lock:
            entry = self._folders.get(folder, {}).get(rel)
        return entry[1] if entry is not None and entry[0] == state else None

    def replace(self, folder: str, entries: dict[str, tuple[FileState, str]]) -> None:
        """Remember exactly ``entries`` (relative path -> (state, sha256)) for ``folder``."""
        with self._lock:
            self._folders.pop(folder, None)
            self._folders[folder] = dict(entries)
            while len(self._folders) > self._max:
                self._folders.popitem(last=False)

    def forget(self, folder: str | None = None) -> None:
        """Drop ``folder``'s entries (every folder's when ``None``)."""
        with self._lock:
            if folder is None:
                self._folders.clear()
            else:
                self._folders.pop(folder, None)


PROCESS_CACHE = DigestCache()
