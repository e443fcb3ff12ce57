"""Crash repair in the cloud's instance handling (:mod:`providers.replay.instances`),
in-process: a cloud that died between writing an instance record and starting (or recording)
its agent is repaired by a retried launch."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from providers.replay import procs
from providers.replay.instances import ReplayCloud
from providers.replay.market import load_market
from core.models import InstanceState
from tests.fixtures.waiting import wait_until

STANDIN_AGENT = Path(__file__).with_name("standin_agent.py")
BODY = {"offer": {"provider": "replay", "region": "r1", "zone": "r1a", "instance_type": "steady",
                  "market": "spot"},
        "client_token": "job-9-1", "tags": {"t": "1"}, "agent_env": {}}


class Crash(Exception):
    pass


@pytest.fixture
def clouds() -> Iterator[list[ReplayCloud]]:
    """In-process clouds over one state dir; every agent they started is killed afterwards."""
    made: list[ReplayCloud] = []
    yield made
    for cloud in made:
        for rec in cloud.store.data.instances.values():
            procs.signal_group(rec.pid, signal.SIGKILL)


def _cloud(market_file: Path, state_dir: Path, clouds: list[ReplayCloud]) -> ReplayCloud:
    cloud = ReplayCloud(load_market(market_file), state_dir,
                        [sys.executable, str(STANDIN_AGENT)])
    cloud.base_url = "http://127.0.0.1:9"
    clouds.append(cloud)
    return cloud


def _starts(work_dir: str, expected: int) -> list[str]:
    log = Path(work_dir) / "starts.log"

    def started() -> list[str]:
        lines = log.read_text().split() if log.exists() else []
        return lines if len(lines) >= expected else []

    return wait_until(started, 10, f"{expected} agent start(s) in {log}")


def test_retry_starts_agent_never_started(market_file: Path, tmp_path: Path,
                                          clouds: list[ReplayCloud],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    state_dir = tmp_path / "state"
    first = _cloud(market_file, state_dir, clouds)

    def crash(*_args: object, **_kwargs: object) -> None:
        raise Crash("the cloud died before starting the agent")

    monkeypatch.setattr(procs, "spawn_agent", crash)
    with pytest.raises(Crash):
        first.launch(dict(BODY))
    monkeypatch.undo()
    [rec] = first.store.data.instances.values()
    assert rec.state is InstanceState.PENDING and rec.pid is None  # saved before the start

    second = _cloud(market_file, state_dir, clouds)
    status, view = second.launch(dict(BODY))
    assert status == 200 and view["id"] == rec.id and view["state"] == "running"
    assert len(_starts(view["work_dir"], 1)) == 1 and view["pid_alive"]


def test_retry_adopts_agent_started_but_not_recorded(market_file: Path, tmp_path: Path,
                                                     clouds: list[ReplayCloud]) -> None:
    state_dir = tmp_path / "state"
    first = _cloud(market_file, state_dir, clouds)
    _, view = first.launch(dict(BODY))
    [pid] = _starts(view["work_dir"], 1)
    # lose the pid as if the cloud died right after starting the process
    rec = first.store.data.instances[view["id"]]
    rec.pid, rec.pid_marker, rec.state = None, None, InstanceState.PENDING
    first.store.save()

    second = _cloud(market_file, state_dir, clouds)
    status, again = second.launch(dict(BODY))
    assert status == 200 and again["pid"] == int(pid) and again["pid_alive"]
    time.sleep(0.3)
    assert _starts(view["work_dir"], 1) == [pid]  # adopted, not started twice


def test_group_signals_skip_a_reused_pid() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                             start_new_session=True)
    try:
        marker = procs.start_marker(child.pid)
        assert marker is not None and procs.group_alive(child.pid, marker)
        # a record whose process started at another time is not this process: leave it alone
        assert not procs.group_alive(child.pid, "1")
        procs.signal_group(child.pid, signal.SIGKILL, "1")
        time.sleep(0.2)
        assert child.poll() is None
        procs.signal_group(child.pid, signal.SIGKILL, marker)
        assert child.wait(timeout=5) == -signal.SIGKILL
        assert not procs.is_alive(child.pid, marker)
    finally:
        child.kill()
        child.wait()
