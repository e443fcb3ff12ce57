"""What agent reports may write (only a live attempt's, each log line capped in bytes), and
query values or Redis refusals that must not look like a Redis outage. Real app, real Redis."""

from __future__ import annotations

from datetime import timedelta

import pytest
import redis
from fastapi.testclient import TestClient

from scheduler.api.app import create_app
from scheduler.checkpoints.local import LocalObjectStore
from core.models import JobState, PlacementEnd, utcnow
from core.models.placements import Placement
from scheduler.store import Store
from scheduler.store.agents import AgentTokens
from scheduler.store.jobs import JOB_LOG_MAX_LINE_BYTES, LOG_LINE_CUT_MARKER
from tests.factories.offers import offer

TOKEN = "user-token"
SECRET = b"bounds-secret"
SPEC = {"name": "train", "command": "python train.py", "resources": {"gpu_count": 1}}


@pytest.fixture
def api(redis_client, tmp_path):
    store = Store.over(redis_client)
    app = create_app(store, LocalObjectStore(tmp_path / "objects"), AgentTokens(SECRET), TOKEN)
    client = TestClient(app, headers={"Authorization": f"Bearer {TOKEN}"})
    job_id = client.post("/v1/jobs", json={"spec": SPEC}).json()["id"]
    return client, store, app, job_id


def _place(store: Store, job_id: str, attempt: int) -> None:
    job = store.jobs.get(job_id)
    now = utcnow()
    chosen = offer()
    job.attempt = attempt
    job.placement = Placement(attempt=attempt, offer=chosen, client_token=f"t-{attempt}",
                              decided_at=now, instance_id=f"i-{attempt}",
                              started_at=now - timedelta(minutes=5))
    job.record(JobState.RUNNING, "running", offer=chosen)
    store.jobs.save(job)


def _report(client: TestClient, job_id: str, attempt: int, lines: list[str]) -> dict:
    body = {"job_id": job_id, "attempt": attempt, "phase": "running",
            "at": "2026-11-30T12:00:00Z", "log_lines": lines}
    token = AgentTokens(SECRET).issue(job_id, attempt)
    answer = client.post(f"/v1/agent/i-{attempt}/report", json=body,
                         headers={"Authorization": f"Bearer {token}"})
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_a_replaced_attempt_is_told_to_stop_and_writes_nothing(api):
    client, store, _, job_id = api
    _place(store, job_id, 2)
    assert _report(client, job_id, 1, ["old attempt"])["action"] == "stop"
    assert store.agents.last_report(job_id, 1) is None
    assert store.jobs.logs(job_id) == []
    # The current attempt is written as before.
    assert _report(client, job_id, 2, ["current attempt"])["action"] == "continue"
    assert store.agents.last_report(job_id, 2) is not None
    assert store.jobs.logs(job_id) == ["current attempt"]


def test_a_finished_job_is_told_to_stop_and_writes_nothing(api):
    client, store, _, job_id = api
    _place(store, job_id, 1)
    _report(client, job_id, 1, ["before the end"])
    job = store.jobs.get(job_id)
    job.placement.ended_at, job.placement.end_reason = utcnow(), PlacementEnd.SUCCEEDED
    job.record(JobState.SUCCEEDED, "done", offer=job.placement.offer)
    store.jobs.save(job)
    before = store.agents.last_report(job_id, 1)
    for _ in range(3):
        assert _report(client, job_id, 1, ["after the end"])["action"] == "stop"
    assert store.jobs.logs(job_id) == ["before the end"]
    assert store.agents.last_report(job_id, 1) == before


def test_each_stored_log_line_is_capped_in_bytes(api):
    client, store, _, job_id = api
    _place(store, job_id, 1)
    huge = "x" * 1_900_000
    wide = "é" * 5000  # two bytes each: the cut must fall on a character boundary
    _report(client, job_id, 1, [huge, wide, "short"])
    stored = store.jobs.logs(job_id)
    assert [len(line.encode()) for line in stored[:2]] == [JOB_LOG_MAX_LINE_BYTES] * 2
    assert stored[0].endswith(LOG_LINE_CUT_MARKER) and stored[0].startswith("xxxx")
    assert stored[1].endswith(LOG_LINE_CUT_MARKER) and set(stored[1][:-len(LOG_LINE_CUT_MARKER)]) == {"é"}
    assert stored[2] == "short"


@pytest.mark.parametrize("start", ["9223372036854775808", "9223372036854775807", "1000000001"])
def test_a_log_start_beyond_any_job_is_a_422_not_a_redis_outage(api, start):
    client, _, _, job_id = api
    answer = client.get(f"/v1/jobs/{job_id}/logs", params={"start": start})
    assert answer.status_code == 422, answer.text
    assert "start" in answer.text


def test_the_largest_allowed_start_reads_nothing(api):
    client, _, _, job_id = api
    answer = client.get(f"/v1/jobs/{job_id}/logs", params={"start": 10**9})
    assert answer.status_code == 200, answer.text
    assert answer.json()["lines"] == []


def test_a_refused_redis_command_is_a_500_and_an_outage_a_503(api, caplog):
    client, store, app, _ = api

    def refused():
        store.redis.execute_command("LRANGE", "ga:nothing", "9223372036854775808", "-1")

    def down():
        raise redis.ConnectionError("connection refused")

    app.add_api_route("/test/refused", refused)
    app.add_api_route("/test/down", down)
    with caplog.at_level("ERROR", logger="scheduler.api.errors"):
        answer = client.get("/test/refused")
    assert answer.status_code == 500, answer.text
    assert "Retry-After" not in answer.headers
    assert any(r.exc_info for r in caplog.records), caplog.text  # logged with its traceback
    answer = client.get("/test/down")
    assert answer.status_code == 503 and answer.headers["Retry-After"] == "2"


@pytest.mark.parametrize("field,value", [
    ("checkpoint_id", "c" * 1_900_000),
    ("checkpoint_id", "../../other-job/checkpoints/x"),
    ("restored_from", "r" * 129),
    ("notice", {"action": "a" * 1_000_000, "action_at": "2026-11-30T12:02:00Z"}),
], ids=["long checkpoint id", "checkpoint id with slashes", "long restored_from", "long notice"])
def test_report_ids_are_bounded_and_nothing_is_written(api, field, value):
    """A new checkpoint id is written into the job's timeline and its stored report: an
    agent token cannot make either grow by megabytes per heartbeat."""
    client, store, _, job_id = api
    _place(store, job_id, 1)
    before = store.jobs.get(job_id)
    body = {"job_id": job_id, "attempt": 1, "phase": "running", "at": "2026-11-30T12:00:00Z",
            field: value}
    answer = client.post("/v1/agent/i-1/report", json=body,
                         headers={"Authorization": f"Bearer {AgentTokens(SECRET).issue(job_id, 1)}"})
    assert answer.status_code == 422, answer.text[:300]
    assert field in answer.text and len(answer.content) < 2000
    assert store.agents.last_report(job_id, 1) is None
    assert store.jobs.get(job_id).events == before.events


def test_a_checkpoint_id_as_agents_make_them_is_accepted(api):
    client, store, _, job_id = api
    _place(store, job_id, 1)
    body = {"job_id": job_id, "attempt": 1, "phase": "running", "at": "2026-11-30T12:00:00Z",
            "checkpoint_id": "1764504000000-a1", "restored_from": "1764500000000-a0"}
    answer = client.post("/v1/agent/i-1/report", json=body,
                         headers={"Authorization": f"Bearer {AgentTokens(SECRET).issue(job_id, 1)}"})
    assert answer.status_code == 200, answer.text
    assert store.agents.last_report(job_id, 1).checkpoint_id == "1764504000000-a1"
