"""Pure launch translation: a :class:`LaunchRequest` → the ``instances.insert`` body (REST
JSON), its deterministic name and request id, labels, and the startup script that installs
and starts the node agent (the script of :mod:`providers.bootstrap`). No I/O.

- **Name**: ``ga-{token slug}-{10 hex of sha256(token)}`` (:func:`instance_name`): the same
  client token always names the same VM, and Compute Engine refuses a second VM of one name
  in a zone (409 ``alreadyExists``), so a repeated launch finds the first one. The
  ``requestId`` (a UUID derived from the token) makes Compute Engine itself ignore a repeated
  insert for an hour.
- **Labels**: ownership tags translated to GCP's label rules (:func:`labels`): lowercase
  letters, digits, ``_`` and ``-``, at most 63 characters, keys starting with a letter.
  That is lossy (``gpu-arbiter:owner`` → ``gpu_arbiter_owner``), so the exact tags and the
  client token also go into metadata (``gpu-arbiter-tags``, ``gpu-arbiter-client-token``);
  labels narrow a listing on the server, metadata decides.
- **Scheduling**: Spot is ``provisioningModel: SPOT`` with ``instanceTerminationAction``
  (``DELETE`` by default, or ``STOP``); every GPU VM has ``onHostMaintenance: TERMINATE``
  (GPUs cannot live-migrate) and ``automaticRestart: false`` (a restarted VM would not run
  the job again: the startup script runs once, below).
- **GPUs**: N1 shapes carry ``guestAccelerators``; accelerator-optimized machine types (A2,
  A3, G2) come with theirs and get none.
- **Startup script** (``startup-script`` metadata, run by the guest environment at every
  boot): reads the VM's name from the metadata server (``Metadata-Flavor: Google``) and
  gives the agent ``GA_METADATA_FLAVOR=gcp``, ``GA_METADATA_URL=http://metadata.google.internal``
  (the agent watches ``instance/preempted`` there). It bootstraps once: on a later boot it
  exits, so a restarted VM does not start a second agent for the same attempt. Metadata is
  readable by anyone allowed ``compute.instances.get`` and from inside the VM; the agent
  token it carries is scoped to one job attempt. Never log the body.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Mapping
from typing import Any

from core.models import Market, Offer
from providers import bootstrap
from providers.bootstrap import AGENT_BASE_DIR
from providers.gcp.machines import split_name
from providers.gcp.settings import CLOUD_PLATFORM_SCOPE, GcpLaunchSettings

LABEL_MAX = 63
LABELS_MAX = 64  # labels per resource
METADATA_VALUE_MAX_BYTES = 256 * 1024  # Compute Engine's limit per metadata value
METADATA_URL = "http://metadata.google.internal"
TAGS_KEY = "gpu-arbiter-tags"
TOKEN_KEY = "gpu-arbiter-client-token"
# systemd gives the agent this long to checkpoint after SIGTERM at shutdown: GCP sends ACPI
# G3 Mechanical Off 30 s after the G2 Soft Off of a preemption.
AGENT_STOP_TIMEOUT_S = 25
_NOT_LABEL_RE = re.compile(r"[^a-z0-9_-]")
_NOT_KEY_RE = re.compile(r"[^a-z0-9_]")
_NOT_NAME_RE = re.compile(r"[^a-z0-9-]+")
_TOKEN_NAMESPACE = uuid.UUID("9b0c7c3e-4a3f-5e7a-8d0e-6f1c2a9e4b10")


def label_text(text: str, *, key: bool) -> str:
    """``text`` under GCP's label rules: lowercased, other characters → ``_``, at most 63
    characters. Keys also turn ``-`` into ``_`` (a list filter names them as a field, and an
    identifier is the field name every filter parser reads) and get ``k`` in front when they
    would not start with a letter. Raises ``ValueError`` for an empty key."""
    out = (_NOT_KEY_RE if key else _NOT_LABEL_RE).sub("_", text.lower())
    if key:
        if not out:
            raise ValueError("label key: empty")
        if not out[0].isalpha():
            out = f"k{out}"
    return out[:LABEL_MAX]


def labels(tags: Mapping[str, str]) -> dict[str, str]:
    """Ownership tags → GCP labels (see :func:`label_text`). Raises ``ValueError`` naming the
    tag when two keys translate to one label or there are more than 64."""
    out: dict[str, str] = {}
    for key, value in tags.items():
        label = label_text(key, key=True)
        if label in out:
            raise ValueError(f"tag {key!r}: its label {label!r} is taken by another tag")
        out[label] = label_text(value, key=False)
    if len(out) > LABELS_MAX:
        raise ValueError(f"{len(out)} tags; GCP allows {LABELS_MAX} labels per VM")
    return out


def instance_name(client_token: str) -> str:
    """The VM name of ``client_token``: ``ga-`` + its slug (≤ 49 characters) + ``-`` + 10 hex
    of its sha256; a valid Compute Engine name (``[a-z]([-a-z0-9]{0,61}[a-z0-9])?``)."""
    slug = _NOT_NAME_RE.sub("-", client_token.lower()).strip("-")[:49].strip("-")
    digest = hashlib.sha256(client_token.encode()).hexdigest()[:10]
    return f"ga-{slug}-{digest}" if slug else f"ga-{digest}"


def request_id(client_token: str) -> str:
    """The ``requestId`` of an insert for ``client_token`` (a UUID, as the API requires)."""
    return str(uuid.uuid5(_TOKEN_NAMESPACE, client_token))


def insert_body(*, offer: Offer, client_token: str, tags: Mapping[str, str],
                startup_script: str, launch: GcpLaunchSettings) -> dict[str, Any]:
    """The ``instances.insert`` body (REST JSON) for ``offer`` (see the module docstring).

    Raises ``ValueError`` for a malformed offer name, bad tags or a startup script over
    Compute Engine's 256 KiB per metadata value.
    """
    size = len(startup_script.encode())
    if size > METADATA_VALUE_MAX_BYTES:
        raise ValueError(f"startup script is {size} bytes; GCP allows {METADATA_VALUE_MAX_BYTES} "
                         "per metadata value (is the job spec's env very large?)")
    zone, region = offer.zone, offer.region
    machine, accelerator, count = split_name(offer.instance_type)
    spot = offer.market is Market.SPOT
    scheduling: dict[str, Any] = {"onHostMaintenance": "TERMINATE", "automaticRestart": False,
                                  "provisioningModel": "SPOT" if spot else "STANDARD"}
    if spot:
        scheduling["instanceTerminationAction"] = launch.termination_action
    interface: dict[str, Any] = {"network": launch.network}
    subnetwork = launch.subnetwork_for(region)
    if subnetwork:
        interface["subnetwork"] = subnetwork
    if launch.external_ip:
        interface["accessConfigs"] = [{"name": "External NAT", "type": "ONE_TO_ONE_NAT"}]
    body: dict[str, Any] = {
        "name": instance_name(client_token),
        "machineType": f"zones/{zone}/machineTypes/{machine}",
        "disks": [{"boot": True, "autoDelete": True, "type": "PERSISTENT", "mode": "READ_WRITE",
                   "initializeParams": {"sourceImage": launch.image_for(region),
                                        "diskSizeGb": str(launch.disk_gib),
                                        "diskType": f"zones/{zone}/diskTypes/{launch.disk_type}"}}],
        "networkInterfaces": [interface],
        "scheduling": scheduling,
        "labels": labels(tags),
        "metadata": {"items": [
            {"key": "startup-script", "value": startup_script},
            {"key": TAGS_KEY, "value": json.dumps(dict(tags), sort_keys=True)},
            {"key": TOKEN_KEY, "value": client_token}]},
    }
    if accelerator:
        body["guestAccelerators"] = [{"acceleratorType": f"zones/{zone}/acceleratorTypes/"
                                                         f"{accelerator}",
                                      "acceleratorCount": count}]
    if launch.service_account:
        body["serviceAccounts"] = [{"email": launch.service_account,
                                    "scopes": [CLOUD_PLATFORM_SCOPE]}]
    return body


def render_startup_script(agent_env: Mapping[str, str], *, pip_spec: str, venv: str | None,
                          metadata_url: str = METADATA_URL, base_dir: str = AGENT_BASE_DIR,
                          supervisor: str = "auto") -> str:
    """The startup script (see the module docstring) for one agent: arguments and errors as
    :func:`providers.bootstrap.render_user_data`; the defaults are what a GCE VM needs (tests
    run it against a local metadata server in a temp dir). Never log the result: it carries
    ``agent_env``'s secrets."""
    return bootstrap.render_user_data(
        agent_env, cloud="GCE", flavor="gcp", metadata_url=metadata_url,
        instance_id_step=_INSTANCE_ID_STEP, pip_spec=pip_spec, venv=venv, base_dir=base_dir,
        supervisor=supervisor, stop_timeout_s=AGENT_STOP_TIMEOUT_S)


# Exits on a later boot, else sets INSTANCE_ID (the VM's name) from $METADATA (shell,
# inserted into providers/bootstrap.py's script).
_INSTANCE_ID_STEP = r"""
[ -e "$GA_DIR/bootstrapped" ] && { echo "bootstrapped at an earlier boot; not again"; exit 0; }
touch "$GA_DIR/bootstrapped"
INSTANCE_ID=$(curl -sSf --retry 10 --retry-connrefused -H 'Metadata-Flavor: Google' \
  "$METADATA/computeMetadata/v1/instance/name")
[[ "$INSTANCE_ID" =~ ^[a-z]([-a-z0-9]*[a-z0-9])?$ ]] || { echo "bad instance name from metadata"; exit 1; }
"""
