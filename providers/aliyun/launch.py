"""Pure launch translation: a :class:`LaunchRequest` → ``RunInstances`` parameters and the user
data (a cloud-init shell script) that installs and starts the node agent. No I/O.

The user data script, run once as root by cloud-init at first boot:

1. reads the instance id from ECS instance metadata (``GET
   http://100.100.100.200/latest/meta-data/instance-id``, InstanceMetadataItems.md);
2. writes ``/var/lib/gpu-arbiter/agent.env`` (mode 0600): ``LaunchRequest.agent_env`` plus
   ``GA_INSTANCE_ID``, ``GA_METADATA_FLAVOR=aliyun``,
   ``GA_METADATA_URL=http://100.100.100.200`` and ``GA_WORK_DIR``, as shell-quoted
   ``KEY='value'`` lines (embedded base64-encoded, so no value can break the script);
3. ``pip install``\\ s the agent (``agent_pip_spec``) into ``agent_venv`` or the system python;
4. starts ``python3 -m scheduler.agent`` under systemd (``KillMode=mixed``: at shutdown only
   the agent gets SIGTERM and forwards it to the job) or, without systemd, detached with nohup.

The agent then watches ``instance/spot/termination-time`` (``AliyunNotices``). ECS user data is
readable from inside the instance and by principals allowed ``ecs:DescribeUserData``; the agent
token it carries is scoped to one job attempt.
"""

from __future__ import annotations

import base64
import re
import shlex
from collections.abc import Mapping
from typing import Any

from scheduler.models import Market, Offer

# Tag rules of ECS: keys 1-128 characters, values up to 128, neither starting with "aliyun" or
# "acs:", no "http://" or "https://"; at most 20 tags per instance.
TAG_KEY_MAX, TAG_VALUE_MAX, TAGS_MAX = 128, 128, 20
# RunInstances takes the user data Base64-encoded, at most 32 KB once encoded.
USER_DATA_MAX_BYTES = 32768
# ClientToken: at most 64 ASCII characters (RunInstances).
CLIENT_TOKEN_MAX = 64
# The tag that records the client token on the instance (DescribeInstances returns no token).
CLIENT_TOKEN_TAG = "gpu-arbiter:client-token"
METADATA_URL = "http://100.100.100.200"
AGENT_BASE_DIR = "/var/lib/gpu-arbiter"
SYSTEMD_UNIT = "gpu-arbiter-agent.service"
SUPERVISORS = ("auto", "systemd", "nohup")
# systemd gives the agent this long to checkpoint after SIGTERM at shutdown: inside the ~5 min
# between ECS's Recycling notice and the release.
AGENT_STOP_TIMEOUT_S = 240
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SAFE_PATH_RE = re.compile(r"^/[A-Za-z0-9_./-]*$")
_RESERVED_TAG_PREFIXES = ("aliyun", "acs:")


def tag_params(tags: Mapping[str, str]) -> dict[str, str]:
    """``{key: value}`` → ``Tag.N.Key``/``Tag.N.Value`` parameters. Raises ``ValueError``
    naming the tag when it breaks ECS's rules (see :data:`TAG_KEY_MAX` and the comment above)."""
    if len(tags) > TAGS_MAX:
        raise ValueError(f"{len(tags)} tags; ECS allows {TAGS_MAX}")
    params: dict[str, str] = {}
    for i, (key, value) in enumerate(tags.items(), start=1):
        lowered = key.lower()
        if (not key or len(key) > TAG_KEY_MAX or lowered.startswith(_RESERVED_TAG_PREFIXES)
                or "http://" in lowered or "https://" in lowered):
            raise ValueError(f"tag key {key!r}: 1-{TAG_KEY_MAX} characters, not 'aliyun…'/'acs:…'"
                             ", no URLs")
        if len(value) > TAG_VALUE_MAX or value.lower().startswith(_RESERVED_TAG_PREFIXES):
            raise ValueError(f"tag {key!r}: value longer than {TAG_VALUE_MAX} characters or "
                             "starting with 'aliyun'/'acs:'")
        params[f"Tag.{i}.Key"], params[f"Tag.{i}.Value"] = key, value
    return params


def run_instances_params(*, offer: Offer, client_token: str, tags: Mapping[str, str],
                         user_data: str, image_id: str, vswitch_id: str, security_group_id: str,
                         spot_strategy: str = "SpotAsPriceGo",
                         spot_price_limit: float | None = None, spot_duration_h: int = 1,
                         system_disk_category: str = "cloud_essd", system_disk_size_gib: int = 100,
                         internet_max_bandwidth_out_mbps: int = 0,
                         key_pair_name: str | None = None,
                         ram_role_name: str | None = None) -> dict[str, Any]:
    """The ``RunInstances`` parameters launching one pay-as-you-go instance for ``offer``.

    - ``ClientToken`` = ``client_token`` (ECS returns the first instance for a repeated token),
      also recorded in the :data:`CLIENT_TOKEN_TAG` tag with ``tags``.
    - Spot: ``SpotStrategy`` ``SpotAsPriceGo``, or ``SpotWithPriceLimit`` with
      ``SpotPriceLimit`` (per hour, in the account's currency), ``SpotDuration`` hours of
      protection, ``SpotInterruptionBehavior=Terminate``. On-demand: ``NoSpot``.
    - ``UserData``: ``user_data`` Base64-encoded; ``VSwitchId`` (fixes the zone) and ``ZoneId``.

    Raises ``ValueError`` for an invalid tag, a client token longer than 64 characters or not
    ASCII, user data over 32 KB encoded, or ``SpotWithPriceLimit`` without a positive limit.
    """
    if not client_token or len(client_token) > CLIENT_TOKEN_MAX or not client_token.isascii():
        raise ValueError(f"client token must be 1-{CLIENT_TOKEN_MAX} ASCII characters")
    encoded = base64.b64encode(user_data.encode()).decode()
    if len(encoded) > USER_DATA_MAX_BYTES:
        raise ValueError(f"user data is {len(encoded)} bytes Base64-encoded; ECS allows "
                         f"{USER_DATA_MAX_BYTES} (is the job spec's env very large?)")
    params: dict[str, Any] = {
        "InstanceType": offer.instance_type, "ZoneId": offer.zone, "ImageId": image_id,
        "VSwitchId": vswitch_id, "SecurityGroupId": security_group_id,
        "InstanceChargeType": "PostPaid", "Amount": 1, "MinAmount": 1,
        "ClientToken": client_token, "UserData": encoded,
        "InstanceName": f"gpu-arbiter-{client_token}"[:128],
        "SystemDisk.Category": system_disk_category, "SystemDisk.Size": system_disk_size_gib,
        "InternetMaxBandwidthOut": internet_max_bandwidth_out_mbps,
        "InternetChargeType": "PayByTraffic",
        **tag_params({**tags, CLIENT_TOKEN_TAG: client_token}),
    }
    if offer.market is Market.SPOT:
        params.update(SpotStrategy=spot_strategy, SpotDuration=spot_duration_h,
                      SpotInterruptionBehavior="Terminate")
        if spot_strategy == "SpotWithPriceLimit":
            if spot_price_limit is None or not spot_price_limit > 0:
                raise ValueError("SpotWithPriceLimit needs a positive SpotPriceLimit")
            params["SpotPriceLimit"] = round(spot_price_limit, 6)
    else:
        params["SpotStrategy"] = "NoSpot"
    if key_pair_name:
        params["KeyPairName"] = key_pair_name
    if ram_role_name:
        params["RamRoleName"] = ram_role_name
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
                     metadata_url: str = METADATA_URL, base_dir: str = AGENT_BASE_DIR,
                     supervisor: str = "auto") -> str:
    """The cloud-init user data script (see the module docstring) for one agent.

    - **agent_env**: ``LaunchRequest.agent_env`` (secrets inside; this text must never be
      logged). ``GA_INSTANCE_ID`` is added on the instance from metadata; ``GA_METADATA_FLAVOR``
      (``aliyun``), ``GA_METADATA_URL`` (``metadata_url``) and ``GA_WORK_DIR`` here.
    - **pip_spec** / **venv**: what to install and where (``venv`` None: system python3).
    - **metadata_url**, **base_dir**, **supervisor** (``auto`` | ``systemd`` | ``nohup``): the
      defaults are what ECS needs; tests run the script against a local metadata fake.

    Raises ``ValueError`` for a bad variable name, a path outside ``[A-Za-z0-9_./-]`` or an
    unknown supervisor.
    """
    if supervisor not in SUPERVISORS:
        raise ValueError(f"supervisor {supervisor!r}; allowed: {', '.join(SUPERVISORS)}")
    for label, path in (("base_dir", base_dir), ("venv", venv or "/")):
        if not _SAFE_PATH_RE.match(path):
            raise ValueError(f"{label} {path!r}: only absolute paths of [A-Za-z0-9_./-]")
    env = {k: v for k, v in agent_env.items() if k != "GA_INSTANCE_ID"}
    env.update(GA_METADATA_FLAVOR="aliyun", GA_METADATA_URL=metadata_url,
               GA_WORK_DIR=f"{base_dir}/work")
    encoded = base64.b64encode(env_file_text(env).encode()).decode()
    wrapped = "\n".join(encoded[i:i + 76] for i in range(0, len(encoded), 76))
    return _SCRIPT.format(
        base_dir=base_dir, metadata=shlex.quote(metadata_url), pip_spec=shlex.quote(pip_spec),
        venv=venv or "", supervisor=supervisor, env_b64=wrapped, unit=SYSTEMD_UNIT,
        stop_timeout=AGENT_STOP_TIMEOUT_S,
    )


_SCRIPT = """\
#!/bin/bash
# gpu-arbiter: install and start the node agent (ECS user data, run once by cloud-init as root)
set -euo pipefail
umask 077
GA_DIR={base_dir}
METADATA={metadata}
PIP_SPEC={pip_spec}
VENV='{venv}'
SUPERVISOR={supervisor}
mkdir -p "$GA_DIR/work"
chmod 700 "$GA_DIR"
exec >>"$GA_DIR/bootstrap.log" 2>&1
echo "gpu-arbiter bootstrap $(date -u +%FT%TZ)"

# 1. this instance's id, from ECS instance metadata
INSTANCE_ID=$(curl -sSf --retry 10 --retry-connrefused "$METADATA/latest/meta-data/instance-id")
[[ "$INSTANCE_ID" =~ ^[A-Za-z0-9-]+$ ]] || {{ echo "bad instance id from metadata"; exit 1; }}

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
