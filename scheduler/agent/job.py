"""The user's command: started in its own process group (as the job user where there is one,
see :mod:`scheduler.agent.job_user`), output captured line by line."""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from core.models import JobSpec
from scheduler.agent.job_user import JobUser
from scheduler.secrets import STORE_ENV_NAMES
from scheduler.timing import AGENT_KILL_WAIT_S, AGENT_OUTPUT_DRAIN_S

logger = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
# How often the group is checked while it has its grace period to exit.
_GROUP_POLL_S = 0.1


def job_environment(base: Mapping[str, str], spec: JobSpec, checkpoint_dir: Path,
                    resumed: bool, job_id: str,
                    progress_file: Path | None = None) -> dict[str, str]:
    """The command's environment: ``base`` without any ``GA_*`` variable (they hold the agent
    token and daemon/store endpoints the job has no business with) and without the checkpoint
    store's credentials the daemon hands the agent (``STORE_ENV_NAMES``: they would end up in
    the job's logs), plus ``spec.env`` (which may set any of them explicitly), plus
    ``SCHED_CHECKPOINT_DIR`` (absolute), ``SCHED_RESUME`` (``1`` when a checkpoint was
    restored, else ``0``), ``SCHED_JOB_ID`` and, when given, ``SCHED_PROGRESS_FILE``
    (absolute; where the job may append its progress, see :mod:`scheduler.progress`). Other
    variables of ``base`` pass through, e.g. ``SCHED_REPLAY_SPEED`` on a replayed market."""
    env = {k: v for k, v in base.items()
           if not k.startswith("GA_") and k not in STORE_ENV_NAMES}
    env.update(spec.env)
    env.update(
        SCHED_CHECKPOINT_DIR=str(Path(checkpoint_dir).absolute()),
        SCHED_RESUME="1" if resumed else "0",
        SCHED_JOB_ID=job_id,
    )
    if progress_file is not None:
        env["SCHED_PROGRESS_FILE"] = str(Path(progress_file).absolute())
    return env


def _die_with_agent() -> None:
    # Runs in the child before exec. If the agent is killed outright (SIGKILL, OOM), the job
    # must not live on unsupervised: the daemon will already be starting it elsewhere. Only
    # the direct child (the shell, or what it execs) gets this; grandchildren do not.
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def group_alive(pgid: int) -> bool:
    """Whether any live (non-zombie) process is in process group ``pgid``.

    Reads ``/proc`` on Linux, where zombies must not count (a container's PID 1 may never
    reap them); elsewhere falls back to ``killpg(pgid, 0)``.
    """
    proc = Path("/proc")
    if not (proc / "self" / "stat").exists():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    wanted = str(pgid)
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            # "pid (comm) state ppid pgrp ..."; comm may contain spaces and parentheses.
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and fields[2] == wanted and fields[0] not in ("Z", "X"):
            return True
    return False


def shell_exit_code(returncode: int) -> int:
    """Popen's return code in shell convention: a death by signal N becomes 128 + N."""
    return returncode if returncode >= 0 else 128 - returncode


class JobProcess:
    """A running command. Use :meth:`start`.

    The command runs as ``/bin/sh -c COMMAND`` in a new process group (its id is the shell's
    pid, and signals to the group reach everything it started) inside the agent's session,
    and is SIGKILLed if the agent dies. stdout and stderr are merged; every line is appended
    to ``log_path`` and passed to ``on_line``. Methods are meant for one controlling thread.
    """

    def __init__(self, popen: subprocess.Popen[bytes], reader: threading.Thread) -> None:
        self._popen = popen
        self._reader = reader

    @classmethod
    def start(cls, command: str, cwd: Path, env: Mapping[str, str], log_path: Path,
              on_line: Callable[[str], None], user: JobUser | None = None,
              umask: int = -1) -> JobProcess:
        """Start ``command`` in ``cwd`` with exactly ``env``.

        - **user** (optional): run it as this user, with its own groups only (the agent must
          be root); default the agent's user.
        - **umask** (optional): the command's umask (the agent's own is 077); default the
          agent's.

        Raises ``OSError`` if it cannot be started (e.g. ``cwd`` missing or not the user's),
        ``PermissionError`` included."""
        as_user: dict = {}
        if user is not None:
            as_user = dict(user=user.uid, group=user.gid, extra_groups=list(user.groups))
        popen = subprocess.Popen(
            ["/bin/sh", "-c", command], cwd=cwd, env=dict(env),
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            # Its own process group (signals reach the whole job) but the agent's session: on a
            # replayed market the session is the instance, so terminating it stops the job too.
            # _die_with_agent runs after the uid switch, which would clear a death signal
            # set before it.
            process_group=0, preexec_fn=_die_with_agent, close_fds=True, umask=umask,
            **as_user,
        )
        reader = threading.Thread(target=_pump, args=(popen, log_path, on_line),
                                  name="job-output", daemon=True)
        reader.start()
        logger.info("started job command (pid %d) in %s%s", popen.pid, cwd,
                    f" as user {user.name}" if user is not None else "")
        return cls(popen, reader)

    @property
    def pid(self) -> int:
        return self._popen.pid

    def wait(self, timeout_s: float) -> int | None:
        """Wait up to ``timeout_s`` seconds; the exit code (shell convention) or ``None``."""
        try:
            return shell_exit_code(self._popen.wait(timeout=timeout_s))
        except subprocess.TimeoutExpired:
            return None

    def signal_group(self, sig: int) -> None:
        """Send ``sig`` to the command's process group; quiet if it is already gone."""
        try:
            os.killpg(self._popen.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def stop(self, sig: int, grace_s: float, on_wait: Callable[[], None] | None = None,
             on_wait_every_s: float = 2.0) -> int:
        """Send ``sig`` to the group and give every process in it up to ``grace_s`` seconds to
        exit, then SIGKILL the group. Returns the command's exit code (shell convention).

        The whole group is waited for, not just the shell: ``/bin/sh -c`` often dies at once
        on SIGTERM while the program it started is still saving its checkpoint.

        - **on_wait** (optional): called every ``on_wait_every_s`` seconds while waiting (the
          agent keeps heartbeating through a long grace period).
        """
        self.signal_group(sig)
        now = time.monotonic()
        deadline, next_call = now + grace_s, now + on_wait_every_s
        while group_alive(self._popen.pid) and time.monotonic() < deadline:
            self._popen.poll()  # reap the shell so it does not count as alive
            if on_wait is not None and time.monotonic() >= next_call:
                next_call = time.monotonic() + on_wait_every_s
                on_wait()
            time.sleep(_GROUP_POLL_S)
        if group_alive(self._popen.pid):
            logger.warning("job still running %.0f s after %s; killing its process group",
                           grace_s, signal.Signals(sig).name)
            self.signal_group(signal.SIGKILL)
        code = self.wait(AGENT_KILL_WAIT_S)
        return code if code is not None else 128 + signal.SIGKILL

    def finish(self) -> None:
        """After the command exited: kill whatever it left running in its group and wait
        (briefly) for the rest of its output to be captured."""
        self.signal_group(signal.SIGKILL)
        self._reader.join(AGENT_OUTPUT_DRAIN_S)


def _pump(popen: subprocess.Popen[bytes], log_path: Path, on_line: Callable[[str], None]) -> None:
    assert popen.stdout is not None
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log, popen.stdout:
        for raw in popen.stdout:
            log.write(raw)
            log.flush()
            try:
                on_line(raw.decode("utf-8", errors="replace").rstrip("\r\n"))
            except Exception:  # a reporting bug must not stop output capture (or block the job)
                logger.exception("output line handler failed")
