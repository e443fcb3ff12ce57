"""Pure launch translation: a :class:`LaunchRequest` → ``run_instances`` arguments and the user
data (a cloud-init shell script) that installs and starts the node agent. No I/O.

The user data script, run once as root by cloud-init at first boot:

1. reads the instance id from IMDSv2 (token ``PUT``, then ``meta-data/instance-id``);
2. writes ``/var/lib/gpu-arbiter/agent.env`` (mode 0600): ``LaunchRequest.agent_env`` plus
   ``GA_INSTANCE_ID``, ``GA_METADATA_FLAVOR=aws``, ``GA_METADATA_URL=http://169.254.169.254``
   and ``GA_WORK_DIR``, as shell-quoted ``KEY='value'`` lines (embedded base64-encoded, so no
   value can break the script);
3. ``pip install``\\ s the agent (``agent_pip_spec``) into ``agent_venv`` or the system python;
4. starts ``python3 -m scheduler.agent`` with that environment under systemd
   (``gpu-arbiter-agent.service``, ``KillMode=mixed`` so only the agent gets SIGTERM at
   shutdown and forwards it to the job) or, without systemd, detached with ``nohup``.

Its own output goes to ``/var/lib/gpu-arbiter/bootstrap.log``. Note: EC2 user data is readable
from inside the instance (IMDS) and by principals allowed ``ec2:DescribeInstanceAttribute``;
the agent token it carries is scoped to one job attempt.
"""

from __future__ import annotations

import base64
import re
import shlex
from collections.abc import Iterable, Mapping
from typing import Any

from scheduler.models import Market, Offer

TAG_KEY_MAX, TAG_VALUE_MAX = 128, 256
USER_DATA_MAX_BYTES = 16384  # EC2's limit on user data before base64
IMDS_URL = "http://169.254.169.254"
AGENT_BASE_DIR = "/var/lib/gpu-arbiter"
SYSTEMD_UNIT = "gpu-arbiter-agent.service"
SUPERVISORS = ("auto", "systemd", "nohup")
# systemd gives the agent this long to checkpoint after SIGTERM at shutdown: inside AWS's
# 2-minute notice, leaving time for the instance to stop.
AGENT_STOP_TIMEOUT_S = 110
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SAFE_PATH_RE = re.compile(r"^/[A-Za-z0-9_./-]*$")


def tag_list(tags: Mapping[str, str]) -> list[dict[str, str]]:
    """``{key: value}`` → EC2 ``[{"Key", "Value"}]``. Raises ``ValueError`` naming the tag when a
    key is empty, longer than 128 characters or starts with ``aws:``, or a value is longer than
    256 characters (EC2's rules)."""
    out = []
    for key, value in tags.items():
        if not key or len(key) > TAG_KEY_MAX or key.lower().startswith("aws:"):
            raise ValueError(f"tag key {key!r}: must be 1-{TAG_KEY_MAX} characters, not 'aws:…'")
        if len(value) > TAG_VALUE_MAX:
            raise ValueError(f"tag {key!r}: value longer than {TAG_VALUE_MAX} characters")
        out.append({"Key": key, "Value": value})
    return out


def run_instances_params(*, offer: Offer, client_token: str, tags: Mapping[str, str],
                         user_data: str, ami: str, subnet_id: str | None = None,
                         security_group_ids: Iterable[str] = (), key_name: str | None = None,
                         iam_instance_profile: str | None = None) -> dict[str, Any]:
    """The ``ec2.run_instances`` keyword arguments launching one instance for ``offer``.

    - ``ClientToken`` = ``client_token``: EC2 returns the first instance for a repeated token.
    - Spot: ``InstanceMarketOptions`` ``one-time`` with ``terminate`` on interruption (no max
      price: the cap is the on-demand price). On-demand: no market options.
    - ``tags`` (plus ``Name``) on the instance and its volumes; IMDSv2 required (the agent
      reads notices with a session token); an OS shutdown terminates the instance.
    - Placement: ``SubnetId`` when the zone has a configured subnet, else
      ``Placement.AvailabilityZone`` (default VPC).

    ``user_data`` is plain text (boto3 base64-encodes it). Raises ``ValueError`` when a tag is
    invalid or the user data exceeds 16 KiB.
    """
    size = len(user_data.encode())
    if size > USER_DATA_MAX_BYTES:
        raise ValueError(f"user data is {size} bytes; EC2 allows {USER_DATA_MAX_BYTES} "
                         "(is the job spec's env very large?)")
    tag_spec = tag_list({"Name": f"gpu-arbiter {client_token}"[:TAG_VALUE_MAX], **tags})
    params: dict[str, Any] = {
        "ImageId": ami, "InstanceType": offer.instance_type, "MinCount": 1, "MaxCount": 1,
        "ClientToken": client_token, "UserData": user_data,
        "TagSpecifications": [{"ResourceType": "instance", "Tags": tag_spec},
                              {"ResourceType": "volume", "Tags": tag_spec}],
        "MetadataOptions": {"HttpTokens": "required", "HttpEndpoint": "enabled",
                            "HttpPutResponseHopLimit": 2},
        "InstanceInitiatedShutdownBehavior": "terminate",
    }
    if subnet_id:
        params["SubnetId"] = subnet_id
    else:
        params["Placement"] = {"AvailabilityZone": offer.zone}
    if security_group_ids:
        params["SecurityGroupIds"] = list(security_group_ids)
    if key_name:
        params["KeyName"] = key_name
    if iam_instance_profile:
        key = "Arn" if iam_instance_profile.startswith("arn:") else "Name"
        params["IamInstanceProfile"] = {key: iam_instance_profile}
    if offer.market is Market.SPOT:
        params["InstanceMarketOptions"] = {
            "MarketType": "spot",
            "SpotOptions": {"SpotInstanceType": "one-time",
                            "InstanceInterruptionBehavior": "terminate"},
        }
    return params


def env_file_text(env: Mapping[str, str]) -> str:
    """``KEY='value'`` lines (POSIX-shell quoted, sourced with ``set -a; . FILE``), one per
    variable, in the given order. Raises ``ValueError`` for a name that is not an identifier."""
    lines = []
    for name, value in env.items():
        if not _ENV_NAME_RE.match(name):
            raise ValueError(f"agent environment variable name {name!r} is not an identifier")
        lines.append(f"{name}={shlex.quote(value)}")
    return "\n".join(lines) + "\n"


def render_user_data(agent_env: Mapping[str, str], *, pip_spec: str, venv: str | None,
                     imds_url: str = IMDS_URL, base_dir: str = AGENT_BASE_DIR,
                     supervisor: str = "auto") -> str:
    """The cloud-init user data script (see the module docstring) for one agent.

    - **agent_env**: ``LaunchRequest.agent_env`` (secrets inside; this text must never be
      logged). ``GA_INSTANCE_ID`` is added on the instance from IMDS; ``GA_METADATA_FLAVOR``,
      ``GA_METADATA_URL`` (``imds_url``) and ``GA_WORK_DIR`` here.
    - **pip_spec** / **venv**: what to install and where (``venv`` None: system python3).
    - **imds_url**, **base_dir**, **supervisor** (``auto`` | ``systemd`` | ``nohup``): the
      defaults are what EC2 needs; tests run the script against a local IMDS in a temp dir.

    Raises ``ValueError`` for a bad variable name, a path outside ``[A-Za-z0-9_./-]`` or an
    unknown supervisor.
    """
    if supervisor not in SUPERVISORS:
        raise ValueError(f"supervisor {supervisor!r}; allowed: {', '.join(SUPERVISORS)}")
    for label, path in (("base_dir", base_dir), ("venv", venv or "/")):
        if not _SAFE_PATH_RE.match(path):
            raise ValueError(f"{label} {path!r}: only absolute paths of [A-Za-z0-9_./-]")
    env = {k: v for k, v in agent_env.items() if k != "GA_INSTANCE_ID"}
    env.update(GA_METADATA_FLAVOR="aws", GA_METADATA_URL=imds_url,
               GA_WORK_DIR=f"{base_dir}/work")
    encoded = base64.b64encode(env_file_text(env).encode()).decode()
    wrapped = "\n".join(encoded[i:i + 76] for i in range(0, len(encoded), 76))
    return _SCRIPT.format(
        base_dir=base_dir, imds=shlex.quote(imds_url), pip_spec=shlex.quote(pip_spec),
        venv=venv or "", supervisor=supervisor, env_b64=wrapped, unit=SYSTEMD_UNIT,
        stop_timeout=AGENT_STOP_TIMEOUT_S,
    )


_SCRIPT = """\
#!/bin/bash
# gpu-arbiter: install and start the node agent (EC2 user data, run once by cloud-init as root)
set -euo pipefail
umask 077
GA_DIR={base_dir}
IMDS={imds}
PIP_SPEC={pip_spec}
VENV='{venv}'
SUPERVISOR={supervisor}
mkdir -p "$GA_DIR/work"
chmod 700 "$GA_DIR"
exec >>"$GA_DIR/bootstrap.log" 2>&1
echo "gpu-arbiter bootstrap $(date -u +%FT%TZ)"

# 1. this instance's id, from IMDSv2
TOKEN=$(curl -sSf --retry 10 --retry-connrefused -X PUT "$IMDS/latest/api/token" \\
  -H 'X-aws-ec2-metadata-token-ttl-seconds: 300')
INSTANCE_ID=$(curl -sSf --retry 10 --retry-connrefused -H "X-aws-ec2-metadata-token: $TOKEN" \\
  "$IMDS/latest/meta-data/instance-id")
[[ "$INSTANCE_ID" =~ ^i-[0-9a-zA-Z]+$ ]] || {{ echo "bad instance id from IMDS"; exit 1; }}

# 2. the agent's environment, readable by root only
ENV_FILE="$GA_DIR/agent.env"
install -m 600 /dev/null "$ENV_FILE"
base64 -d >>"$ENV_FILE" <<'GA_AGENT_ENV'
{env_b64}
GA_AGENT_ENV
echo "GA_INSTANCE_ID='$INSTANCE_ID'" >>"$ENV_FILE"

# 3. the agent itself
if [ -n "$VENV" ]; then
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
  PY="$VENV/bin/python"
else
  PY=python3
fi
"$PY" -m pip install --quiet --disable-pip-version-check "$PIP_SPEC" \\
  || "$PY" -m pip install --quiet --disable-pip-version-check --break-system-packages "$PIP_SPEC"

# 4. start it: systemd when it runs, else detached with nohup
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
