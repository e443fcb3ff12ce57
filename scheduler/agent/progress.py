"""The agent's reader of the job's progress file (format: :mod:`scheduler.progress`).

The agent exports ``SCHED_PROGRESS_FILE`` (``WORK_DIR/progress.jsonl``, outside the checkpoint
folder) and calls :meth:`ProgressFile.poll` before every report. Each poll reads only what was
appended since the last one and keeps two points: the first of this attempt and the latest.

Limits, so that a job can neither stall nor flood the agent:

- at most :data:`MAX_READ_BYTES` (64 KiB) per poll; when more was appended since the last
  poll, only the last 64 KiB are read (from the first line start in them): every point is
  cumulative, so the skipped ones hold nothing the latest does not;
- a line longer than :data:`MAX_LINE_BYTES` (4 KiB) is skipped (counted in ``skipped_long``);
- a file that was replaced (another inode), truncated (shorter than what was read) or
  rewritten in place (``open(path, "w")`` each update: the :data:`TAIL_BYTES` bytes before
  where the last poll stopped changed) is read again from its start (within the same 64 KiB
  bound); a file that does not exist (yet) is no progress;
- a line that is not UTF-8 JSON in the format, whose ``done`` exceeds its ``total``, whose
  unit differs from the attempt's first point, whose ``t`` is more than
  :data:`MAX_AHEAD_S` (60 s) ahead of the time the agent reads it or more than
  :data:`MAX_BEHIND_S` (an hour) behind it (lines are read seconds after they are written: such
  a ``t`` is a wrong clock or a wrong unit, and one such point would distort the measured
  rate), or older than the attempt's first point, is counted in ``bad_lines`` and ignored;
  blank lines are ignored;
- a half-written last line is kept until its newline arrives.

:meth:`ProgressFile.poll` never raises: an unreadable file is logged once and read again next
time.
"""

from __future__ import annotations

import json
import logging
import math
import os
from datetime import UTC, datetime
from pathlib import Path

from pydantic import ValidationError

from core.models.work import WORK_MAX_UNITS, ProgressPoint, WorkUnit

logger = logging.getLogger(__name__)

MAX_READ_BYTES = 64 * 1024
MAX_LINE_BYTES = 4 * 1024
MAX_AHEAD_S = 60.0
MAX_BEHIND_S = 3600.0
TAIL_BYTES = 64  # what is compared to notice a file rewritten in place
_UNITS = tuple(unit.value for unit in WorkUnit)


def parse_line(raw: bytes, read_at: datetime) -> ProgressPoint | None:
    """The point of one line (without its newline), ``at`` = its ``t`` or else ``read_at``;
    ``None`` when the line is not in the format (see :mod:`scheduler.progress`), its
    ``done`` exceeds its ``total``, or its ``t`` is more than :data:`MAX_AHEAD_S` ahead of
    ``read_at`` or :data:`MAX_BEHIND_S` behind it."""
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    units = [u for u in _UNITS if u in data]
    if len(units) != 1:
        return None
    unit = units[0]
    done, total, t = data[unit], data.get("total"), data.get("t")
    if not _number(done) or not 0 <= done <= WORK_MAX_UNITS:
        return None
    if total is not None and (not _number(total) or not 0 < total <= WORK_MAX_UNITS
                              or done > total):
        return None
    at = read_at
    if t is not None:
        if not _number(t):
            return None
        try:
            at = datetime.fromtimestamp(t, UTC)
        except (OverflowError, OSError, ValueError):  # e.g. milliseconds by mistake
            return None
        if not -MAX_BEHIND_S <= (at - read_at).total_seconds() <= MAX_AHEAD_S:
            return None
    try:
        return ProgressPoint(unit=WorkUnit(unit), done=done, total=total, at=at)
    except ValidationError:
        return None


def _number(value: object) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))


class ProgressFile:
    """Reads the progress file at ``path`` for one attempt.

    ``first`` and ``latest`` are the first and the newest valid points read (``None`` until
    one is); ``bad_lines`` and ``skipped_long`` count what was ignored. One thread only.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.first: ProgressPoint | None = None
        self.latest: ProgressPoint | None = None
        self.bad_lines = 0
        self.skipped_long = 0
        self._inode: tuple[int, int] | None = None
        self._offset = 0
        self._partial = b""
        self._tail = b""  # the last TAIL_BYTES bytes read, just before _offset
        self._skipping = False  # inside a line that grew past MAX_LINE_BYTES
        self._failed_logged = False

    def reset(self) -> None:
        """Remove a file left by an earlier run in this work folder, so that the attempt's
        first point is one its own job wrote (quiet when there is none)."""
        try:
            self.path.unlink(missing_ok=True)
        except OSError as exc:
            logger.warning("cannot remove old progress file %s: %s", self.path, exc)

    def poll(self, now: datetime | None = None) -> ProgressPoint | None:
        """Read what was appended since the last poll; returns :attr:`latest`. Never raises."""
        try:
            self._read(now or datetime.now(UTC))
        except Exception as exc:  # noqa: BLE001 - whatever the job did to its file
            if not self._failed_logged:
                self._failed_logged = True
                logger.warning("cannot read progress file %s: %s", self.path, exc)
        return self.latest

    def _read(self, now: datetime) -> None:
        try:
            fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        except FileNotFoundError:
            return
        try:
            st = os.fstat(fd)
            inode = (st.st_dev, st.st_ino)
            if inode != self._inode or st.st_size < self._offset or (
                    self._tail and os.pread(fd, len(self._tail),
                                            self._offset - len(self._tail)) != self._tail):
                self._inode, self._offset, self._tail = inode, 0, b""
                self._partial, self._skipping = b"", False
            if st.st_size - self._offset > MAX_READ_BYTES:
                # Only the newest points matter: jump to the last 64 KiB, resuming at a line
                # start (unless the jump lands on one, what precedes the first newline there
                # is a line's tail).
                self._offset = st.st_size - MAX_READ_BYTES
                self._partial, self._tail = b"", b""
                self._skipping = os.pread(fd, 1, self._offset - 1) != b"\n"
            chunk = os.pread(fd, MAX_READ_BYTES, self._offset)
        finally:
            os.close(fd)
        self._offset += len(chunk)
        self._tail = (self._tail + chunk)[-TAIL_BYTES:]
        self._take(chunk, now)

    def _take(self, chunk: bytes, now: datetime) -> None:
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()  # the unfinished last line (b"" after a newline)
        for line in lines:
            if self._skipping:  # the tail of a line already skipped
                self._skipping = False
                continue
            self._line(line, now)
        if len(self._partial) > MAX_LINE_BYTES:
            if not self._skipping:
                self.skipped_long += 1
            self._partial, self._skipping = b"", True

    def _line(self, line: bytes, now: datetime) -> None:
        if not line.strip():
            return
        if len(line) > MAX_LINE_BYTES:
            self.skipped_long += 1
            return
        point = parse_line(line, now)
        if point is None or (self.first is not None and (point.unit != self.first.unit
                                                         or point.at < self.first.at)):
            self.bad_lines += 1
            if self.bad_lines == 1:
                logger.warning("ignoring a malformed progress line (format: "
                               "scheduler.progress): %r", line[:200])
            return
        if self.first is None:
            self.first = point
        self.latest = point
