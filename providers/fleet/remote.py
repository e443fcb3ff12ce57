"""The shell run on a fleet host, and the parse of what it prints. No I/O here.

Layout on a host, under its work root (created mode 0700)::

    allocations.log          one line per slot start/end: time, event, instance, GPUs, detail
    <client_token>/          one instance: mode 0700
        meta.json            instance id, client token, tags, offer series, GPUs, launched_at
        agent.env            the agent's environment (0600, written over SFTP; removed at end)
        agent.pid            "<pid> <start time>" of the agent, leader of its process group
        agent.log            the agent's output
        gpus                 the GPUs the agent was started with (CUDA_VISIBLE_DEVICES)
        noticed              its host was drained and the agent got its SIGTERM (once)
        ended                written once its process group is gone (its text: why)
        work/                GA_WORK_DIR: the job and its checkpoint directory

An instance is **running** while the process ``agent.pid`` names is alive with the start time
recorded there (``/proc/<pid>/stat`` field 22: a reused pid has another) and not a zombie,
**stray** while its leader is gone but a process of its session is not (the agent leads its
own session; its job runs in another process group of it), **exited** once both are
gone without an ``ended`` file, **starting** before ``agent.pid`` exists. Every step that changes an
instance's state takes ``flock`` on ``<client_token>/.lock``, so a start and an abandon
(or a terminate) of one instance never interleave.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field

from providers.fleet.gpus import HostGpu, parse_gpus

GPU_QUERY = ("nvidia-smi --query-gpu=index,uuid,name,memory.total,memory.used,utilization.gpu "
             "--format=csv,noheader,nounits")
APPS_QUERY = "nvidia-smi --query-compute-apps=gpu_uuid,pid,used_memory --format=csv,noheader"
ENDED_KEPT_S = 24 * 3600  # an ended instance's folder is kept this long for describe

# Appends one allocation-log line: $1 event, $2 instance id, $3 GPUs, $4 detail.
_LOG_FN = r"""
alloc_log() {
  printf '%s\t%s\t%s\tgpus=%s\t%s\n' "$(date -u +%Y-%m-%dT%H:%M:%S.%NZ)" "$1" "$2" "$3" "$4" \
    >> "$ROOT/allocations.log"
}
"""

# Sets STATE (running|stray|exited|starting|ended) and PID for the instance folder $D.
# The agent is the leader of its own session (setsid): its job runs in a process group of
# its own inside that session, so "the instance's processes" are the session's.
_STATE_FN = r"""
session_scan() {  # $1: "alive" (status 0 when the session $PID has a live process) or a signal
  for f in /proc/[0-9]*/stat; do
    read -r line 2>/dev/null < "$f" || continue
    set -- "$1" ${line##*) }
    # After "(comm) ": state, ppid, pgrp, session. Zombies are dead (PID 1 may not reap).
    if [ "${5:-}" = "$PID" ] && [ "$2" != Z ]; then
      [ "$1" = alive ] && return 0
      p=${f#/proc/}; kill "-$1" "${p%/stat}" 2>/dev/null
    fi
  done
  return 1
}

inst_state() {
  PID=""; START=""
  if [ -f "$D/ended" ]; then STATE=ended; return; fi
  if [ ! -f "$D/agent.pid" ]; then STATE=starting; return; fi
  read -r PID START < "$D/agent.pid" || true
  # Fields after "(comm) ": 1 the process state (Z: a zombie is dead), 20 its start time.
  NOW=$(sed 's/.*) //' "/proc/$PID/stat" 2>/dev/null | cut -d' ' -f1,20)
  if [ -n "$PID" ] && [ "$NOW" != "Z $START" ] && [ "${NOW#* }" = "$START" ]; then
    STATE=running
  elif [ -n "$PID" ] && session_scan alive; then STATE=stray
  else STATE=exited; fi
}
"""


# A work root under ~/ is the SSH user's home.
_HOME_ROOT = r"""
case "${ROOT:-}" in "~/"*) ROOT="$HOME/${ROOT#"~/"}" ;; esac
"""


def _script(body: str, **values: str) -> str:
    assigns = "".join(f"{name}={shlex.quote(value)}\n" for name, value in values.items())
    return "sh -c " + shlex.quote("set -u\n" + assigns + _HOME_ROOT + _LOG_FN + _STATE_FN + body)


def sftp_path(path: str) -> str:
    """``path`` as SFTP takes it: one under ``~/`` relative to the home SFTP starts in."""
    return path.removeprefix("~/")


def inventory(work_root: str) -> str:
    """Prints the host's vCPUs, memory, GPUs, compute processes and every instance folder
    (:func:`parse_inventory` reads it); removes folders ended over :data:`ENDED_KEPT_S` ago."""
    return _script(rf"""
echo @vcpus; nproc
echo @mem_kib; awk '/^MemTotal:/ {{print $2}}' /proc/meminfo
echo @gpus
if command -v nvidia-smi >/dev/null 2>&1; then
  {GPU_QUERY} || echo @nvidia-smi-failed
  echo @apps; {APPS_QUERY} || true
else
  echo @no-nvidia-smi; echo @apps
fi
echo @instances
now=$(date +%s)
for D in "$ROOT"/*/; do
  [ -d "$D" ] || continue
  D=${{D%/}}
  [ -f "$D/meta.json" ] || continue
  inst_state
  ended_at=""
  if [ "$STATE" = ended ]; then
    ended_at=$(stat -c %Y "$D/ended")
    if [ $((now - ended_at)) -gt {ENDED_KEPT_S} ]; then rm -rf -- "$D"; continue; fi
  fi
  why=""
  [ "$STATE" = ended ] && why=$(head -c 200 "$D/ended" | tr -d '\n\t')
  noticed=""
  [ -f "$D/noticed" ] && noticed=1
  printf '%s\t%s\t%s\t%s\t%s\t' "$STATE" "$PID" "$ended_at" "$why" "$noticed"
  tr -d '\n' < "$D/meta.json"; echo
done
echo @end
""", ROOT=work_root)


def prepare(work_root: str, token: str) -> str:
    """Creates the work root and the instance folder (mode 0700). Exit 4 when the instance
    has ended already (terminated or abandoned: a late launch must not revive it)."""
    return _script(r"""
umask 077
mkdir -p "$ROOT" "$ROOT/$T/work"
if [ -f "$ROOT/$T/ended" ]; then echo "instance ended: $(cat "$ROOT/$T/ended")" >&2; exit 4; fi
""", ROOT=work_root, T=token)


def install_agent(pip_spec: str, venv: str) -> str:
    """Installs ``pip_spec`` into ``venv`` unless its python imports the agent already."""
    return _script(r"""
if "$VENV/bin/python3" -c 'import scheduler.agent' >/dev/null 2>&1; then exit 0; fi
python3 -m venv "$VENV" && "$VENV/bin/pip" install -q "$SPEC"
""", VENV=venv, SPEC=pip_spec)


def start(work_root: str, token: str, instance_id: str, python: str, gpus: list[int]) -> str:
    """Starts the agent detached in its own session and process group (``setsid``), its
    environment read from ``agent.env``, ``CUDA_VISIBLE_DEVICES`` the slot's GPUs; records
    ``agent.pid`` and a ``start`` log line. Prints ``<pid>``; a running agent is left as it
    is (its pid printed). Exit 4 when the instance has ended."""
    return _script(r"""
D="$ROOT/$T"
exec 9>"$D/.lock"; flock 9
inst_state
case "$STATE" in
  running|stray) echo "$PID"; exit 0 ;;
  ended) echo "instance ended: $(cat "$D/ended")" >&2; exit 4 ;;
  exited) echo "agent exited before" >&2; exit 5 ;;
esac
cd "$D/work"
set -a; . "$D/agent.env"; set +a
export CUDA_VISIBLE_DEVICES="$GPUS" GA_WORK_DIR="$D/work"
setsid "$PY" -m scheduler.agent </dev/null >>"$D/agent.log" 2>&1 9>&- &
PID=$!
START=$(sed 's/.*) //' "/proc/$PID/stat" | cut -d' ' -f20)
echo "$GPUS" > "$D/gpus"
echo "$PID $START" > "$D/agent.pid.tmp" && mv "$D/agent.pid.tmp" "$D/agent.pid"
alloc_log start "$ID" "$GPUS" "pid=$PID"
echo "$PID"
""", ROOT=work_root, T=token, ID=instance_id, PY=python, GPUS=",".join(map(str, gpus)))


def stop(work_root: str, token: str, instance_id: str, grace_s: float, reason: str,
         only_state: str = "") -> str:
    """Ends an instance: SIGTERM to the agent's process group, SIGKILL to every process of
    its session still there after ``grace_s``, then (all gone) ``ended`` with ``reason``, an ``end`` log line and ``agent.env`` removed.
    Nothing else of its folder is removed (its checkpoint directory stays). Prints the
    state it found. Harmless on an ended or unknown instance. With ``only_state`` it acts
    only on an instance in that state and exits 3 otherwise (a launch abandoned as
    ``starting`` may have started meanwhile)."""
    return _script(r"""
D="$ROOT/$T"
[ -d "$D" ] || { echo absent; exit 0; }
exec 9>"$D/.lock"; flock 9
inst_state
echo "$STATE"
[ "$STATE" = ended ] && exit 0
[ -n "$ONLY" ] && [ "$STATE" != "$ONLY" ] && exit 3
if [ -n "$PID" ]; then
  # SIGTERM to the agent's group, as a cloud's shutdown: the agent stops and commits its job.
  kill -TERM "-$PID" 2>/dev/null || true
  waited=0
  while session_scan alive && [ "$waited" -lt "$GRACE_TICKS" ]; do
    sleep 0.2; waited=$((waited + 1))
  done
  while session_scan alive; do session_scan KILL; sleep 0.1; done
fi
rm -f "$D/agent.env"
echo "$WHY" > "$D/ended"
# Only a started agent logged a start (and wrote the GPUs it was given).
[ -f "$D/gpus" ] && alloc_log end "$ID" "$(cat "$D/gpus")" "$WHY"
exit 0
""", ROOT=work_root, T=token, ID=instance_id, ONLY=only_state,
        GRACE_TICKS=str(max(0, int(grace_s * 5))), WHY=reason.replace("\n", " "))


def notify(work_root: str, token: str) -> str:
    """A drained host's running agent gets SIGTERM, once (``noticed``): as at a cloud's
    shutdown, it stops its job, commits its checkpoint and reports ``checkpointed``."""
    return _script(r"""
D="$ROOT/$T"
[ -d "$D" ] || exit 0
exec 9>"$D/.lock"; flock 9
inst_state
[ "$STATE" = running ] && [ ! -f "$D/noticed" ] || exit 0
date -u +%Y-%m-%dT%H:%M:%SZ > "$D/noticed"
kill -TERM "$PID" 2>/dev/null || true
""", ROOT=work_root, T=token)


@dataclass(frozen=True)
class HostInstance:
    """One instance folder on a host: ``state`` (module docstring), ``pid``, when it ended
    (epoch seconds) and why (the ``ended`` file), whether it got a drain's SIGTERM, its
    ``meta.json``."""

    state: str
    pid: int | None
    ended_at: float | None
    why_ended: str | None
    noticed: bool
    meta: dict

    @property
    def gpus(self) -> list[int]:
        return [int(i) for i in self.meta.get("gpus", [])]


@dataclass
class Inventory:
    """What :func:`inventory` printed: ``gpus`` is ``None`` when the host has no
    ``nvidia-smi`` (the configured GPUs apply) or when it failed or printed something
    that is not its CSV (``gpu_error`` says what: the host offers nothing then, while its
    instance folders are still read)."""

    vcpus: int
    memory_gib: float
    gpus: list[HostGpu] | None
    instances: dict[str, HostInstance] = field(default_factory=dict)  # by instance id
    gpu_error: str | None = None

    def held_gpus(self) -> set[int]:
        """GPUs held by instances whose processes may still run."""
        return {i for inst in self.instances.values()
                if inst.state in ("running", "stray", "starting") for i in inst.gpus}


def parse_inventory(text: str, ours: set[int]) -> Inventory:
    """Reads :func:`inventory`'s output; ``ours``: GPU indices held by our instances (from
    the ledger), never counted as busy with a foreign process. Raises ``ValueError`` on
    output that is not the script's (no ``@end``: cut short)."""
    sections: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if line in ("@vcpus", "@mem_kib", "@gpus", "@apps", "@instances", "@end"):
            current = line[1:]
            sections[current] = []
        elif current is not None:
            sections[current].append(line)
    if "end" not in sections:
        raise ValueError("host inventory cut short (no @end)")
    instances = {}
    for line in sections["instances"]:
        state, pid, ended_at, why, noticed, raw = (line.split("\t", 5) + [""] * 5)[:6]
        try:
            meta = json.loads(raw)
        except ValueError:
            continue  # a meta.json half-written by hand; ours are replaced atomically
        if isinstance(meta, dict) and isinstance(meta.get("instance_id"), str):
            instances[meta["instance_id"]] = HostInstance(
                state, int(pid) if pid.isdigit() else None,
                float(ended_at) if ended_at else None, why or None, noticed == "1", meta)
    gpu_lines = sections.get("gpus", [])
    gpus, gpu_error = None, None
    if "@nvidia-smi-failed" in gpu_lines:
        gpu_error = "nvidia-smi failed"
    elif "@no-nvidia-smi" not in gpu_lines:
        held = ours | {i for inst in instances.values() for i in inst.gpus
                       if inst.state in ("running", "stray", "starting")}
        try:
            gpus = parse_gpus("\n".join(gpu_lines), "\n".join(sections.get("apps", [])), held)
        except ValueError as exc:
            # A GPU fallen off the bus prints an error among the CSV: the GPUs are in
            # doubt, the host and its agents are not.
            gpu_error = str(exc)
    vcpus = next((int(v) for v in sections.get("vcpus", []) if v.strip().isdigit()), 1)
    mem_kib = next((int(v) for v in sections.get("mem_kib", []) if v.strip().isdigit()), 0)
    return Inventory(vcpus, round(mem_kib / 1024 / 1024, 1), gpus, instances, gpu_error)
