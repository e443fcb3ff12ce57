"""The agent route fuzzed with agent tokens (its body is read by hand, so the OpenAPI spec does
not describe it and schemathesis cannot generate it): random and near-valid reports never get
a 5xx, and a token for job A is refused on job B, for reporting and for reading."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.api.app import create_app
from scheduler.checkpoints.local import LocalObjectStore
from scheduler.store import Store
from scheduler.store.agents import AgentTokens

TOKEN = "fuzz-user-token"
SECRET = b"fuzz-agent-secret"
GOOD = {"name": "train", "command": "python train.py",
        "resources": {"gpu_count": 1, "min_vram_gib": 16}}
EXAMPLES = 150

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=3),
    max_leaves=8)
# Near-valid values per field, mixed with any JSON value.
FIELDS = {
    "job_id": st.sampled_from(["JOB_A", "JOB_B", "nope"]) | st.text(max_size=80),
    "attempt": st.integers(min_value=-2, max_value=3) | st.integers(),
    "phase": st.sampled_from(["starting", "restoring", "running", "checkpointing",
                              "checkpointed", "succeeded", "failed", "bogus"]),
    "at": st.sampled_from(["2026-11-30T12:00:00Z", "2026-11-30T12:00:00", "yesterday"]),
    "exit_code": st.none() | st.integers(),
    "checkpoint_id": st.none() | st.text(max_size=60),
    "restored_from": st.none() | st.text(max_size=60),
    "notice": st.none() | st.fixed_dictionaries({
        "action": st.sampled_from(["terminate", "stop"]) | st.text(max_size=10),
        "received_at": st.sampled_from(["2026-11-30T12:00:00Z", "x"]),
        "action_at": st.sampled_from(["2026-11-30T12:02:00Z", 5])}),
    "log_lines": st.lists(st.text(max_size=200), max_size=20),
    "message": st.none() | st.text(max_size=300),
    "received_at": st.none() | st.sampled_from(["2030-01-01T00:00:00Z"]),
}
reports = st.fixed_dictionaries({}, optional={
    name: strategy | json_values for name, strategy in FIELDS.items()})


@pytest.fixture
def api(redis_client, tmp_path):
    app = create_app(Store.over(redis_client), LocalObjectStore(tmp_path / "objects"),
                     AgentTokens(SECRET), TOKEN)
    client = TestClient(app, headers={"Authorization": f"Bearer {TOKEN}"})
    job_a = client.post("/v1/jobs", json={"spec": GOOD}).json()["id"]
    job_b = client.post("/v1/jobs", json={"spec": GOOD}).json()["id"]
    return client, job_a, job_b


def _agent(job_id: str, attempt: int = 1) -> dict[str, str]:
    return {"Authorization": f"Bearer {AgentTokens(SECRET).issue(job_id, attempt)}"}


def test_fuzzed_reports_never_get_a_server_error(api):
    client, job_a, job_b = api
    ids = {"JOB_A": job_a, "JOB_B": job_b}

    @given(report=reports, raw=st.none() | st.binary(max_size=64))
    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
    def check(report, raw):
        if isinstance(report.get("job_id"), str):
            report["job_id"] = ids.get(report["job_id"], report["job_id"])
        body = raw if raw is not None else json.dumps(report).encode()
        answer = client.post("/v1/agent/i-1/report", content=body,
                             headers={**_agent(job_a), "Content-Type": "application/json"})
        assert answer.status_code in (200, 403, 404, 422), (answer.status_code, answer.text)
        if answer.status_code == 200:
            assert report.get("job_id") == job_a and report.get("attempt") == 1
        if answer.status_code == 422:  # the problems name the fields
            assert all("field" in p for p in answer.json()["detail"]), answer.text

    check()


def test_surrogates_and_control_characters_in_reports_are_not_server_errors(api):
    client, job_a, _ = api
    # json.dumps escapes lone surrogates as \udXXX, which JSON allows and UTF-8 cannot encode.
    body = json.dumps({"job_id": job_a, "attempt": 1, "phase": "running",
                       "at": "2026-11-30T12:00:00Z", "message": "\udfff",
                       "log_lines": ["\ud800 half a pair", "nul \x00 byte"]}).encode()
    answer = client.post("/v1/agent/i-1/report", content=body, headers=_agent(job_a))
    assert answer.status_code == 422, answer.text


def test_an_agent_token_for_job_a_is_refused_on_job_b_and_on_user_routes(api):
    client, job_a, job_b = api
    report = {"job_id": job_b, "attempt": 1, "phase": "running", "at": "2026-11-30T12:00:00Z"}
    assert client.post("/v1/agent/i-1/report", json=report,
                       headers=_agent(job_a)).status_code == 403
    # Another attempt of the same job is another scope too.
    report["job_id"] = job_a
    assert client.post("/v1/agent/i-1/report", json=report,
                       headers=_agent(job_a, 2)).status_code == 403
    # Reading: an agent token opens no user route, for its own job or another.
    for path in (f"/v1/jobs/{job_b}", f"/v1/jobs/{job_a}", f"/v1/jobs/{job_b}/logs",
                 "/v1/jobs", "/v1/events", "/metrics", "/v1/offers"):
        assert client.get(path, headers=_agent(job_a)).status_code == 401, path
    for path in (f"/v1/jobs/{job_b}/cancel", "/v1/jobs"):
        assert client.post(path, json={}, headers=_agent(job_a)).status_code == 401, path
    # And the job B record was not touched by the refused report.
    assert client.get(f"/v1/jobs/{job_b}").json()["state"] == "pending"


def _progress(unit: str, done: float, at: str, total: float | None = None) -> dict:
    return {"unit": unit, "done": done, "at": at} | ({"total": total} if total else {})


T_FIRST, T_LATEST, T_REPORT = "2026-11-30T11:00:00Z", "2026-11-30T11:30:00Z", \
    "2026-11-30T12:00:00Z"
GPU = {"gpus": 1, "util_pct": 90, "max_util_pct": 95, "memory_used_gib": 10,
       "memory_total_gib": 16, "window_s": 2, "readings": 2, "at": T_LATEST}


@pytest.mark.parametrize(("extra", "field"), [
    ({"first_progress": _progress("tokens", 0, T_FIRST),
      "progress": _progress("samples", 5, T_LATEST)}, "first_progress.unit"),
    ({"first_progress": _progress("samples", 0, T_LATEST),
      "progress": _progress("samples", 5, T_FIRST)}, "first_progress.at"),
    ({"progress": _progress("samples", 11, T_LATEST, total=10)}, "progress.done"),
    ({"progress": _progress("steps", 5, T_LATEST)}, "progress.unit"),  # the spec counts samples
    ({"progress": _progress("samples", 5, "2026-11-30T12:01:01Z")}, "progress.at"),
    ({"progress": _progress("samples", 5, "8307-10-01T19:33:20Z")}, "progress.at"),
    ({"gpu": GPU | {"max_util_pct": 0}}, "gpu.max_util_pct"),
    ({"gpu": GPU | {"memory_used_gib": 900}}, "gpu.memory_used_gib"),
])
def test_inconsistent_progress_is_refused_naming_the_field(redis_client, tmp_path, extra, field):
    app = create_app(Store.over(redis_client), LocalObjectStore(tmp_path / "objects"),
                     AgentTokens(SECRET), TOKEN)
    client = TestClient(app, headers={"Authorization": f"Bearer {TOKEN}"})
    spec = GOOD | {"work": {"unit": "samples", "total": 1000}}
    job = client.post("/v1/jobs", json={"spec": spec}).json()["id"]
    report = {"job_id": job, "attempt": 1, "phase": "running", "at": T_REPORT}
    fine = {"first_progress": _progress("samples", 0, T_FIRST),
            "progress": _progress("samples", 5, T_LATEST), "gpu": GPU}
    assert client.post("/v1/agent/i-1/report", json=report | fine,
                       headers=_agent(job)).status_code == 200
    answer = client.post("/v1/agent/i-1/report", json=report | extra, headers=_agent(job))
    assert answer.status_code == 422, answer.text
    assert field in _named(answer.json()["detail"]), answer.text


def _named(detail: list[dict]) -> set[str]:
    """The fields a 422 names: each problem's field, and the field within it a problem starts
    with ("at: ..." of "progress" names "progress.at")."""
    return {p["field"] for p in detail} | \
        {f'{p["field"]}.{p["problem"].split(":")[0]}' for p in detail}


def test_a_point_ahead_of_the_daemons_clock_is_refused(api):
    # The report's own at is as wrong as the point's: the daemon's clock decides.
    client, job_a, _ = api
    report = {"job_id": job_a, "attempt": 1, "phase": "running", "at": "8307-10-01T19:33:20Z",
              "progress": _progress("samples", 5, "8307-10-01T19:33:20Z")}
    answer = client.post("/v1/agent/i-1/report", json=report, headers=_agent(job_a))
    assert answer.status_code == 422 and "progress.at" in _named(answer.json()["detail"]), \
        answer.text


def test_stored_progress_without_a_rate_never_breaks_reading_jobs(redis_client, tmp_path):
    # Records written before zero-rate evidence was refused: a stall's zero among the closed
    # evidence and a live window without progress, on a job that declared no rate.
    from datetime import UTC, datetime

    from core.models.jobs import JobProgress, MeasuredRate
    from core.models.placements import Placement
    from core.models.work import ProgressPoint
    from tests.factories.offers import offer

    store = Store.over(redis_client)
    app = create_app(store, LocalObjectStore(tmp_path / "objects"), AgentTokens(SECRET), TOKEN)
    client = TestClient(app, headers={"Authorization": f"Bearer {TOKEN}"})
    job_id = client.post("/v1/jobs", json={"spec": GOOD}).json()["id"]
    job = store.jobs.get(job_id)
    t = datetime(2026, 11, 30, 11, tzinfo=UTC)
    point = ProgressPoint(unit="samples", done=500, at=t)
    job.attempt = 1
    job.placement = Placement(attempt=1, offer=offer(gpu_model="V100"), client_token="t-1",
                              decided_at=t, instance_id="i-1", started_at=t)
    job.progress = JobProgress.model_construct(
        latest=point.model_copy(update={"at": t.replace(minute=1)}), attempt=1,
        gpu_model="V100", gpu_count=1, time_scale=1.0, start=point,
        closed=[MeasuredRate.model_construct(gpu_model="T4", gpu_count=1, units=0.0,
                                             hours=0.5)])
    store.jobs.save(job)
    for path in (f"/v1/jobs/{job_id}", "/v1/jobs"):
        answer = client.get(path)
        assert answer.status_code == 200, (path, answer.text[:300])
    assert store.jobs.get(job_id).progress.closed == []
