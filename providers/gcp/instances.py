"""Pure translation of Compute Engine instances (REST JSON of ``instances.get``/``list``) into
:class:`core.models.Instance`. No I/O, no clock.

Fields read: ``name`` (our instance id), ``zone`` and ``machineType`` (URLs; the last path
part), ``guestAccelerators`` (attached GPUs: the N1 offer name), ``status``,
``creationTimestamp`` (RFC 3339 with an offset), ``lastStopTimestamp``,
``scheduling.provisioningModel`` (``SPOT``; the older ``preemptible: true`` counts as spot),
``labels``, and the metadata items :data:`providers.gcp.launch.TAGS_KEY` (the exact tags) and
:data:`providers.gcp.launch.TOKEN_KEY` (the client token). Only those items are read: the
startup script in the same metadata carries secrets.

Preemption: a Spot VM that Compute Engine preempted with ``STOP`` is listed ``TERMINATED``
(``lastStopTimestamp`` the stop); we never stop our VMs (terminate deletes them), so a
TERMINATED spot VM of ours was preempted. A Spot VM preempted with ``DELETE`` disappears; the
zone's ``compute.instances.preempted`` operations name it (:func:`preempted_names`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from core.models import Instance, InstanceState, Market, OfferKey, PreemptionNotice
from providers.gcp.launch import TAGS_KEY, TOKEN_KEY
from providers.gcp.machines import attached_name
from providers.gcp.pricing import SPOT_NOTICE_S
from providers.gcp.settings import zone_region
from providers.regional_api import aware_utc, known

PROVIDER = "gcp"
PREEMPTED_OPERATION = "compute.instances.preempted"

STATES: dict[str, InstanceState] = {
    "PROVISIONING": InstanceState.PENDING,
    "STAGING": InstanceState.PENDING,
    "RUNNING": InstanceState.RUNNING,
    # Host repair: the VM comes back by itself; the agent's heartbeats tell whether its job did.
    "REPAIRING": InstanceState.RUNNING,
    "STOPPING": InstanceState.SHUTTING_DOWN,
    "SUSPENDING": InstanceState.SHUTTING_DOWN,
    "SUSPENDED": InstanceState.TERMINATED,
    "TERMINATED": InstanceState.TERMINATED,
}


def last_part(url: str) -> str:
    """``…/zones/us-central1-a`` → ``us-central1-a``."""
    return url.rstrip("/").rsplit("/", 1)[-1]


def _metadata(raw: dict[str, Any]) -> dict[str, str]:
    items = (raw.get("metadata") or {}).get("items") or []
    return {i["key"]: str(i.get("value") or "") for i in items
            if i.get("key") in (TAGS_KEY, TOKEN_KEY)}


def _tags(raw: dict[str, Any], metadata: dict[str, str]) -> dict[str, str]:
    try:
        tags = json.loads(metadata[TAGS_KEY])
        if isinstance(tags, dict):
            return {str(k): str(v) for k, v in tags.items()}
    except (KeyError, ValueError):
        pass
    return {str(k): str(v) for k, v in (raw.get("labels") or {}).items()}


def offer_name(raw: dict[str, Any]) -> str:
    """The offer name of a VM: its machine type, with ``+ACCELERATOR:COUNT`` when it has
    attached GPUs."""
    machine = last_part(str(raw.get("machineType") or ""))
    attached = raw.get("guestAccelerators") or []
    if machine.startswith("n1-") and len(attached) == 1:
        return attached_name(machine, last_part(str(attached[0].get("acceleratorType") or "")),
                             int(attached[0].get("acceleratorCount") or 0))
    return machine


def is_spot(raw: dict[str, Any]) -> bool:
    scheduling = raw.get("scheduling") or {}
    return scheduling.get("provisioningModel") == "SPOT" or bool(scheduling.get("preemptible"))


def instance_from_api(raw: dict[str, Any], notice: PreemptionNotice | None = None,
                      preempted: bool = False) -> Instance:
    """A Compute Engine ``Instance`` (REST JSON) → :class:`Instance` (see the module docstring).

    ``preempted``: the zone's operations say Compute Engine preempted it. A gone spot VM gets
    ``terminated_reason`` ``preempted`` (a TERMINATED spot VM is one we never stopped), any
    other gone VM its status in lower case. Raises ``ValueError`` naming the field for an
    unknown status or a missing field.
    """
    try:
        name, status = str(raw["name"]), str(raw["status"])
        zone = last_part(str(raw["zone"]))
        launched_at = aware_utc(raw["creationTimestamp"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"GCE instance missing or bad field: {exc!r}") from None
    region = zone_region(zone)
    if region is None:
        raise ValueError(f"GCE instance {name}: zone {zone!r} is not a zone name")
    state = known(STATES, status, f"GCE instance {name}: status")
    spot = is_spot(raw)
    reason = None
    if state.is_gone():
        reason = "preempted" if spot and (preempted or status == "TERMINATED") else status.lower()
    metadata = _metadata(raw)
    return Instance(
        id=name, provider=PROVIDER,
        offer=OfferKey(provider=PROVIDER, region=region, zone=zone, instance_type=offer_name(raw),
                       market=Market.SPOT if spot else Market.ON_DEMAND),
        client_token=metadata.get(TOKEN_KEY, ""), state=state, launched_at=launched_at,
        tags=_tags(raw, metadata), notice=notice, terminated_reason=reason)


def stopping_notice(raw: dict[str, Any], since: datetime) -> PreemptionNotice | None:
    """The notice of a spot VM listed ``STOPPING`` since ``since`` (we never stop ours: it is
    being preempted): the action (``stop``, or ``terminate`` for ``DELETE``) 30 s after."""
    if not is_spot(raw) or raw.get("status") != "STOPPING":
        return None
    action = (raw.get("scheduling") or {}).get("instanceTerminationAction")
    return PreemptionNotice(action="stop" if action == "STOP" else "terminate",
                            action_at=since + timedelta(seconds=SPOT_NOTICE_S),
                            received_at=since)


def preempted_names(operations: Iterable[dict[str, Any]]) -> set[str]:
    """VM names that the zone's ``compute.instances.preempted`` operations name."""
    return {last_part(str(op.get("targetLink") or "")) for op in operations
            if op.get("operationType") == PREEMPTED_OPERATION and op.get("targetLink")}
