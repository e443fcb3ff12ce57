"""Pure translation of Azure VMs: a ``VirtualMachine`` as the Resource Manager returns it
(REST JSON, with ``properties.instanceView`` when listed with ``$expand=instanceView``) →
:class:`core.models.Instance`. No I/O, no clock.

State comes from ``properties.provisioningState`` and the instance view's ``statuses[]``
codes ``ProvisioningState/<state>[/<code>]`` and ``PowerState/<state>`` (the shapes of
``shared/data/api_examples/azure/compute_vm_instance_view_example.json`` and
``compute_spot_vm_lifecycle_recording.json``). A Spot VM that Azure is evicting (its eviction
policy ``Delete``: ``provisioningState`` ``Deleting``; ``Deallocate``: ``PowerState/
deallocating`` or ``deallocated``) and that we did not ask to delete is ``preempted``; the
caller says so with ``evicted_since`` (when a listing first showed it).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from core.models import Instance, InstanceState, Market, OfferKey, PreemptionNotice
from providers.regional_api import aware_utc

PROVIDER = "azure"
# Ownership: the client token of the launch, on the VM as a tag (its name is derived from it).
CLIENT_TOKEN_TAG = "gpu-arbiter:client-token"

POWER_STATES: dict[str, InstanceState] = {
    "starting": InstanceState.PENDING, "running": InstanceState.RUNNING,
    "stopping": InstanceState.SHUTTING_DOWN, "deallocating": InstanceState.SHUTTING_DOWN,
    # We never stop or deallocate: a stopped VM no longer runs its job.
    "stopped": InstanceState.TERMINATED, "deallocated": InstanceState.TERMINATED,
}
PROVISIONING_STATES: dict[str, InstanceState] = {
    "creating": InstanceState.PENDING, "updating": InstanceState.PENDING,
    "migrating": InstanceState.PENDING, "succeeded": InstanceState.PENDING,
    "deleting": InstanceState.SHUTTING_DOWN, "failed": InstanceState.TERMINATED,
    "canceled": InstanceState.TERMINATED,
}
# ProvisioningState/failed/<code> → Instance.terminated_reason (AWS's wording for the same).
_CAPACITY_CODES = ("AllocationFailed", "ZonalAllocationFailed", "SkuNotAvailable",
                   "OverconstrainedAllocationRequest", "OverconstrainedZonalAllocationRequest")


def _statuses(vm: dict[str, Any]) -> list[str]:
    view = (vm.get("properties") or {}).get("instanceView") or {}
    return [str(s.get("code") or "") for s in view.get("statuses") or []]


def power_state(vm: dict[str, Any]) -> str | None:
    """``running`` of ``PowerState/running``; None when the instance view has none."""
    return next((c.split("/", 1)[1].lower() for c in _statuses(vm)
                 if c.startswith("PowerState/")), None)


def is_spot(vm: dict[str, Any]) -> bool:
    return (vm.get("properties") or {}).get("priority") == "Spot"


def is_being_evicted(vm: dict[str, Any]) -> bool:
    """Whether a Spot VM is being deleted or deallocated (by Azure, unless we asked)."""
    provisioning = str((vm.get("properties") or {}).get("provisioningState") or "").lower()
    return is_spot(vm) and (provisioning == "deleting"
                            or power_state(vm) in ("deallocating", "deallocated"))


def _failure_reason(vm: dict[str, Any]) -> str:
    codes = [c.split("/", 2)[2] for c in _statuses(vm)
             if c.lower().startswith("provisioningstate/failed/")]
    code = codes[0] if codes else "unknown"
    return f"no capacity at launch ({code})" if code in _CAPACITY_CODES else \
        f"creation failed ({code})"


def vm_state(vm: dict[str, Any]) -> tuple[InstanceState, str | None]:
    """(state, terminated reason) from the provisioning state and the power state. Raises
    ``ValueError`` naming the VM for a provisioning state not in :data:`PROVISIONING_STATES`."""
    props = vm.get("properties") or {}
    provisioning = str(props.get("provisioningState") or "").lower()
    if provisioning not in PROVISIONING_STATES:
        raise ValueError(f"VM {vm.get('name')!r}: provisioningState {provisioning!r}; known: "
                         f"{', '.join(PROVISIONING_STATES)}")
    if provisioning in ("failed", "canceled"):
        return InstanceState.TERMINATED, _failure_reason(vm)
    state = PROVISIONING_STATES[provisioning]
    power = power_state(vm)
    if provisioning != "deleting" and power in POWER_STATES:
        state = POWER_STATES[power]
    return state, (power or provisioning) if state is InstanceState.TERMINATED else None


def instance_from_vm(vm: dict[str, Any], seen_at: datetime,
                     evicted_since: datetime | None = None) -> Instance:
    """A VM dict → :class:`Instance` (id = the VM name, unique in its resource group).

    - offer key: location, zone ``<location>-<zones[0]>`` (or the location), VM size, market
      ``spot`` when ``priority`` is ``Spot``;
    - ``client_token`` from the :data:`CLIENT_TOKEN_TAG` tag; ``launched_at`` from
      ``properties.timeCreated``, else ``seen_at``;
    - ``evicted_since``: the VM is being evicted (see the module docstring): reason
      ``preempted`` and a notice with ``action_at`` = ``evicted_since`` (the eviction is under
      way; the 30 s Scheduled Events notice reached the agent before).

    Raises ``ValueError`` naming the field when ``name``, ``location`` or
    ``hardwareProfile.vmSize`` is missing, or the state is unknown.
    """
    props = vm.get("properties") or {}
    try:
        name, location = str(vm["name"]), str(vm["location"]).lower()
        size = str(props["hardwareProfile"]["vmSize"])
    except (KeyError, TypeError):
        raise ValueError("VM lacks name, location or properties.hardwareProfile.vmSize") from None
    state, reason = vm_state(vm)
    tags = {str(k): str(v) for k, v in (vm.get("tags") or {}).items()}
    zones = vm.get("zones") or []
    notice = None
    if evicted_since is not None:
        reason = "preempted"
        notice = PreemptionNotice(action="stop" if power_state(vm) in ("deallocating",
                                                                        "deallocated")
                                  else "terminate", action_at=evicted_since,
                                  received_at=evicted_since)
    created = props.get("timeCreated")
    return Instance(
        id=name, provider=PROVIDER,
        offer=OfferKey(provider=PROVIDER, region=location,
                       zone=f"{location}-{zones[0]}" if zones else location,
                       instance_type=size, market=Market.SPOT if is_spot(vm) else Market.ON_DEMAND),
        client_token=tags.get(CLIENT_TOKEN_TAG, ""), state=state,
        launched_at=aware_utc(created) if created else seen_at, tags=tags, notice=notice,
        terminated_reason=reason)
