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
