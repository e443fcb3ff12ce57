"""A job for the job-isolation tests (standard library only: it runs under the system python
as the job user). It tries to get at its agent's secrets and writes what it got, then
checkpoints and reports progress like a real job.

Writes ``found.json`` in its working folder: its uid, gid, groups and umask; the agent's pid (found by walking
up its parents to ``python -m scheduler.agent``); for ``/proc/<agent>/environ``, every path
in ``PROBE_FILES`` (colon-separated) and ``/proc/<PROBE_CONTROL_PID>/environ`` either the
text read or the error; whether ``ptrace(PTRACE_ATTACH)`` on the agent worked; which
``GA_*`` and store-credential names its environment holds. ``PROBE_PLANT`` (colon-separated
paths): symlinks to them are planted in the checkpoint folder, as ``planted-<n>``.

Checkpoint: ``state.json`` = ``{"attempt": n}`` (n = 1 on a fresh start, else the restored
n + 1; the restored file must be writable). Progress: three ``steps`` points.
"""

import ctypes
import json
import os
import time
from pathlib import Path

STORE_NAMES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
               "AWS_DEFAULT_REGION", "AWS_REGION")
PTRACE_ATTACH, PTRACE_DETACH = 16, 17


def agent_pid() -> int | None:
    pid = os.getppid()
    while pid > 1:
        try:
            if b"scheduler.agent" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return pid
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return None
    return None


def attempt_read(path: str) -> dict:
    try:
        return {"read": Path(path).read_bytes().decode("utf-8", "replace")}
    except OSError as exc:
        return {"error": type(exc).__name__}


def attempt_ptrace(pid: int) -> bool:
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    if libc.ptrace(PTRACE_ATTACH, pid, None, None) == 0:
        time.sleep(0.1)
        libc.ptrace(PTRACE_DETACH, pid, None, None)
        return True
    return False


def main() -> None:
    ckpt = Path(os.environ["SCHED_CHECKPOINT_DIR"])
    agent = agent_pid()
    umask = os.umask(0)
    os.umask(umask)
    found = {
        "uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups(), "umask": umask,
        "home": os.environ.get("HOME"), "user": os.environ.get("USER"), "agent_pid": agent,
        "agent_environ": attempt_read(f"/proc/{agent}/environ") if agent else None,
        "agent_ptrace": attempt_ptrace(agent) if agent else None,
        "files": {p: attempt_read(p) for p in os.environ.get("PROBE_FILES", "").split(":") if p},
        "env_names": sorted(k for k in os.environ if k.startswith("GA_") or k in STORE_NAMES),
    }
    if os.environ.get("PROBE_CONTROL_PID"):
        found["control_environ"] = attempt_read(f"/proc/{os.environ['PROBE_CONTROL_PID']}/environ")
    for n, target in enumerate(p for p in os.environ.get("PROBE_PLANT", "").split(":") if p):
        (ckpt / f"planted-{n}").symlink_to(target)
    state = ckpt / "state.json"
    if os.environ.get("SCHED_RESUME") == "1":
        attempt = json.loads(state.read_text())["attempt"] + 1
        found["restored_owner"] = state.stat().st_uid
    else:
        attempt = 1
    state.write_text(json.dumps({"attempt": attempt}))  # in place: the restored file is ours
    found["attempt"] = attempt
    Path("found.json").write_text(json.dumps(found))
    with open(os.environ["SCHED_PROGRESS_FILE"], "a") as progress:
        for i in range(1, 4):
            progress.write(json.dumps({"steps": attempt * 100 + i, "t": time.time()}) + "\n")
            progress.flush()
            time.sleep(0.7)
    print(f"probe done, attempt {attempt}", flush=True)


main()
