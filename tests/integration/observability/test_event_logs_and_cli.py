"""Job timeline events in the daemon log (INFO, once, with job extras, JSON formatter) and
what ``schedctl`` says about them: an unknown ``--job``, event lines that do not repeat the
kind, a token that does not match, a spec with ``.nan`` (real uvicorn server, real Redis)."""
# ruff: noqa: F811 (pytest fixtures imported from a sibling module)

from __future__ import annotations

import json
import logging

import pytest
from typer.testing import CliRunner

from scheduler.cli.events import format_event
from scheduler.cli.main import app as cli
from core.models import JobState, PlacementEnd
from scheduler.observability.logs import json_formatter
from scheduler.store import StaleJobError
from tests.integration.observability.conftest import end, place, submit
from tests.integration.observability.test_events import served  # noqa: F401


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.setFormatter(json_formatter())
        self.lines: list[dict] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(json.loads(self.format(record)))


@pytest.fixture
def event_log():
    logger = logging.getLogger("scheduler.events")
    handler, level = _Lines(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield handler.lines
    logger.removeHandler(handler)
    logger.setLevel(level)


def test_each_committed_event_is_logged_once_at_info_with_job_extras(api, event_log):
    job_id = submit(api)
    place(api.store, job_id, 1.0, provider="aws")
    end(api.store, job_id, PlacementEnd.PREEMPTED, JobState.MIGRATING, "preempted")
    stale = api.store.jobs.get(job_id)
    stale.version -= 1
    stale.record(JobState.FAILED, "never written")
    with pytest.raises(StaleJobError):
        api.store.jobs.save(stale)
    assert [line["message"].split(": ", 1)[1] for line in event_log] == [
        "submitted", "running", "preempted"]
    submitted, running, preempted = event_log
    assert {line["level"] for line in event_log} == {"INFO"}
    assert submitted["job_id"] == job_id and submitted["state"] == "pending"
    assert "provider" not in submitted
    assert running["attempt"] == 1 and running["state"] == "running"
    assert running["provider"] == "aws" and running["offer"].startswith("aws/")
    assert preempted["state"] == "migrating" and preempted["provider"] == "aws"


def test_events_of_an_unknown_job_say_so_and_fail(served):
    result = CliRunner().invoke(cli, ["events", "--home", str(served), "--job", "nosuch"])
    assert result.exit_code != 0
    assert "no job 'nosuch'" in result.output


def test_event_lines_do_not_repeat_the_kind():
    from rich.text import Text

    base = {"at": "2026-11-30T10:00:00+00:00", "job_id": "j", "attempt": 1}
    budget = Text.from_markup(format_event({**base, "state": "checkpointing", "kind": "budget",
                           "message": "budget exhausted (job budget at 100 %)"})).plain
    assert "budget budget" not in budget and "checkpointing budget exhausted" in budget
    moved = Text.from_markup(format_event({**base, "state": "migrating", "kind": "migration",
                                           "message": "moving to a cheaper offer"})).plain
    assert "migrating [migration] moving" in moved


def test_a_wrong_token_says_where_the_cli_reads_it(served, monkeypatch):
    (served / "api-token").write_text("not-the-daemons")
    result = CliRunner().invoke(cli, ["events", "--home", str(served)])
    assert result.exit_code == 2
    text = " ".join(result.output.split())
    assert f"{served}/api-token" in text and "GA_API_TOKEN" in text
    assert "use a valid token" in text
    monkeypatch.setenv("GA_API_TOKEN", "also-wrong")
    result = CliRunner().invoke(cli, ["events", "--home", str(served)])
    assert "GA_API_TOKEN (set in the environment)" in " ".join(result.output.split())


def test_submit_of_a_nan_budget_is_refused_naming_the_field(served, tmp_path):
    spec = tmp_path / "job.yaml"
    spec.write_text("name: train\ncommand: python train.py\nbudget_usd: .nan\n")
    result = CliRunner().invoke(cli, ["submit", str(spec), "--home", str(served)])
    assert result.exit_code == 2, result.output
    assert "budget_usd" in result.output and "finite" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
