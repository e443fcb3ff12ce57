"""Fleet tests: real OpenSSH hosts (tests/fixtures/sshd.py), started once per module, and
real Redis. Each test gets its own fleet name (ledger keys) and work roots on the hosts.

The modules that launch use a stand-in agent (``FAKE_AGENT``: records its environment,
starts a child in its process group and a "job" in a group of its own, exits on SIGTERM
unless told to ignore it) in
place of ``python3 -m scheduler.agent``; test_real_agent.py starts the real one.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psutil
import pytest

from core.models import Offer
from providers.base import LaunchRequest
from providers.fleet.provider import FleetProvider
from providers.fleet.settings import FleetSettings
from providers.fleet.setup import from_config
from scheduler.store.fleet import FleetLedger
from tests.fixtures.sshd import FakeGpu, SshFleet, start_sshd_hosts

FAKE_AGENT = """#!/bin/sh
# Stand-in for "python3 -m scheduler.agent": its environment, a child job, TERM handling.
env > "$GA_WORK_DIR/agent-env.tmp" && mv "$GA_WORK_DIR/agent-env.tmp" "$GA_WORK_DIR/agent-env.txt"
sleep 600 &
echo $! > "$GA_WORK_DIR/child.pid"
# A job in a process group of its own, as the real agent starts its command.
python3 -c 'import os, time; os.setpgid(0, 0); time.sleep(600)' &
echo $! > "$GA_WORK_DIR/job.pid"
trap 'echo TERM >> "$GA_WORK_DIR/signals"; [ -n "${FAKE_IGNORE_TERM:-}" ] || exit 0' TERM
n=0
while [ -z "${FAKE_EXIT_AFTER:-}" ] || [ "$n" -lt "$FAKE_EXIT_AFTER" ]; do
  sleep 0.1; n=$((n + 1))
done
kill "$(cat "$GA_WORK_DIR/child.pid")"
"""

# Host name → the GPUs its stand-in nvidia-smi reports (None: no nvidia-smi).
HOSTS = {"gpu-a": [FakeGpu()] * 4, "gpu-b": [FakeGpu("Tesla V100-SXM2-16GB", 16160)] * 2,
         "gpu-c": None}


class Clock:
    """A settable aware-UTC clock, starting now."""

    def __init__(self) -> None:
        now = datetime.now(UTC)  # whole milliseconds, as the ledger stores times
        self.now = now.replace(microsecond=now.microsecond // 1000 * 1000)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@pytest.fixture(scope="module")
def ssh_fleet(tmp_path_factory) -> Iterator[SshFleet]:
    folder = tmp_path_factory.mktemp("fleet")
    fleet = start_sshd_hosts(folder, HOSTS)
    agent = folder / "fake-agent"
    agent.write_text(FAKE_AGENT)
    agent.chmod(0o755)
    yield fleet
    fleet.stop()


_names = itertools.count()


@dataclass
class FleetEnv:
    """One test's fleet: ``config`` is the ``kind: fleet`` entry; :meth:`provider` builds
    adapters on it (several share one ledger, as replicas do)."""

    ssh: SshFleet
    redis: object
    name: str
    tag: str
    clock: Clock = field(default_factory=Clock)
    providers: list[FleetProvider] = field(default_factory=list)

    @property
    def fake_agent(self) -> str:
        return str(self.ssh.folder / "fake-agent")

    def config(self, **extra) -> dict:
        entry = self.ssh.config(self.fake_agent, name=self.name, terminate_grace_s=2)
        for host in entry["hosts"]:
            host["work_root"] = f"{host['work_root']}/{self.tag}"
        if "gpu-c" in [h["name"] for h in entry["hosts"]]:
            next(h for h in entry["hosts"] if h["name"] == "gpu-c")["gpus"] = [
                {"model": "RTX4090", "count": 1}]
        entry.update(extra)
        return entry

    def settings(self, **extra) -> FleetSettings:
        return from_config(self.config(**extra), self.ssh.folder, self.ssh.folder).settings

    def ledger(self) -> FleetLedger:
        return FleetLedger(self.redis, self.name)

    def provider(self, clock: Callable[[], datetime] | None = None, **extra) -> FleetProvider:
        adapter = FleetProvider(self.settings(**extra), self.ledger(), clock or self.clock)
        self.providers.append(adapter)
        return adapter

    def work_root(self, host: str) -> Path:
        return self.ssh.hosts[host].work_root / self.tag

    def allocation_log(self, host: str) -> list[list[str]]:
        path = self.work_root(host) / "allocations.log"
        return [line.split("\t") for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture
def fleet_env(ssh_fleet: SshFleet, redis_server) -> Iterator[FleetEnv]:
    env = FleetEnv(ssh_fleet, redis_server.client(), f"fleet{next(_names)}",
                   uuid.uuid4().hex[:8])
    yield env
    for host in ssh_fleet.hosts.values():  # the test's agents, whatever it left running
        root = str(host.work_root / env.tag)
        for proc in host.processes():
            try:
                if proc.cwd().startswith(root):
                    proc.kill()
            except psutil.NoSuchProcess:
                pass
    for adapter in env.providers:
        adapter.close()


def slot(adapter: FleetProvider, host: str, gpus: int = 1) -> Offer:
    """The listed offer of ``gpus`` GPUs on ``host``; ``AssertionError`` when none is."""
    offers = [o for o in adapter.list_offers()
              if o.instance_type.startswith(f"{host}.") and o.gpu_count == gpus]
    assert offers, f"no {gpus}-GPU slot listed on {host}"
    return offers[0]


def request(offer: Offer, token: str, **env: str) -> LaunchRequest:
    return LaunchRequest(offer=offer, client_token=token,
                         tags={"gpu-arbiter:owner": "test", "gpu-arbiter:job": token},
                         agent_env={"GA_AGENT_TOKEN": "sekrit-agent-token", **env})


def agent_env(env: FleetEnv, host: str, token: str) -> dict[str, str]:
    """The environment the stand-in agent of ``token`` saw (its ``agent-env.txt``)."""
    text = (env.work_root(host) / token / "work" / "agent-env.txt").read_text()
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def gpu_timeline_ok(lines: list[list[str]]) -> bool:
    """Whether an allocation log never has a GPU started twice without an end between."""
    holder: dict[str, str] = {}
    for _, event, instance, gpus, *_ in lines:
        for gpu in gpus.removeprefix("gpus=").split(","):
            if event == "start":
                if gpu in holder:
                    return False
                holder[gpu] = instance
            elif event == "end" and holder.get(gpu) == instance:
                del holder[gpu]
    return True
