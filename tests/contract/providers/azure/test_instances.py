"""VM dicts of the recorded Spot VM lifecycle and the instance view example → Instance."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from core.models import InstanceState, Market
from providers.azure import instances
from tests.contract.providers.azure.data import T0, example


def _recorded(step: int) -> dict[str, Any]:
    """The body of the recording's ``step``-th interaction (0: the PUT's 201, 4: the GET)."""
    vm = copy.deepcopy(example("compute_spot_vm_lifecycle_recording.json")["interactions"][step]
                       ["response"]["body"])
    vm["tags"] = {instances.CLIENT_TOKEN_TAG: "job-1-1"}
    return vm


def _with_view(vm: dict[str, Any], power: str | None = "running") -> dict[str, Any]:
    view = copy.deepcopy(example("compute_vm_instance_view_example.json")["responses"]["200"]
                         ["body"])
    view["statuses"] = [s for s in view["statuses"] if not s["code"].startswith("PowerState/")]
    if power:
        view["statuses"].append({"code": f"PowerState/{power}", "level": "Info"})
    vm["properties"]["instanceView"] = view
    return vm


def test_the_recorded_put_answer_is_a_pending_spot_vm() -> None:
    instance = instances.instance_from_vm(_recorded(0), T0)
    assert instance.state is InstanceState.PENDING and instance.offer.market is Market.SPOT
    assert (instance.id, instance.offer.region, instance.offer.zone) == (
        "virtualmachinex34bd0f90", "eastus", "eastus")
    assert instance.offer.instance_type == "Standard_D2_v2"
    assert instance.client_token == "job-1-1" and instance.launched_at == T0


def test_succeeded_and_running_is_running() -> None:
    vm = _with_view(_recorded(4))
    assert instances.power_state(vm) == "running"
    assert instances.instance_from_vm(vm, T0).state is InstanceState.RUNNING
    assert not instances.is_being_evicted(vm)
    no_power = _with_view(_recorded(4), power=None)
    assert instances.instance_from_vm(no_power, T0).state is InstanceState.PENDING


@pytest.mark.parametrize("power, state, action", [
    ("deallocating", InstanceState.SHUTTING_DOWN, "stop"),
    ("deallocated", InstanceState.TERMINATED, "stop"),
])
def test_a_deallocated_spot_vm_was_evicted(power: str, state: InstanceState,
                                           action: str) -> None:
    vm = _with_view(_recorded(4), power)  # the recording's VM has evictionPolicy Deallocate
    assert instances.is_being_evicted(vm)
    instance = instances.instance_from_vm(vm, T0, evicted_since=T0)
    assert (instance.state, instance.terminated_reason) == (state, "preempted")
    assert instance.notice is not None and instance.notice.action == action


def test_deleting_and_failed() -> None:
    deleting = _recorded(4)
    deleting["properties"]["provisioningState"] = "Deleting"
    assert instances.is_being_evicted(deleting)
    assert instances.instance_from_vm(deleting, T0).state is InstanceState.SHUTTING_DOWN
    failed = _with_view(_recorded(4), power=None)
    failed["properties"]["provisioningState"] = "Failed"
    failed["properties"]["instanceView"]["statuses"][0]["code"] = \
        "ProvisioningState/failed/ZonalAllocationFailed"
    instance = instances.instance_from_vm(failed, T0)
    assert (instance.state, instance.terminated_reason) == (
        InstanceState.TERMINATED, "no capacity at launch (ZonalAllocationFailed)")
    odd = _recorded(4)
    odd["properties"]["provisioningState"] = "Hibernating"
    with pytest.raises(ValueError, match="provisioningState"):
        instances.instance_from_vm(odd, T0)
