"""Pure launch translation: a :class:`LaunchRequest` → the VM's name and the
``PUT …/virtualMachines/{name}`` body (REST JSON), and the cloud-init ``customData`` that
installs and starts the node agent (the script of :mod:`providers.bootstrap`). No I/O.

The VM is created with everything it needs inline, all deleted with it (``deleteOption``
``Delete``): the OS disk and one network interface in the location's subnet (the
``networkInterfaceConfigurations`` of ``networkApiVersion`` 2020-11-01), with a Standard
public IP when configured. A Spot VM is ``priority`` ``Spot``, ``evictionPolicy`` ``Delete``
and ``billingProfile.maxPrice`` per the ``max_price`` policy (-1, or a USD price with 5
decimals: what the Spot docs allow).

On the VM the script reads the VM's name from the Instance Metadata Service
(``/metadata/instance/compute/name``, header ``Metadata: true``) and gives the agent
``GA_METADATA_FLAVOR=azure`` and ``GA_METADATA_URL=http://169.254.169.254`` (Scheduled
Events are ``/metadata/scheduledevents`` under it). ``customData`` is readable inside the VM
(cloud-init keeps a copy, root only); the Resource Manager never returns it, and it is kept
out of logs here too.
"""

from __future__ import annotations

import base64
import hashlib
import math
import re
from collections.abc import Mapping
from typing import Any

from core.models import Market, Offer
from providers import bootstrap
from providers.azure.instances import CLIENT_TOKEN_TAG
from providers.azure.settings import AzureLaunchSettings, zone_number
from providers.bootstrap import AGENT_BASE_DIR

IMDS_URL = "http://169.254.169.254"
NETWORK_API_VERSION = "2020-11-01"
CUSTOM_DATA_MAX_BYTES = 87380  # Azure's limit on base64-encoded customData
TAG_NAME_MAX, TAG_VALUE_MAX, TAGS_MAX = 512, 256, 50
_TAG_NAME_FORBIDDEN = set('<>%&\\?/')
# systemd gives the agent this long to checkpoint after SIGTERM at shutdown: inside the 30 s
# Preempt notice, leaving time for the VM to stop.
AGENT_STOP_TIMEOUT_S = 25
VM_NAME_MAX = 64


def vm_name(client_token: str) -> str:
    """The VM name for ``client_token``: ``ga-<token, lower-cased, [a-z0-9-] only>-<10 hex of
    its sha256>``, at most 64 characters; a valid Linux host name, the same for the same
    token and different for different ones (the hash covers the exact token)."""
    digest = hashlib.sha256(client_token.encode()).hexdigest()[:10]
    readable = re.sub(r"[^a-z0-9]+", "-", client_token.lower()).strip("-")
    readable = readable[:VM_NAME_MAX - len(digest) - 5].strip("-")
    return f"ga-{readable}-{digest}" if readable else f"ga-{digest}"


def vm_tags(tags: Mapping[str, str], client_token: str) -> dict[str, str]:
    """``tags`` plus the client token tag. Raises ``ValueError`` naming the tag when a name is
    empty, longer than 512 characters or holds ``< > % & \\ ? /``, a value is longer than 256,
    or there are more than 50 tags (Azure's rules)."""
    out = {**tags, CLIENT_TOKEN_TAG: client_token}
    if len(out) > TAGS_MAX:
        raise ValueError(f"{len(out)} tags; Azure allows {TAGS_MAX}")
    for name, value in out.items():
        if not name or len(name) > TAG_NAME_MAX or _TAG_NAME_FORBIDDEN & set(name):
            raise ValueError(f"tag name {name!r}: 1-{TAG_NAME_MAX} characters, none of <>%&\\?/")
        if len(value) > TAG_VALUE_MAX:
            raise ValueError(f"tag {name!r}: value longer than {TAG_VALUE_MAX} characters")
    return out


def image_reference(image: str) -> dict[str, str]:
    """``publisher:offer:sku:version`` → ``{"publisher", "offer", "sku", "version"}``; an image
    resource id → ``{"id": …}``."""
    if image.lower().startswith("/subscriptions/"):
        return {"id": image}
    publisher, offer, sku, version = image.split(":")
    return {"publisher": publisher, "offer": offer, "sku": sku, "version": version}


def max_price(offer: Offer, cfg: AzureLaunchSettings) -> float:
    """``billingProfile.maxPrice`` of a Spot VM for ``offer`` (see
    :class:`providers.azure.settings.AzureLaunchSettings`): -1, or the offer's price ×
    (1 + margin) capped at its on-demand price, rounded up to 5 decimals (USD/hour)."""
    if cfg.max_price == "on-demand":
        return -1.0
    cap = offer.price_usd_per_hour * (1 + cfg.max_price_margin)
    if offer.on_demand_price_usd_per_hour:
        cap = min(cap, offer.on_demand_price_usd_per_hour)
    return math.ceil(max(cap, offer.price_usd_per_hour) * 1e5) / 1e5


def vm_body(*, offer: Offer, client_token: str, tags: Mapping[str, str], custom_data: str,
            cfg: AzureLaunchSettings, image: str, name: str) -> dict[str, Any]:
    """The ``VirtualMachine`` body creating one VM ``name`` for ``offer`` (see the module
    docstring). ``custom_data`` is the plain script (base64-encoded here). Raises
    ``ValueError`` when a tag breaks Azure's rules or the encoded script exceeds 87,380
    bytes."""
    encoded = base64.b64encode(custom_data.encode()).decode()
    if len(encoded) > CUSTOM_DATA_MAX_BYTES:
        raise ValueError(f"customData is {len(encoded)} bytes base64; Azure allows "
                         f"{CUSTOM_DATA_MAX_BYTES} (is the job spec's env very large?)")
    ip_config: dict[str, Any] = {"subnet": {"id": cfg.subnets[offer.region]}, "primary": True}
    if cfg.public_ip:
        ip_config["publicIPAddressConfiguration"] = {
            "name": f"{name}-ip", "sku": {"name": "Standard", "tier": "Regional"},
            "properties": {"deleteOption": "Delete", "publicIPAllocationMethod": "Static"}}
    properties: dict[str, Any] = {
        "hardwareProfile": {"vmSize": offer.instance_type},
        "storageProfile": {
            "imageReference": image_reference(image),
            "osDisk": {"name": f"{name}-os", "createOption": "FromImage", "caching": "ReadWrite",
                       "deleteOption": "Delete", "diskSizeGB": cfg.os_disk_size_gib,
                       "managedDisk": {"storageAccountType": cfg.os_disk_type}}},
        "osProfile": {
            "computerName": name, "adminUsername": cfg.admin_username, "customData": encoded,
            "linuxConfiguration": {"disablePasswordAuthentication": True, "ssh": {"publicKeys": [
                {"path": f"/home/{cfg.admin_username}/.ssh/authorized_keys",
                 "keyData": cfg.ssh_public_key}]}}},
        "networkProfile": {
            "networkApiVersion": NETWORK_API_VERSION,
            "networkInterfaceConfigurations": [{
                "name": f"{name}-nic",
                "properties": {"primary": True, "deleteOption": "Delete",
                               "ipConfigurations": [{"name": "ipconfig1",
                                                     "properties": ip_config}]}}]},
        "priority": "Regular",
    }
    if offer.market is Market.SPOT:
        properties.update(priority="Spot", evictionPolicy="Delete",
                          billingProfile={"maxPrice": max_price(offer, cfg)})
    body: dict[str, Any] = {"location": offer.region, "tags": vm_tags(tags, client_token),
                            "properties": properties}
    zone = zone_number(offer.zone)
    if zone:
        body["zones"] = [zone]
    return body


def render_user_data(agent_env: Mapping[str, str], *, pip_spec: str, venv: str | None,
                     imds_url: str = IMDS_URL, base_dir: str = AGENT_BASE_DIR,
                     supervisor: str = "auto") -> str:
    """The cloud-init script (see the module docstring) for one agent: arguments and errors
    as :func:`providers.bootstrap.render_user_data`; the defaults are what an Azure VM needs.
    Never log the result: it carries ``agent_env``'s secrets."""
    return bootstrap.render_user_data(
        agent_env, cloud="Azure", flavor="azure", metadata_url=imds_url,
        instance_id_step=_INSTANCE_ID_STEP, pip_spec=pip_spec, venv=venv, base_dir=base_dir,
        supervisor=supervisor, stop_timeout_s=AGENT_STOP_TIMEOUT_S)


# Sets INSTANCE_ID (the VM name) from $METADATA (shell, inserted into providers/bootstrap.py's
# script).
_INSTANCE_ID_STEP = r"""
INSTANCE_ID=$(curl -sSf --retry 10 --retry-connrefused -H 'Metadata: true' \
  "$METADATA/metadata/instance/compute/name?api-version=2021-02-01&format=text")
[[ "$INSTANCE_ID" =~ ^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$ ]] || { echo "bad VM name from IMDS"; exit 1; }
"""
