"""Keeping the agent's secrets out of the job's reach: the job user and a non-dumpable agent.

The agent holds its report token (``GA_AGENT_TOKEN``) and the checkpoint store's credentials
(``STORE_ENV_NAMES``) in its environment; :func:`~scheduler.agent.job.job_environment` keeps
them out of the command's environment. What else protects them depends on the host:

- **Always (Linux):** the agent makes itself non-dumpable (:func:`set_non_dumpable`,
  ``prctl(PR_SET_DUMPABLE, 0)``), so a process of the same uid without ``CAP_SYS_PTRACE``
  can neither read ``/proc/<agent pid>/environ`` (nor ``mem``, ``maps``) nor ``ptrace`` it.
  It does not stop root: a command running as root reads everything.
- **Agent running as root (with CAP_SETUID/SETGID/CHOWN) and the job user existing**
  (``GA_JOB_USER``, default :data:`DEFAULT_JOB_USER`; the cloud bootstrap creates it; not
  root itself): the command runs as that user (its own groups, never root's), ``HOME`` its
  work folder ``WORK_DIR/job`` (the user's), ``SCHED_PROGRESS_FILE`` a file it owns in the
  root-owned ``WORK_DIR`` (mode 0711). The agent's own files (``job.log``, the instance's env
  file) stay root's, mode 0600 (the agent runs with umask 077; the command gets the umask
  the agent was started with). Everything the agent does in the job's folder (unpacking the
  code, restoring the checkpoint, every commit, on whatever thread) runs with the job user's
  filesystem identity (:func:`filesystem_identity`, per thread): what it restores is the
  user's without a chown pass, a symlink the command plants in its checkpoint folder (say to
  ``/proc/<agent pid>/environ`` or the env file) is read with the job's rights, not root's,
  and a staging folder it swaps for a symlink is never written through as root.
- **Otherwise** (not root, no such user, the work folder out of the user's reach, or a local
  checkpoint store, which the agent writes with its own rights) the command runs as the
  agent's own user, as before; :func:`choose` logs once at WARNING what is protected and
  what is not.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import pwd
import stat
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from core.models import CheckpointSpec
from scheduler.agent.sync import CheckpointSync
from scheduler.checkpoints import ObjectStore

logger = logging.getLogger(__name__)

DEFAULT_JOB_USER = "gpu-arbiter-job"
AGENT_UMASK = 0o077
WORK_DIR_MODE = 0o711  # the job user may pass through the agent's folder, not list it
_PR_GET_DUMPABLE, _PR_SET_DUMPABLE = 3, 4  # from <linux/prctl.h>
# Capability bits (from <linux/capability.h>) the agent needs to hand the job another user.
_CAP_CHOWN, _CAP_SETGID, _CAP_SETUID = 0, 6, 7
_NO_ID = 0xFFFFFFFF  # setfsuid(-1) changes nothing and returns the current fsuid


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def set_non_dumpable() -> bool:
    """Make this process non-dumpable (Linux ``prctl(PR_SET_DUMPABLE, 0)``): no core dumps;
    ``/proc/<pid>/environ``, ``mem`` and ``ptrace`` need ``CAP_SYS_PTRACE`` from then on, even
    for processes of the same uid. Children the agent starts are dumpable again after their
    ``exec``. Returns whether the process is now non-dumpable (``False`` off Linux)."""
    libc = _libc()
    if libc is None:
        return False
    if libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        logger.warning("prctl(PR_SET_DUMPABLE, 0) failed: %s", os.strerror(ctypes.get_errno()))
    return is_non_dumpable()


def is_non_dumpable() -> bool:
    """Whether this process is non-dumpable (``False`` off Linux)."""
    libc = _libc()
    return libc is not None and libc.prctl(_PR_GET_DUMPABLE, 0, 0, 0, 0) == 0


def restrict_umask() -> int:
    """Set the agent's umask to 077 (its files are its own); returns the one it had, which
    the command gets back (``JobProcess.start(umask=...)``)."""
    return os.umask(AGENT_UMASK)


@dataclass(frozen=True)
class JobUser:
    """The OS user the command runs as: ``name``, ``uid``, primary ``gid`` and ``groups``
    (its supplementary groups from the group database, e.g. ``video`` where GPU devices need
    it; never the agent's)."""

    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]

    @classmethod
    def lookup(cls, name: str) -> JobUser | None:
        """The user ``name`` from the password database, ``None`` if there is none."""
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            return None
        groups = tuple(g for g in os.getgrouplist(name, entry.pw_gid) if g != entry.pw_gid)
        return cls(name, entry.pw_uid, entry.pw_gid, groups)

    def can_search(self, path: Path) -> bool:
        """Whether this user may pass through folder ``path`` (its ``x`` bit for the user's
        class; ACLs are not read). A missing folder counts as passable."""
        try:
            st = path.stat()
        except FileNotFoundError:
            return True
        if st.st_uid == self.uid:
            return bool(st.st_mode & stat.S_IXUSR)
        if st.st_gid == self.gid or st.st_gid in self.groups:
            return bool(st.st_mode & stat.S_IXGRP)
        return bool(st.st_mode & stat.S_IXOTH)

    def create_file(self, path: Path) -> None:
        """Create an empty ``path`` (mode 0600) owned by this user, replacing a file there.
        Raises ``OSError``."""
        path.unlink(missing_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.fchown(fd, self.uid, self.gid)
        finally:
            os.close(fd)

    def environment(self, home: Path) -> dict[str, str]:
        """``HOME`` (= ``home``), ``USER`` and ``LOGNAME`` for the command's environment."""
        return {"HOME": str(home), "USER": self.name, "LOGNAME": self.name}


def can_switch_users() -> bool:
    """Whether this process may start a command as another user and hand it files: uid 0
    with ``CAP_SETUID``, ``CAP_SETGID`` and ``CAP_CHOWN`` effective (a container's root may
    lack them; read from ``/proc/self/status``, else uid 0 is trusted)."""
    if os.geteuid() != 0:
        return False
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                caps = int(line.split()[1], 16)
                return all(caps >> bit & 1 for bit in (_CAP_CHOWN, _CAP_SETGID, _CAP_SETUID))
    except (OSError, ValueError, IndexError):
        pass
    return True


@contextmanager
def filesystem_identity(user: JobUser) -> Iterator[None]:
    """Within the block, this thread's file accesses are checked as ``user``'s (Linux
    ``setfsuid``/``setfsgid``, which act on the calling thread only; the agent's other threads
    keep root's rights) and what it creates is ``user``'s. Supplementary groups stay the
    agent's. Raises ``OSError`` when the switch does not take (not root, not Linux)."""
    libc = _libc()
    if libc is None:
        raise OSError("a filesystem identity needs Linux")
    old_gid = libc.setfsgid(user.gid)
    old_uid = libc.setfsuid(user.uid)
    try:
        if libc.setfsuid(_NO_ID) != user.uid or libc.setfsgid(_NO_ID) != user.gid:
            raise OSError(f"cannot take the filesystem identity of {user.name}")
        yield
    finally:
        libc.setfsuid(old_uid)
        libc.setfsgid(old_gid)


class JobUserSync(CheckpointSync):
    """:class:`~scheduler.agent.sync.CheckpointSync` whose commits (periodic ones on its
    thread and the final one) read the job's checkpoint folder, and write their staging
    copies beside it, as ``user`` (:func:`filesystem_identity`). The store is reached over
    the network (S3), which the switch does not affect."""

    def __init__(self, store: ObjectStore, job_id: str, attempt: int, src_dir: Path,
                 checkpoint: CheckpointSpec, user: JobUser) -> None:
        super().__init__(store, job_id, attempt, src_dir, checkpoint)
        self.user = user

    def _commit(self, fingerprint, final):  # type: ignore[no-untyped-def]
        with filesystem_identity(self.user):
            return super()._commit(fingerprint, final)


@dataclass(frozen=True)
class Isolation:
    """How the command is kept from the agent's secrets on this host.

    ``user``: the job user it runs as, ``None`` when it runs as the agent's own user;
    ``non_dumpable``: whether the agent is non-dumpable; ``summary``: one sentence saying what
    is protected and what is not (logged by :func:`choose`).
    """

    user: JobUser | None
    non_dumpable: bool
    summary: str


def choose(name: str, work_dir: Path, *, local_store: bool, non_dumpable: bool,
           can_switch: bool | None = None) -> Isolation:
    """Decide who the command runs as (see the module docstring) and log it: INFO with a job
    user, WARNING (once per agent run) without one, naming what stays exposed.

    - **name**: ``GA_JOB_USER``. **work_dir**: ``GA_WORK_DIR`` (every folder above it must be
      passable for the user). **local_store**: the checkpoint store is a local folder.
    - **non_dumpable**: what :func:`set_non_dumpable` achieved.
    - **can_switch** (optional): override :func:`can_switch_users` (tests).
    """
    switch = can_switch_users() if can_switch is None else can_switch
    dump = ("the agent is non-dumpable (a process of its uid without CAP_SYS_PTRACE cannot "
            "read /proc/<agent pid>/environ or ptrace it)" if non_dumpable else
            "the agent is dumpable (not made otherwise, or not Linux): a process of its uid "
            "can read /proc/<agent pid>/environ")
    user = JobUser.lookup(name) if switch else None
    why = None
    if not switch:
        why = (f"the agent runs as uid {os.geteuid()} without the right to switch users, so "
               f"the job command runs as that same uid")
    elif user is None:
        why = (f"there is no user {name!r} on this host (GA_JOB_USER), so the job command "
               f"runs as root")
    elif user.uid == 0:
        why = f"GA_JOB_USER {name!r} is root itself, so the job command runs as root"
    elif local_store:
        why = (f"the checkpoint store is a local folder the agent writes with root's rights, "
               f"so the job command runs as root rather than as {name!r}")
    else:
        blocked = next((p for p in Path(work_dir).absolute().parents
                        if not user.can_search(p)), None)
        if blocked is not None:
            why = (f"user {name!r} cannot pass through {blocked} (no search permission) to "
                   f"reach the work folder, so the job command runs as root")
    if why is None and user is not None:
        summary = (f"job command runs as user {user.name} (uid {user.uid}); the agent's token "
                   f"and store credentials stay with root; {dump}")
        logger.info("job isolation: %s", summary)
        return Isolation(user, non_dumpable, summary)
    exposed = ("as root it can read every file and process on the host"
               if switch else "it can read any file that uid can read (such as an env file "
               "holding the agent's token) and signal the agent")
    summary = f"{why}: {dump}, but {exposed}"
    logger.warning("job isolation incomplete: %s", summary)
    return Isolation(None, non_dumpable, summary)
