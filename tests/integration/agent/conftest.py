"""Fixtures for the node-agent tests: a fake IMDSv2, a fake daemon, and ``launch_agent``,
which starts the REAL ``python -m scheduler.agent`` with a GA_* environment (built by
:func:`agent_env` and started by :func:`start_agent`, which other agent tests use too)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.agent.fakes import REPO_ROOT, AgentProcess, FakeDaemon, FakeImds
from tests.integration.agent.metadata_fakes import FakeGcpMetadata, FakeScheduledEvents


@pytest.fixture
def fake_imds() -> Iterator[FakeImds]:
    server = FakeImds()
    yield server
    server.stop()


@pytest.fixture
def fake_scheduled_events() -> Iterator[FakeScheduledEvents]:
    server = FakeScheduledEvents()
    yield server
    server.stop()


@pytest.fixture
def fake_gcp_metadata() -> Iterator[FakeGcpMetadata]:
    server = FakeGcpMetadata()
    yield server
    server.stop()


@pytest.fixture
def fake_daemon() -> Iterator[FakeDaemon]:
    server = FakeDaemon()
    yield server
    server.stop()


def agent_env(work_dir: Path, api_url: str, token: str, *, job_id: str, attempt: int,
              instance_id: str, store_url: str, spec: dict[str, Any] | str,
              **extra: str) -> dict[str, str]:
    """The environment a node's agent starts with: this process's (so S3 credentials set by
    ``s3_store_url`` pass through) without its GA_* variables, plus the GA_* of one instance
    (no metadata service unless ``extra`` names one), then ``extra`` over all. ``spec`` is
    the job spec as a dict or as its JSON already."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GA_")}
    env.update(
        PYTHONPATH=str(REPO_ROOT), GA_API_URL=api_url, GA_AGENT_TOKEN=token,
        GA_INSTANCE_ID=instance_id, GA_JOB_ID=job_id, GA_ATTEMPT=str(attempt),
        GA_STORE_URL=store_url, GA_METADATA_FLAVOR="none", GA_WORK_DIR=str(work_dir),
        GA_JOB_SPEC=spec if isinstance(spec, str) else json.dumps(spec),
    )
    env.update(extra)
    return env


def start_agent(work_dir: Path, env: dict[str, str],
                argv: list[str] | None = None) -> AgentProcess:
    """Start ``argv`` (default ``python -m scheduler.agent``) in ``work_dir`` (made here; it
    must not exist yet) with ``env``, in its own session, its output in ``agent.log`` there."""
    work_dir.mkdir()
    log_path = work_dir / "agent.log"
    with open(log_path, "wb") as log:
        popen = subprocess.Popen(argv or [sys.executable, "-m", "scheduler.agent"], cwd=work_dir,
                                 env=env, stdout=log, stderr=subprocess.STDOUT,
                                 start_new_session=True)
    return AgentProcess(popen, work_dir, log_path)


def kill_agents(agents: list[AgentProcess]) -> None:
    """Kill those of ``agents`` still running (a test's teardown: none may outlive it)."""
    for agent in agents:
        if agent.popen.poll() is None:
            agent.popen.kill()
            agent.popen.wait()


@pytest.fixture
def launch_agent(
    tmp_path: Path, fake_daemon: FakeDaemon, fake_imds: FakeImds
) -> Iterator[Callable[..., AgentProcess]]:
    """``launch_agent(store_url, job_id, attempt, spec, flavor="aws", metadata_url=None,
    argv=None) -> AgentProcess`` (metadata at ``metadata_url``, default the fake IMDS; the
    agent's command line ``argv``, default ``python -m scheduler.agent``), with the
    environment of :func:`agent_env`; every agent gets a fresh work dir."""
    started: list[AgentProcess] = []

    def launch(store_url: str, job_id: str, attempt: int, spec: dict[str, Any],
               flavor: str = "aws", metadata_url: str | None = None,
               argv: list[str] | None = None) -> AgentProcess:
        work_dir = tmp_path / f"instance-{job_id}-{attempt}"
        env = agent_env(work_dir, fake_daemon.base_url, fake_daemon.token, job_id=job_id,
                        attempt=attempt, instance_id=f"i-{job_id}-{attempt}",
                        store_url=store_url, spec=spec, GA_METADATA_FLAVOR=flavor,
                        GA_METADATA_URL=metadata_url or fake_imds.base_url)
        agent = start_agent(work_dir, env, argv)
        started.append(agent)
        return agent

    yield launch
    kill_agents(started)
