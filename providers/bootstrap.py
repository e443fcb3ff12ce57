"""The cloud-init user data that installs and starts the node agent on a fresh VM. No I/O.

One script for every cloud; only how the instance learns its own id differs (IMDSv2 on EC2,
the plain metadata service on ECS), so each provider passes that step as shell text. The
script, run once as root at first boot:

1. reads the instance id (the provider's ``instance_id_step``, which sets ``INSTANCE_ID``);
2. writes ``{base_dir}/agent.env`` (mode 0600): the agent's environment plus
   ``GA_INSTANCE_ID``, ``GA_METADATA_FLAVOR``, ``GA_METADATA_URL``, ``GA_WORK_DIR`` and
   ``GA_JOB_USER``, as shell-quoted ``KEY='value'`` lines embedded base64-encoded, so no value
   can break the script;
3. creates the job user (:data:`JOB_USER_STEP`, idempotent: ``useradd --system``, no home, no
   login shell), whom the agent (root) runs the job's command as, so the command cannot read
   the agent's token, the store's credentials or ``agent.env``
   (:mod:`scheduler.agent.job_user`); where ``iptables`` exists, that user is also refused
   the instance-metadata address, which serves this very user data (token included);
4. ``pip install``\\ s the agent (``pip_spec``) into ``venv`` or the system python (readable
   for all: code, not secrets);
5. starts ``python3 -m scheduler.agent`` under systemd (``KillMode=mixed``: at shutdown only
   the agent gets SIGTERM and forwards it to the job) or, without systemd, detached with nohup.

Its own output goes to ``{base_dir}/bootstrap.log``; ``{base_dir}`` is mode 0711 (the job
user passes through to ``work/``, lists nothing) and every file the script writes there is
0600. User data is readable from inside the instance (for root; see step 3); the agent token
it carries is scoped to one job attempt.
"""

from __future__ import annotations

import base64
import re
import shlex
from collections.abc import Mapping
from urllib.parse import urlsplit

AGENT_BASE_DIR = "/var/lib/gpu-arbiter"
JOB_USER = "gpu-arbiter-job"  # = scheduler.agent.job_user.DEFAULT_JOB_USER (no import: no I/O here)
SYSTEMD_UNIT = "gpu-arbiter-agent.service"
SUPERVISORS = ("auto", "systemd", "nohup")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
_SAFE_PATH_RE = re.compile(r"^/[A-Za-z0-9_./-]*\Z")
_USER_NAME_RE = re.compile(r"^[a-z_][a-z0-9_-]{0,31}\Z")
_HOST_RE = re.compile(r"^[A-Za-z0-9.:-]+\Z")

# Creates the user $JOB_USER if there is none (idempotent) and, where iptables exists, refuses
# that user the instance-metadata host $META_HOST (empty: none). Never fails the boot: without
# the user the agent runs the job as root and says so in its log.
JOB_USER_STEP = r"""
if id -u "$JOB_USER" >/dev/null 2>&1; then
  echo "job user $JOB_USER exists"
elif command -v useradd >/dev/null 2>&1; then
  useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin \
    --user-group "$JOB_USER" || echo "could not create the job user $JOB_USER"
elif command -v adduser >/dev/null 2>&1; then
  adduser -S -D -H "$JOB_USER" || echo "could not create the job user $JOB_USER"
else
  echo "no useradd here: the job will run as root"
fi
if [ -n "$META_HOST" ] && id -u "$JOB_USER" >/dev/null 2>&1; then
  if command -v iptables >/dev/null 2>&1; then
    iptables -C OUTPUT -d "$META_HOST" -m owner --uid-owner "$JOB_USER" -j REJECT 2>/dev/null \
      || iptables -I OUTPUT -d "$META_HOST" -m owner --uid-owner "$JOB_USER" -j REJECT \
      || echo "could not refuse $JOB_USER the metadata host $META_HOST"
  else
    echo "no iptables: the job user can read the instance metadata, user data included"
  fi
fi
"""


def env_file_text(env: Mapping[str, str]) -> str:
    """``KEY='value'`` lines (POSIX-shell quoted, sourced with ``set -a; . FILE``), one per
    variable, in the given order. Raises ``ValueError`` for a name that is not an identifier."""
    lines = []
    for name, value in env.items():
        if not _ENV_NAME_RE.match(name):
            raise ValueError(f"agent environment variable name {name!r} is not an identifier")
        lines.append(f"{name}={shlex.quote(value)}")
    return "\n".join(lines) + "\n"


def render_user_data(agent_env: Mapping[str, str], *, cloud: str, flavor: str,
                     metadata_url: str, instance_id_step: str, pip_spec: str,
                     venv: str | None, base_dir: str = AGENT_BASE_DIR,
                     supervisor: str = "auto", stop_timeout_s: int,
                     job_user: str = JOB_USER) -> str:
    """The user data script (see the module docstring) for one agent.

    - **agent_env**: ``LaunchRequest.agent_env`` (secrets inside; this text must never be
      logged). ``GA_INSTANCE_ID`` is dropped here and set on the instance from metadata.
    - **cloud**: the name in the script's header comment (``EC2``, ``ECS``).
    - **flavor** / **metadata_url**: ``GA_METADATA_FLAVOR`` / ``GA_METADATA_URL`` for the
      agent's notice watcher; the script reads ``$METADATA`` (= ``metadata_url``).
    - **instance_id_step**: shell lines that set and validate ``INSTANCE_ID``.
    - **pip_spec** / **venv**: what to install and where (``venv`` None: system python3).
    - **supervisor**: ``auto`` | ``systemd`` | ``nohup``. **stop_timeout_s**: how long systemd
      lets the agent checkpoint after SIGTERM at shutdown (inside the cloud's notice).
    - **job_user**: the user created for the job's command (``GA_JOB_USER``); default
      :data:`JOB_USER`.

    Raises ``ValueError`` for a bad variable name, a path outside ``[A-Za-z0-9_./-]``, an
    unknown supervisor, a job user name that is not a portable user name, or a metadata URL
    whose host is not a plain name or address.
    """
    if supervisor not in SUPERVISORS:
        raise ValueError(f"supervisor {supervisor!r}; allowed: {', '.join(SUPERVISORS)}")
    for label, path in (("base_dir", base_dir), ("venv", venv or "/")):
        if not _SAFE_PATH_RE.match(path):
            raise ValueError(f"{label} {path!r}: only absolute paths of [A-Za-z0-9_./-]")
    if not _USER_NAME_RE.match(job_user):
        raise ValueError(f"job_user {job_user!r}: a user name of [a-z0-9_-], at most 32")
    meta_host = (urlsplit(metadata_url).hostname or "") if metadata_url else ""
    if meta_host and not _HOST_RE.match(meta_host):
        raise ValueError(f"metadata_url {metadata_url!r}: its host is not a name or address")
    env = {k: v for k, v in agent_env.items() if k != "GA_INSTANCE_ID"}
    env.update(GA_METADATA_FLAVOR=flavor, GA_METADATA_URL=metadata_url,
               GA_WORK_DIR=f"{base_dir}/work", GA_JOB_USER=job_user)
    encoded = base64.b64encode(env_file_text(env).encode()).decode()
    wrapped = "\n".join(encoded[i:i + 76] for i in range(0, len(encoded), 76))
    # The step is inserted after format(): its braces are shell, not placeholders.
    return _SCRIPT.format(
        cloud=cloud, base_dir=base_dir, metadata=shlex.quote(metadata_url),
        pip_spec=shlex.quote(pip_spec), venv=venv or "", supervisor=supervisor,
        env_b64=wrapped, unit=SYSTEMD_UNIT, stop_timeout=stop_timeout_s,
        job_user=job_user, meta_host=shlex.quote(meta_host),
    ).replace("@INSTANCE_ID_STEP@", instance_id_step.strip("\n")).replace(
        "@JOB_USER_STEP@", JOB_USER_STEP.strip("\n"))


_SCRIPT = """\
#!/bin/bash
# gpu-arbiter: install and start the node agent ({cloud} user data, run once by cloud-init as root)
set -euo pipefail
umask 077
GA_DIR={base_dir}
METADATA={metadata}
PIP_SPEC={pip_spec}
VENV='{venv}'
SUPERVISOR={supervisor}
JOB_USER={job_user}
META_HOST={meta_host}
mkdir -p "$GA_DIR/work"
chmod 711 "$GA_DIR"
exec >>"$GA_DIR/bootstrap.log" 2>&1
echo "gpu-arbiter bootstrap $(date -u +%FT%TZ)"

# 1. this instance's id, from instance metadata
@INSTANCE_ID_STEP@

# 2. the agent's environment, readable by root only
ENV_FILE="$GA_DIR/agent.env"
install -m 600 /dev/null "$ENV_FILE"
base64 -d >>"$ENV_FILE" <<'GA_AGENT_ENV'
{env_b64}
GA_AGENT_ENV
echo "GA_INSTANCE_ID='$INSTANCE_ID'" >>"$ENV_FILE"

# 3. the user the job's command runs as, apart from the agent's secrets
@JOB_USER_STEP@

# 4. the agent itself (code, not secrets: readable for the job user too)
umask 022
if [ -n "$VENV" ]; then
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
  PY="$VENV/bin/python"
else
  PY=python3
fi
"$PY" -m pip install --quiet --disable-pip-version-check "$PIP_SPEC" \\
  || "$PY" -m pip install --quiet --disable-pip-version-check --break-system-packages "$PIP_SPEC"
umask 077

# 5. start it: systemd when it runs, else detached with nohup
RUN="set -a; . $ENV_FILE; set +a; cd $GA_DIR/work; exec $PY -m scheduler.agent"
if [ "$SUPERVISOR" = systemd ] || {{ [ "$SUPERVISOR" = auto ] && [ -d /run/systemd/system ]; }}; then
  cat >/etc/systemd/system/{unit} <<GA_UNIT
[Unit]
Description=gpu-arbiter node agent
Wants=network-online.target
After=network-online.target

[Service]
Type=simple
ExecStart=/bin/sh -c '$RUN'
KillMode=mixed
TimeoutStopSec={stop_timeout}
Restart=no
StandardOutput=append:$GA_DIR/agent.log
StandardError=append:$GA_DIR/agent.log

[Install]
WantedBy=multi-user.target
GA_UNIT
  systemctl daemon-reload
  systemctl start --no-block {unit}
else
  setsid nohup /bin/sh -c "$RUN" >>"$GA_DIR/agent.log" 2>&1 </dev/null &
fi
echo "agent started for instance $INSTANCE_ID"
"""
