"""The REAL agent loop (in-process) with a notice watcher that fails: the job runs on to its
end and succeeds, with its checkpoint committed, instead of being killed unsupervised."""

from __future__ import annotations

import json
import logging
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.models import PreemptionNotice
from scheduler.agent.runner import Agent
from scheduler.agent.settings import AgentSettings
from scheduler.checkpoints import latest_checkpoint_id, open_store
from tests.integration.agent.fakes import FakeDaemon, job_spec, with_job_bundles


class FailingWatcher:
    """A notice source with a bug: every ``poll`` raises (as a hostile Scheduled Events
    document once made the Azure watcher do)."""

    def __init__(self) -> None:
        self.polls = 0

    def poll(self) -> PreemptionNotice | None:
        self.polls += 1
        raise RecursionError("maximum recursion depth exceeded while decoding a JSON array")

    def acknowledge(self) -> bool:
        return False

    def close(self) -> None:
        pass


@pytest.fixture
def own_signal_handlers() -> Iterator[None]:
    """The agent installs SIGTERM/SIGINT handlers; give pytest its own back afterwards."""
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def test_a_failing_watcher_is_no_notice_and_the_job_succeeds(
        tmp_path: Path, fake_daemon: FakeDaemon, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture, own_signal_handlers: None) -> None:
    store_url = with_job_bundles((tmp_path / "store").as_uri(), "job-w")
    work_dir = tmp_path / "instance"
    work_dir.mkdir()
    monkeypatch.chdir(work_dir)
    settings = AgentSettings.from_env({
        "GA_API_URL": fake_daemon.base_url, "GA_AGENT_TOKEN": fake_daemon.token,
        "GA_INSTANCE_ID": "i-w", "GA_JOB_ID": "job-w", "GA_ATTEMPT": "1",
        "GA_STORE_URL": store_url, "GA_METADATA_FLAVOR": "none", "GA_WORK_DIR": str(work_dir),
        "GA_JOB_SPEC": json.dumps(job_spec(JOB_STEPS="50")),  # 2.5 s: several loop ticks
    })
    watcher = FailingWatcher()
    caplog.set_level(logging.WARNING, "scheduler.agent.runner")

    assert Agent(settings, notices=watcher).run() == 0

    assert watcher.polls >= 2
    final = fake_daemon.last("succeeded")
    assert final["exit_code"] == 0 and final.get("notice") is None
    assert final["checkpoint_id"] == latest_checkpoint_id(open_store(store_url), "job-w")
    failures = [r for r in caplog.records if "watcher failed" in r.getMessage()]
    assert len(failures) == 1 and failures[0].exc_info is not None
