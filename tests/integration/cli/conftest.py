"""The daemon's API app served on a real port over a real Redis, and a GA_HOME whose
daemon.json and api-token point the CLI at it (the CLI runs as a real process or through
typer's CliRunner)."""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

from scheduler.api.app import create_app
from scheduler.checkpoints.local import LocalObjectStore
from core.models import Job, JobSpec, JobState, utcnow
from scheduler.store import Store
from scheduler.store.agents import AgentTokens
from tests.fixtures.served_api import serve_api

TOKEN = "user-token"


@dataclass
class Served:
    store: Store
    home: Path
    tokens: AgentTokens
    url: str


@pytest.fixture
def served(redis_client, tmp_path, monkeypatch) -> Served:
    store = Store.over(redis_client)
    tokens = AgentTokens(b"agent-secret")
    app = create_app(store, LocalObjectStore(tmp_path / "objects"), tokens, TOKEN)
    with serve_api(app, tmp_path / "home", TOKEN, monkeypatch) as url:
        yield Served(store, tmp_path / "home", tokens, url)


def new_job(store: Store, name: str = "train", **spec) -> Job:
    now = utcnow()
    job = Job(id=f"{name}-0001", spec=JobSpec.model_validate(
        {"name": name, "command": "python train.py", **spec}), created_at=now, updated_at=now)
    job.record(JobState.PENDING, "submitted", at=now)
    return store.jobs.create(job)


def line_reader(stream) -> queue.Queue:
    """Lines of ``stream`` as they come, read by a thread (a test never blocks forever)."""
    lines: queue.Queue = queue.Queue()

    def pump() -> None:
        for line in stream:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return lines
