"""Agent pieces without a subprocess: reports and their log lines, settings, job environment."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from core.models import JobSpec
from core.models.agents import AgentAction, AgentPhase
from scheduler.agent.job import job_environment
from scheduler.agent.reporter import LINES_PER_REPORT, Reporter
from scheduler.agent.settings import AgentSettings


class Daemon:
    """An httpx MockTransport daemon that can fail on demand."""

    def __init__(self) -> None:
        self.bodies: list[dict] = []
        self.fail_with: int | Exception | None = None
        self.answer = {"action": "continue"}

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if isinstance(self.fail_with, Exception):
            raise self.fail_with
        if self.fail_with:
            return httpx.Response(self.fail_with)
        assert request.headers["Authorization"] == "Bearer s3cret-token"
        assert request.url.path == "/v1/agent/i-1/report"
        self.bodies.append(json.loads(request.content))
        return httpx.Response(200, json=self.answer)


def make_reporter(daemon: Daemon) -> Reporter:
    return Reporter("http://daemon.test", "s3cret-token", "i-1", "job-1", 2,
                    transport=httpx.MockTransport(daemon))


def test_log_lines_survive_failed_heartbeats() -> None:
    daemon = Daemon()
    reporter = make_reporter(daemon)
    reporter.add_line("one")
    daemon.fail_with = httpx.ConnectError("refused")
    assert reporter.send(AgentPhase.RUNNING) is None  # dropped, not raised
    reporter.add_line("two")
    daemon.fail_with = 503
    assert reporter.send(AgentPhase.RUNNING) is None
    daemon.fail_with = None
    command = reporter.send(AgentPhase.RUNNING, checkpoint_id="c1")
    assert command is not None and command.action is AgentAction.CONTINUE
    assert daemon.bodies[-1]["log_lines"] == ["one", "two"]
    assert daemon.bodies[-1]["checkpoint_id"] == "c1" and daemon.bodies[-1]["attempt"] == 2
    reporter.send(AgentPhase.RUNNING)
    assert daemon.bodies[-1]["log_lines"] == []


def test_reports_carry_at_most_500_lines_and_final_flushes_the_rest() -> None:
    daemon = Daemon()
    reporter = make_reporter(daemon)
    for i in range(1200):
        reporter.add_line(f"line {i}")
    # A heartbeat after an outage empties the spool in as many reports as it takes.
    reporter.send(AgentPhase.RUNNING)
    assert [len(b["log_lines"]) for b in daemon.bodies] == [LINES_PER_REPORT] * 2 + [200]
    assert [b["log_seq"] for b in daemon.bodies] == [0, 500, 1000]
    for i in range(1200, 2400):
        reporter.add_line(f"line {i}")
    daemon.answer = {"action": "stop", "reason": "cancelled"}
    command = reporter.send_final(AgentPhase.SUCCEEDED, AgentPhase.RUNNING, exit_code=0)
    assert command is not None and command.action is AgentAction.STOP
    assert [b["phase"] for b in daemon.bodies[3:]] == ["running", "running", "succeeded"]
    sent = [line for b in daemon.bodies for line in b["log_lines"]]
    assert sent == [f"line {i}" for i in range(2400)]
    assert daemon.bodies[-1]["exit_code"] == 0 and daemon.bodies[4]["exit_code"] is None


def test_a_final_report_waits_for_the_whole_spool_through_an_outage() -> None:
    daemon = Daemon()
    reporter = make_reporter(daemon)
    for i in range(1200):
        reporter.add_line(f"line {i}")
    calls = []

    def daemon_back() -> None:  # between retries: the daemon answers again after two tries
        calls.append(1)
        if len(calls) == 2:
            daemon.fail_with = None

    daemon.fail_with = httpx.ConnectError("refused")
    command = reporter.send_final(AgentPhase.CHECKPOINTED, AgentPhase.CHECKPOINTING, daemon_back)
    assert command is not None
    assert [b["phase"] for b in daemon.bodies] == ["checkpointing"] * 2 + ["checkpointed"]
    assert [line for b in daemon.bodies for line in b["log_lines"]] == [
        f"line {i}" for i in range(1200)]


def test_final_report_gives_up_at_once_when_refused() -> None:
    daemon = Daemon()
    daemon.fail_with = 403
    assert make_reporter(daemon).send_final(AgentPhase.FAILED, AgentPhase.RUNNING) is None


def test_job_environment_hides_agent_variables(tmp_path: Path) -> None:
    spec = JobSpec(name="j", command="true", env={"LR": "0.1"})
    base = {"PATH": "/bin", "GA_AGENT_TOKEN": "secret", "GA_STORE_URL": "s3://b", "HOME": "/h"}
    env = job_environment(base, spec, tmp_path / "ck", resumed=True, job_id="job-1")
    assert env == {"PATH": "/bin", "HOME": "/h", "LR": "0.1", "SCHED_CHECKPOINT_DIR": str(tmp_path / "ck"),
                   "SCHED_RESUME": "1", "SCHED_JOB_ID": "job-1"}
    assert job_environment(base, spec, Path("rel"), resumed=False, job_id="j")["SCHED_RESUME"] == "0"


def test_settings_from_env(tmp_path: Path) -> None:
    spec = {"name": "j", "command": "python train.py", "checkpoint": {"dir": "ck"}}
    env = {"GA_API_URL": "http://d:1/", "GA_AGENT_TOKEN": "tok-123", "GA_INSTANCE_ID": "i-1",
           "GA_JOB_ID": "job-1", "GA_ATTEMPT": "3", "GA_STORE_URL": "/tmp/store",
           "GA_JOB_SPEC": json.dumps(spec), "GA_METADATA_FLAVOR": "aws",
           "GA_WORK_DIR": str(tmp_path)}
    settings = AgentSettings.from_env(env)
    assert settings.api_url == "http://d:1" and settings.attempt == 3
    assert settings.checkpoint_dir == tmp_path / "job" / "ck"
    assert settings.log_path == tmp_path / "job.log"
    assert "tok-123" not in repr(settings)


def test_settings_errors_name_every_problem_but_not_the_token() -> None:
    env = {"GA_AGENT_TOKEN": "tok-123", "GA_ATTEMPT": "zero", "GA_METADATA_FLAVOR": "vastai",
           "GA_JOB_SPEC": '{"name": "j"}'}
    with pytest.raises(ValueError) as info:
        AgentSettings.from_env(env)
    message = str(info.value)
    for part in ("GA_API_URL is not set", "GA_ATTEMPT must be an integer", "GA_METADATA_FLAVOR",
                 "GA_JOB_SPEC is not a valid job spec", "command"):
        assert part in message
    assert "tok-123" not in message
