"""Hosts that go away and come back, and drained hosts, over real sshd."""

from __future__ import annotations

from datetime import timedelta

import psutil
import pytest

from core.models import InstanceState
from providers.errors import CapacityError
from tests.fixtures.sshd import wait_gone
from tests.fixtures.waiting import wait_until
from tests.integration.fleet.conftest import FleetEnv, gpu_timeline_ok, request, slot
from tests.integration.fleet.test_lifecycle import agent_pid


@pytest.fixture
def revived(ssh_fleet):
    """Hosts a test kills are started again, whatever the test did."""
    yield ssh_fleet
    for host in ssh_fleet.hosts.values():
        if host.proc is None or host.proc.poll() is not None:
            host.start()


def test_a_killed_host_loses_its_instances_and_its_slots_return(fleet_env: FleetEnv,
                                                                revived) -> None:
    adapter = fleet_env.provider(host_lost_after_s=30)
    inst = adapter.launch(request(slot(adapter, "gpu-b", 1), "job-k-1"))
    pid = agent_pid(fleet_env, "gpu-b", "job-k-1")
    host = fleet_env.ssh.hosts["gpu-b"]
    host.kill()  # sshd, its sessions and the agent: a power cut
    wait_gone([pid])

    # Unreachable for less than host_lost_after_s: unknown, so still reported running.
    states = {i.id: (i.state, i.terminated_reason) for i in adapter.describe()}
    assert states[inst.id] == (InstanceState.RUNNING, None)
    fleet_env.clock.advance(31)
    [lost] = [i for i in adapter.describe() if i.id == inst.id]
    assert lost.state is InstanceState.TERMINATED and "gpu-b unreachable" in lost.terminated_reason
    assert {o.zone for o in adapter.list_offers()} == {"gpu-a", "gpu-c"}

    with pytest.raises(CapacityError, match="unreachable") as refused:  # placed elsewhere
        adapter.launch(request(slot(fleet_env.provider(), "gpu-a", 1).model_copy(
            update={"instance_type": "gpu-b.1xV100", "zone": "gpu-b"}), "job-k2-1"))
    assert refused.value.code == "HostUnreachable"
    adapter.terminate(inst.id)  # the controller ends it: quiet, the GPU stays claimed
    assert fleet_env.ledger().allocations() == {"gpu-b": {0: inst.id}}
    assert fleet_env.ledger().claims()[inst.id].ending_at is not None

    host.start()
    [back] = [i for i in adapter.describe() if i.id == inst.id]
    assert back.state is InstanceState.TERMINATED
    assert fleet_env.ledger().allocations() == {}
    assert sorted(o.gpu_count for o in adapter.list_offers() if o.zone == "gpu-b") == [1, 2]
    log = fleet_env.allocation_log("gpu-b")
    assert [line[1:3] for line in log] == [["start", inst.id], ["end", inst.id]]
    assert gpu_timeline_ok(log)


def test_an_ssh_outage_ends_an_agent_still_running_when_the_host_answers(
        fleet_env: FleetEnv, revived) -> None:
    adapter = fleet_env.provider(host_lost_after_s=5)
    inst = adapter.launch(request(slot(adapter, "gpu-b", 1), "job-net-1"))
    pid = agent_pid(fleet_env, "gpu-b", "job-net-1")
    host = fleet_env.ssh.hosts["gpu-b"]
    host.kill(agents=False)  # only SSH is gone; the agent runs on
    fleet_env.clock.advance(6)
    [lost] = [i for i in adapter.describe() if i.id == inst.id]
    assert lost.state is InstanceState.TERMINATED  # the job moves elsewhere
    adapter.terminate(inst.id)
    assert fleet_env.ledger().allocations() == {"gpu-b": {0: inst.id}}  # not offered yet

    host.start()
    [ended] = [i for i in adapter.describe() if i.id == inst.id]
    assert ended.state is InstanceState.TERMINATED
    wait_gone([pid])  # the leftover agent was stopped before its GPU was freed
    assert fleet_env.ledger().allocations() == {}
    assert [line[1] for line in fleet_env.allocation_log("gpu-b")] == ["start", "end"]


def test_drain_gives_running_instances_a_notice_and_lists_no_slot(fleet_env: FleetEnv) -> None:
    adapter = fleet_env.provider(drain_notice_s=120)
    inst = adapter.launch(request(slot(adapter, "gpu-a", 1), "job-d-1", FAKE_IGNORE_TERM="1"))
    pid = agent_pid(fleet_env, "gpu-a", "job-d-1")
    ledger = fleet_env.ledger()
    drained_at = fleet_env.clock()
    ledger.drain("gpu-a", at=drained_at)
    [noticed] = [i for i in adapter.describe() if i.id == inst.id]
    assert noticed.state is InstanceState.RUNNING
    assert noticed.notice.action == "terminate"
    assert noticed.notice.action_at == drained_at + timedelta(seconds=120)
    fleet_env.clock.advance(10)  # the notice's deadline does not move
    [noticed] = [i for i in adapter.describe() if i.id == inst.id]
    assert noticed.notice.action_at == drained_at + timedelta(seconds=120)
    # Its agent (no metadata service to read a notice from) got one SIGTERM to checkpoint.
    signals = fleet_env.work_root("gpu-a") / "job-d-1" / "work" / "signals"
    wait_until(signals.exists, 10, "the agent's SIGTERM")
    assert signals.read_text().split() == ["TERM"] and psutil.pid_exists(pid)
    assert "gpu-a" not in {o.zone for o in adapter.list_offers()}
    free_slot = slot(fleet_env.provider(), "gpu-b", 1).model_copy(
        update={"instance_type": "gpu-a.1xRTX4090", "zone": "gpu-a"})
    with pytest.raises(CapacityError, match="drained"):
        adapter.launch(request(free_slot, "job-d-2"))

    ledger.undrain("gpu-a")
    [calm] = [i for i in adapter.describe() if i.id == inst.id]
    assert calm.notice is None
    assert sorted(o.gpu_count for o in adapter.list_offers() if o.zone == "gpu-a") == [1, 2, 3]
