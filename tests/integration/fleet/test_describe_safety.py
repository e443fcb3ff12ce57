"""What describe, terminate and the fleet listing must never do, over real sshd and Redis:
declare a live agent gone because its host's nvidia-smi misbehaved, touch another
installation's folders on a shared work root, abandon a launch still installing its agent,
write outside an instance folder for a malformed id, or let a hung host hold the API."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest
import uvicorn

from core.models import TAG_JOB, TAG_OWNER, InstanceState
from providers.base import LaunchRequest
from providers.fleet.provider import FleetProvider
from scheduler.api.app import create_app
from scheduler.checkpoints.local import LocalObjectStore
from scheduler.controller.context import ProviderRegistry
from scheduler.services import fleet as fleet_service
from scheduler.store import Store
from scheduler.store.agents import AgentTokens
from scheduler.store.fleet import FleetLedger
from tests.fixtures.redis_server import free_port
from tests.fixtures.waiting import wait_until
from tests.integration.fleet.conftest import FleetEnv, request, slot
from tests.integration.fleet.test_lifecycle import agent_pid


def _owned(offer, token: str, owner: str) -> LaunchRequest:
    return LaunchRequest(offer=offer, client_token=token, tags={TAG_OWNER: owner,
                                                                TAG_JOB: token},
                         agent_env={"GA_AGENT_TOKEN": "sekrit-agent-token"})


@pytest.fixture
def gpus_csv(ssh_fleet):
    """gpu-b's stand-in nvidia-smi output, restored whatever the test wrote."""
    path = ssh_fleet.hosts["gpu-b"].folder / "gpus.csv"
    before = path.read_text()
    yield path
    path.write_text(before)


def test_bad_nvidia_smi_output_drops_the_offers_not_the_instances(fleet_env: FleetEnv,
                                                                  gpus_csv: Path) -> None:
    adapter = fleet_env.provider(host_lost_after_s=30)
    inst = adapter.launch(request(slot(adapter, "gpu-b", 1), "job-smi-1"))
    pid = agent_pid(fleet_env, "gpu-b", "job-smi-1")
    # A GPU fell off the bus: nvidia-smi prints an error line among its CSV.
    gpus_csv.write_text(gpus_csv.read_text() + "Unable to determine the device handle for "
                        "GPU 0000:3B:00.0: Unknown Error\n")
    for _ in range(2):
        [seen] = [i for i in adapter.describe() if i.id == inst.id]
        assert (seen.state, seen.terminated_reason) == (InstanceState.RUNNING, None)
        fleet_env.clock.advance(31)  # past host_lost_after_s: the host still answers SSH
    assert os.path.exists(f"/proc/{pid}")
    assert fleet_env.ledger().allocations() == {"gpu-b": {0: inst.id}}
    assert not [o for o in adapter.list_offers() if o.zone == "gpu-b"]
    [row] = [r for r in adapter.check() if r.check == "ssh gpu-b"]
    assert not row.ok and "Unable to determine" in row.detail
    adapter.terminate(inst.id)
    assert fleet_env.ledger().allocations() == {}


def test_another_installations_folders_on_a_shared_work_root_are_left_alone(
        fleet_env: FleetEnv) -> None:
    prod = fleet_env.provider()
    staging = FleetProvider(prod.settings, FleetLedger(fleet_env.redis, f"{fleet_env.name}-stg"),
                            fleet_env.clock)
    fleet_env.providers.append(staging)
    theirs = staging.launch(_owned(slot(staging, "gpu-a", 1), "job-stg-1", "staging"))
    mine = prod.launch(_owned(slot(prod, "gpu-a", 1), "job-prod-1", "prod"))
    agent_pid(fleet_env, "gpu-a", "job-stg-1")
    # A staging launch cut short before its agent started, long past the launch grace.
    half = fleet_env.work_root("gpu-a") / "job-stg-2"
    (half / "work").mkdir(parents=True)
    (half / "meta.json").write_text(json.dumps({
        "instance_id": "gpu-a.job-stg-2", "client_token": "job-stg-2",
        "offer": theirs.offer.series(), "tags": {TAG_OWNER: "staging"},
        "launched_at": fleet_env.clock().isoformat(), "gpus": [3]}))
    fleet_env.clock.advance(prod.settings.launch_grace_s + 1)

    fleet_env.ledger().drain("gpu-a")  # prod drains the host
    found = {i.id: i for i in prod.describe({TAG_OWNER: "prod"})}
    assert set(found) == {mine.id} and found[mine.id].notice is not None
    work = fleet_env.work_root("gpu-a")
    wait_until(lambda: (work / "job-prod-1" / "work" / "signals").exists(), 10, "prod's TERM")
    time.sleep(0.5)  # a wrong SIGTERM would have landed by now
    assert not (work / "job-stg-1" / "work" / "signals").exists()
    assert not (work / "job-stg-1" / "noticed").exists()
    assert not (half / "ended").exists()
    assert {i.id: i.state for i in staging.describe({TAG_OWNER: "staging"})} == {
        theirs.id: InstanceState.RUNNING, "gpu-a.job-stg-2": InstanceState.TERMINATED}
    staging.terminate(theirs.id)


_SLOW_PYTHON = """#!/bin/sh
# Stand-in for a shipped agent's venv python: the install check takes until "go" exists
# (a slow pip), then the stand-in agent runs.
if [ "$1" = -c ]; then
  while [ ! -f "$(dirname "$0")/go" ]; do sleep 0.1; done
  exit 0
fi
exec {agent}
"""


def test_a_launch_still_installing_its_agent_is_not_abandoned(fleet_env: FleetEnv,
                                                              tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python3"
    python.write_text(_SLOW_PYTHON.format(agent=fleet_env.fake_agent))
    python.chmod(0o755)
    shipped = {"agent": {"pip_spec": "gpu-arbiter==0.1.0", "venv": str(venv)},
               "launch_grace_s": 300}
    adapter, replica = fleet_env.provider(**shipped), fleet_env.provider(**shipped)
    offer = slot(adapter, "gpu-a", 1)
    result: dict[str, object] = {}
    launch = threading.Thread(target=lambda: result.update(
        inst=adapter.launch(request(offer, "job-pip-1"))))
    launch.start()
    meta = fleet_env.work_root("gpu-a") / "job-pip-1" / "meta.json"
    wait_until(meta.exists, 20, "the launch to write meta.json")
    fleet_env.clock.advance(301)  # past launch_grace_s, within the install's 600 s
    assert replica.describe() == []  # unfinished: not reported, and not abandoned
    assert not (meta.parent / "ended").exists()
    (venv / "bin" / "go").touch()
    launch.join(30)
    assert result["inst"].state is InstanceState.RUNNING
    [running] = replica.describe()
    assert running.state is InstanceState.RUNNING
    adapter.terminate(running.id)


@pytest.mark.parametrize("bad", ["gpu-a.", "gpu-a..", "gpu-a...", "gpu-a./tmp", "gpu-a"])
def test_terminate_of_a_malformed_id_writes_nothing(fleet_env: FleetEnv, bad: str) -> None:
    adapter = fleet_env.provider()
    root = fleet_env.work_root("gpu-a")
    root.mkdir(parents=True)
    before = set(root.parent.iterdir())
    adapter.terminate(bad)  # never one of ours: quiet, as for an instance that never existed
    assert list(root.iterdir()) == [] and set(root.parent.iterdir()) == before


def test_an_unknown_fleet_names_the_fleets_there_are(fleet_env: FleetEnv) -> None:
    registry = ProviderRegistry([fleet_env.provider()])
    store = Store.over(fleet_env.redis)
    with pytest.raises(fleet_service.FleetHostNotFound) as unknown:
        fleet_service.drain(store, registry, "gpu-a", fleet="nope")
    assert str(unknown.value) == f"no fleet 'nope' (fleets: {fleet_env.name})"


@pytest.fixture
def hung_gpu_b(ssh_fleet):
    """gpu-b's sshd stopped (SIGSTOP): connections are accepted by the kernel and never
    answered. Continued afterwards."""
    host = ssh_fleet.hosts["gpu-b"]
    os.kill(host.proc.pid, signal.SIGSTOP)
    yield host
    os.kill(host.proc.pid, signal.SIGCONT)


def test_a_hung_host_does_not_hold_the_fleet_listing_or_the_api(fleet_env: FleetEnv,
                                                                  hung_gpu_b, tmp_path) -> None:
    adapter = fleet_env.provider(connect_timeout_s=20, command_timeout_s=20)
    store = Store.over(fleet_env.redis)
    app = create_app(store, LocalObjectStore(tmp_path / "objects"), AgentTokens(b"s"), "tok")
    app.state.providers = ProviderRegistry([adapter])
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                           log_level="warning", lifespan="off"))
    threading.Thread(target=server.run, daemon=True).start()
    wait_until(lambda: server.started, 10, "the API to start")
    url = f"http://127.0.0.1:{port}"
    took: list[float] = []
    rows: list[dict] = []

    def listing() -> None:
        start = time.monotonic()
        answer = httpx.get(f"{url}/v1/fleet", headers={"Authorization": "Bearer tok"},
                           timeout=60)
        took.append(time.monotonic() - start)
        rows.extend(answer.json()["hosts"])

    try:
        clients = [threading.Thread(target=listing) for _ in range(60)]
        for client in clients:
            client.start()
        time.sleep(0.5)
        start = time.monotonic()
        assert httpx.get(f"{url}/v1/health", timeout=30).status_code == 200
        assert time.monotonic() - start < 2
        for client in clients:
            client.join(60)
        assert len(took) == 60 and max(took) < fleet_service.ANSWER_WAIT_S + 3, took
        by_host = {r["host"]: r for r in rows}
        assert not by_host["gpu-b"]["reachable"] and "no answer" in by_host["gpu-b"]["error"]
        assert by_host["gpu-a"]["reachable"] and by_host["gpu-a"]["gpu_count"] == 4
    finally:
        server.should_exit = True


def test_bad_nvidia_smi_output_lists_the_host_reachable_with_its_error(
        fleet_env: FleetEnv, gpus_csv: Path) -> None:
    gpus_csv.write_text("Unable to determine the device handle for GPU 0000:3B:00.0\n")
    registry = ProviderRegistry([fleet_env.provider()])
    [row] = [r for r in fleet_service.hosts(Store.over(fleet_env.redis), registry)
             if r["host"] == "gpu-b"]
    assert row["reachable"] and "Unable to determine" in row["error"] and row["gpu_count"] == 0

