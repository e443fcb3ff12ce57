"""Fixtures for the node-agent tests: a fake IMDSv2, a fake daemon, and ``launch_agent``,
which starts the REAL ``python -m scheduler.agent`` with a GA_* environment."""

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


@pytest.fixture
def launch_agent(
    tmp_path: Path, fake_daemon: FakeDaemon, fake_imds: FakeImds
) -> Iterator[Callable[..., AgentProcess]]:
    """``launch_agent(store_url, job_id, attempt, spec, flavor="aws", metadata_url=None,
    argv=None) -> AgentProcess`` (metadata at ``metadata_url``, default the fake IMDS; the
    agent's command line ``argv``, default ``python -m scheduler.agent``).

    The environment is this test's (so S3 credentials set by ``s3_store_url`` pass through)
    plus the GA_* variables; every agent gets a fresh work dir."""
    started: list[AgentProcess] = []

    def launch(store_url: str, job_id: str, attempt: int, spec: dict[str, Any],
               flavor: str = "aws", metadata_url: str | None = None,
               argv: list[str] | None = None) -> AgentProcess:
        work_dir = tmp_path / f"instance-{job_id}-{attempt}"
        work_dir.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith("GA_")}
        env.update(
            PYTHONPATH=str(REPO_ROOT),
            GA_API_URL=fake_daemon.base_url, GA_AGENT_TOKEN=fake_daemon.token,
            GA_INSTANCE_ID=f"i-{job_id}-{attempt}", GA_JOB_ID=job_id, GA_ATTEMPT=str(attempt),
            GA_STORE_URL=store_url, GA_METADATA_URL=metadata_url or fake_imds.base_url,
            GA_METADATA_FLAVOR=flavor, GA_WORK_DIR=str(work_dir), GA_JOB_SPEC=json.dumps(spec),
        )
        log_path = work_dir / "agent.log"
        with open(log_path, "wb") as log:
            popen = subprocess.Popen(argv or [sys.executable, "-m", "scheduler.agent"], cwd=work_dir,
                                     env=env, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        agent = AgentProcess(popen, work_dir, log_path)
        started.append(agent)
        return agent

    yield launch
    for agent in started:
        if agent.popen.poll() is None:
            agent.popen.kill()
            agent.popen.wait()
