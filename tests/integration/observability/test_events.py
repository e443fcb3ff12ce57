"""The job event stream: written with job writes, read through ``GET /v1/events`` and
``schedctl events`` (a real uvicorn server over a real Redis)."""

from __future__ import annotations

import json
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from typer.testing import CliRunner

from scheduler.cli.main import app as cli
from core.models import JobState, PlacementEnd
from scheduler.store import StaleJobError
from tests.fixtures.served_api import serve_api
from tests.integration.observability.conftest import TOKEN, end, place, submit


def test_every_committed_timeline_event_is_in_the_stream_once(api):
    job_id = submit(api)
    place(api.store, job_id, 1.0)
    end(api.store, job_id, PlacementEnd.PREEMPTED, JobState.MIGRATING, "preempted")
    page = api.client.get("/v1/events", params={"limit": 100}).json()
    assert [e["message"] for e in page["events"]] == ["submitted", "running", "preempted"]
    first = page["events"][1]
    assert first["job_id"] == job_id and first["state"] == "running" and first["attempt"] == 1
    assert first["offer"].startswith("aws/") and first["price_usd_per_hour"] == 1.0
    assert page["next"] == page["events"][-1]["id"]
    # A write that does not commit (stale version) publishes nothing.
    stale = api.store.jobs.get(job_id)
    stale.version -= 1
    stale.record(JobState.FAILED, "never written")
    with pytest.raises(StaleJobError):
        api.store.jobs.save(stale)
    assert api.client.get("/v1/events", params={"after": page["next"]}).json()["events"] == []


def test_cursor_limit_job_filter_and_kind(api):
    a, b = submit(api, "a"), submit(api, "b")
    job = api.store.jobs.get(a)
    job.record(job.state, "budget 80% reached", kind="budget")
    api.store.jobs.save(job)
    recent = api.client.get("/v1/events", params={"limit": 2}).json()["events"]
    assert [(e["job_id"], e["message"]) for e in recent] == [(b, "submitted"),
                                                             (a, "budget 80% reached")]
    assert recent[1]["kind"] == "budget"
    only_a = api.client.get("/v1/events", params={"job": a}).json()["events"]
    assert [e["message"] for e in only_a] == ["submitted", "budget 80% reached"]
    page = api.client.get("/v1/events", params={"after": "0-0", "limit": 1}).json()
    assert [e["job_id"] for e in page["events"]] == [a]
    rest = api.client.get("/v1/events", params={"after": page["next"], "job": a}).json()
    assert [e["message"] for e in rest["events"]] == ["budget 80% reached"]
    unknown = api.client.get("/v1/events", params={"job": "nope"})
    assert unknown.status_code == 404 and unknown.json()["detail"] == "no job 'nope'"
    last = f"{2**64 - 1}-{2**64 - 1}"
    assert api.client.get("/v1/events", params={"after": last}).json() == {"events": [],
                                                                          "next": last}


@pytest.mark.parametrize("params", [{"after": "yesterday"}, {"limit": 0}, {"limit": 5000},
                                    {"wait_s": 6}, {"after": "1-2-3"},
                                    {"after": "99999999999999999999-0"}])
def test_bad_parameters_are_refused_by_name(api, params):
    response = api.client.get("/v1/events", params=params)
    assert response.status_code == 422
    assert next(iter(params)) in response.text


def test_events_need_the_user_token(api):
    assert api.client.get("/v1/events", headers={"Authorization": "Bearer x"}).status_code == 401


def test_waiting_request_returns_an_event_written_meanwhile(api):
    job_id = submit(api)
    cursor = api.client.get("/v1/events").json()["next"]
    threading.Timer(0.3, place, args=(api.store, job_id, 1.0)).start()
    page = api.client.get("/v1/events", params={"after": cursor, "wait_s": 5}).json()
    assert [e["message"] for e in page["events"]] == ["running"]


@pytest.fixture
def served(api, tmp_path, monkeypatch):
    """The app on a real port, and a GA_HOME whose daemon.json points the CLI at it."""
    with serve_api(api.app, tmp_path / "home", TOKEN, monkeypatch):
        yield tmp_path / "home"


def test_cli_prints_recent_events_as_lines_and_json(api, served):
    a, b = submit(api, "a"), submit(api, "b")
    place(api.store, a, 0.5)
    runner = CliRunner()
    result = runner.invoke(cli, ["events", "--home", str(served)])
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 3 and a in lines[0] and b in lines[1]
    assert "running" in lines[2] and "$0.5000/h" in lines[2]
    result = runner.invoke(cli, ["events", "--home", str(served), "--json", "--job", a])
    assert result.exit_code == 0, result.output
    parsed = [json.loads(line) for line in result.output.strip().splitlines()]
    assert [(e["job_id"], e["state"]) for e in parsed] == [(a, "pending"), (a, "running")]


def test_cli_follow_streams_new_events(api, served):
    """``--follow`` in a real process: it prints events written after it started."""
    import os
    import subprocess
    import sys

    job_id = submit(api)
    env = {**os.environ, "GA_HOME": str(served), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "scheduler.cli.main", "events", "-f",
                             "--json"], env=env, stdout=subprocess.PIPE, text=True)
    lines = line_reader(proc.stdout)
    try:
        assert json.loads(lines.get(timeout=60))["message"] == "submitted"
        place(api.store, job_id, 1.0)
        assert json.loads(lines.get(timeout=60))["message"] == "running"
    finally:
        proc.terminate()
        proc.wait(10)


def line_reader(stream) -> queue.Queue:
    """Lines of ``stream`` as they come, read by a thread (a test never blocks forever)."""
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in stream], daemon=True).start()
    return lines


def test_cli_without_a_daemon_says_so(tmp_path):
    result = CliRunner().invoke(cli, ["events", "--home", str(tmp_path)])
    assert result.exit_code == 2
    assert "no daemon" in result.output


def test_long_polls_do_not_hold_up_other_requests(api, served):
    # More waiting requests than the API's worker threads (~40): the health check must still
    # answer while they all wait (a sync endpoint answered it only after the waits ended).
    url = json.loads((served / "daemon.json").read_text())["api_url"]
    future_id = f"{(time.time() + 3600) * 1000:.0f}-0"
    headers = {"Authorization": f"Bearer {TOKEN}"}

    def poll():
        return httpx.get(f"{url}/v1/events", params={"after": future_id, "wait_s": 5},
                         headers=headers, timeout=30)

    with ThreadPoolExecutor(60) as pool:
        polls = [pool.submit(poll) for _ in range(60)]
        time.sleep(0.5)  # let them all reach the server and start waiting
        health = httpx.get(f"{url}/v1/health", timeout=30)
        waiting = sum(not p.done() for p in polls)
        answers = [p.result() for p in polls]
    assert health.status_code == 200
    assert waiting == len(polls), "the health check waited for long-polls to end"
    assert all(a.status_code == 200 and a.json() == {"events": [], "next": future_id}
               for a in answers)
