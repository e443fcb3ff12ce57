"""Processes of the replay cloud: starting instance agents and telling whether they still run.

Each instance's agent is started in its own session (``start_new_session=True``), so its session
id equals its pid and it survives the cloud and the daemon dying. The session is the instance:
the agent runs the job in a process group of its own inside that session, so terminating an
instance signals every process of the session — as powering off a VM would — and a job whose
agent was killed outright cannot outlive its instance. Liveness checks use ``/proc`` (Linux) so that zombies and reused
pids do not count as alive; elsewhere they fall back to ``os.kill(pid, 0)``.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

_PROC = Path("/proc")


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of ``/proc/<pid>/stat`` after the command name (field 3 onward), or ``None``."""
    try:
        text = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # The command name may contain spaces and parentheses: split after the last ')'.
    return text[text.rfind(")") + 2:].split()


def start_marker(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (``/proc/<pid>/stat`` field 22), used
    with the pid to recognise the same process later; ``None`` where ``/proc`` is missing."""
    fields = _stat_fields(pid)
    return fields[19] if fields and len(fields) > 19 else None


def is_alive(pid: int | None, marker: str | None = None) -> bool:
    """True when ``pid`` runs, is not a zombie, and (if ``marker`` is given and ``/proc`` exists)
    is the same process that was started then."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    fields = _stat_fields(pid)
    if fields is None:
        return not _PROC.exists()
    if fields[0] in ("Z", "X"):
        return False
    return marker is None or (len(fields) > 19 and fields[19] == marker)


def _group_is_ours(pgid: int, marker: str | None) -> bool:
    """False when pid ``pgid`` now belongs to another process than the one started with
    ``marker``. The kernel does not hand out a pid while a process group of that id exists, so
    a reused pid means our group is entirely gone; a missing leader means any process left in
    group ``pgid`` is one of ours."""
    if marker is None:
        return True
    fields = _stat_fields(pgid)
    return fields is None or (len(fields) > 19 and fields[19] == marker)


def _session_members(sid: int) -> list[int]:
    """Pids of the non-zombie processes in session ``sid`` (``/proc/<pid>/stat`` field 6)."""
    members = []
    wanted = str(sid)
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        if fields and len(fields) > 3 and fields[3] == wanted and fields[0] not in ("Z", "X"):
            members.append(int(entry.name))
    return members


def group_alive(pgid: int | None, marker: str | None = None) -> bool:
    """True when any non-zombie process is in the session led by ``pgid`` (the agent or
    anything it started, including the job's own process group), and the session is the one
    whose leader started with ``marker`` (when given). Without ``/proc`` only the leader is
    checked."""
    if not pgid:
        return False
    if not _PROC.exists():
        return is_alive(pgid)
    if not _group_is_ours(pgid, marker):
        return False
    return bool(_session_members(pgid))


def signal_group(pgid: int | None, sig: int = signal.SIGTERM,
                 marker: str | None = None) -> None:
    """Send ``sig`` to every process of the session led by ``pgid``; quiet when it is already
    gone, and a no-op when ``pgid`` was reused by an unrelated process (``marker`` differs: see
    :func:`_group_is_ours`)."""
    if not pgid or not _group_is_ours(pgid, marker):
        return
    targets = _session_members(pgid) if _PROC.exists() else [pgid]
    for pid in targets:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def find_leader_in_dir(work_dir: Path) -> int | None:
    """Pid of a live session leader whose working directory is ``work_dir``, or ``None``.

    Repairs the one window the state file cannot cover: a cloud that died after starting an
    agent but before recording its pid. Linux only; elsewhere always ``None``.
    """
    if not _PROC.exists():
        return None
    target = str(work_dir.resolve())
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            if os.readlink(entry / "cwd") != target:
                continue
        except OSError:
            continue
        fields = _stat_fields(pid)
        # field 6 is the session id: a leader started with start_new_session has sid == pid
        if fields and len(fields) > 3 and fields[3] == str(pid) and fields[0] not in ("Z", "X"):
            return pid
    return None


def spawn_agent(
    command: Sequence[str], work_dir: Path, env: Mapping[str, str], log_path: Path
) -> subprocess.Popen[bytes]:
    """Start ``command`` in ``work_dir`` in a new session, stdout and stderr appended to
    ``log_path``. Raises ``OSError`` when the command cannot be started."""
    work_dir.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        return subprocess.Popen(
            list(command), cwd=work_dir, env=dict(env), stdin=subprocess.DEVNULL,
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True, close_fds=True,
        )
