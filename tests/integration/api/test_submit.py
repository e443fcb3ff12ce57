"""Submitting through the real API app, against a real Redis and a real local object store."""

import base64
import io
import tarfile

import pytest
from fastapi.testclient import TestClient

from scheduler.api.app import create_app
from scheduler.checkpoints.local import LocalObjectStore
from core.models import JobState, utcnow
from core.models.placements import Placement
from scheduler.store import Store
from scheduler.store.agents import AgentTokens
from tests.factories.offers import offer

TOKEN = "user-token"
GOOD = {"name": "train", "command": "python train.py",
        "resources": {"gpu_count": 1, "min_vram_gib": 16}}


@pytest.fixture
def api(redis_client, tmp_path):
    objects = LocalObjectStore(tmp_path / "objects")
    store = Store.over(redis_client)
    app = create_app(store, objects, AgentTokens(b"secret"), TOKEN)
    client = TestClient(app, headers={"Authorization": f"Bearer {TOKEN}"})
    client.app_args = (store, objects, AgentTokens(b"secret"), TOKEN)
    return client, store, objects, tmp_path / "objects"


def _bundle() -> str:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        data = b"print('hi')\n"
        info = tarfile.TarInfo("train.py")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return base64.b64encode(buf.getvalue()).decode()


def _nothing_stored(redis_client, objects_dir):
    assert redis_client.keys("ga:job:*") == []
    assert redis_client.zcard("ga:jobs") == 0
    assert not objects_dir.exists() or not any(p.is_file() for p in objects_dir.rglob("*"))


def test_good_spec_is_stored_with_its_bundle(api, redis_client):
    client, store, objects, _ = api
    response = client.post("/v1/jobs", json={"spec": GOOD, "bundle_b64": _bundle()})
    assert response.status_code == 201, response.text
    job = response.json()
    assert job["state"] == "pending"
    assert store.jobs.get(job["id"]).spec.name == "train"
    assert objects.exists(f"jobs/{job['id']}/code.tar.gz")


BAD_SPECS = [
    ("market", {**GOOD, "market": "cheap"}, "'spot', 'on-demand' or 'auto'"),
    ("resources.min_vram_gib", {**GOOD, "resources": {"min_vram_gib": -4}}, "greater than or equal to 0"),
    ("resources.gpu_count", {**GOOD, "resources": {"gpu_count": "two"}}, "valid integer"),
    ("max_interruption_risk", {**GOOD, "max_interruption_risk": 1.5}, "less than or equal to 1"),
    ("checkpoint.dir", {**GOOD, "checkpoint": {"dir": "/etc"}}, "relative"),
    ("name", {**GOOD, "name": "My Job!"}, "lowercase"),
    ("resoruces", {**GOOD, "resoruces": {}}, "did you mean 'resources'"),
    ("resources.gpu_model", {**GOOD, "resources": {"gpu_model": ["T4"]}}, "did you mean 'gpu_models'"),
    ("deadline", {**GOOD, "deadline": "2020-01-01T00:00:00Z"}, "future"),
    ("deadline", {**GOOD, "deadline": "2030-01-01T00:00:00"}, "timezone"),
    ("command", {k: v for k, v in GOOD.items() if k != "command"}, "required"),
    ("checkpoint.signal", {**GOOD, "checkpoint": {"signal": "SIGKILL"}}, "SIGTERM"),
    ("checkpoint.dir", {**GOOD, "checkpoint": {"dir": "."}}, "subfolder"),
    ("env", {**GOOD, "env": {"X": "a\x00b"}}, "NUL"),
    ("command", {**GOOD, "command": "echo \x00"}, "NUL"),
]


@pytest.mark.parametrize("field,spec,allowed", BAD_SPECS, ids=[b[0] + "-" + b[2][:12] for b in BAD_SPECS])
def test_bad_spec_names_field_value_and_allowed_and_stores_nothing(api, redis_client, field, spec, allowed):
    client, _, _, objects_dir = api
    response = client.post("/v1/jobs", json={"spec": spec, "bundle_b64": _bundle()})
    assert response.status_code == 422
    problems = response.json()["problems"]
    assert any(p["field"] == field and allowed in p["problem"] for p in problems), problems
    _nothing_stored(redis_client, objects_dir)


def test_bad_bundle_stores_nothing(api, redis_client):
    client, _, _, objects_dir = api
    response = client.post("/v1/jobs", json={"spec": GOOD, "bundle_b64": "not base64!!"})
    assert response.status_code == 422
    assert response.json()["problems"][0]["field"] == "bundle_b64"
    _nothing_stored(redis_client, objects_dir)


def test_requests_need_the_token(api):
    client, *_ = api
    assert client.get("/v1/jobs", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert client.get("/v1/jobs", headers={"Authorization": ""}).status_code == 401


def test_agent_token_is_scoped_to_one_job_attempt(api):
    client, store, *_ = api
    job = client.post("/v1/jobs", json={"spec": GOOD}).json()
    other = client.post("/v1/jobs", json={"spec": GOOD}).json()
    tokens = AgentTokens(b"secret")
    report = {"job_id": other["id"], "attempt": 1, "phase": "running",
              "at": "2026-11-30T12:00:00Z"}
    denied = client.post("/v1/agent/i-1/report", json=report,
                         headers={"Authorization": f"Bearer {tokens.issue(job['id'], 1)}"})
    assert denied.status_code == 403
    allowed = client.post("/v1/agent/i-1/report", json=report,
                          headers={"Authorization": f"Bearer {tokens.issue(other['id'], 1)}"})
    assert allowed.status_code == 200
    # the user token is not an agent token
    assert client.post("/v1/agent/i-1/report", json=report).status_code == 401


def test_agent_token_checked_before_the_body_and_bodies_are_limited(api):
    client, *_ = api
    # A non-ASCII token is refused, not a server error.
    assert client.post("/v1/agent/i/report", content=b"{}",
                       headers={"Authorization": "Bearer t\u00e9st".encode("latin-1")}).status_code in (401, 403)
    # Chunked body over the limit: refused while streaming, whatever the token.
    def chunks():
        for _ in range(40):
            yield b"x" * (128 * 1024)
    big = client.post("/v1/agent/i/report", content=chunks(),
                      headers={"Authorization": "Bearer whatever"})
    assert big.status_code == 401  # refused before a byte of the body is read
    tokens = AgentTokens(b"secret")
    job = client.post("/v1/jobs", json={"spec": GOOD}).json()
    big = client.post("/v1/agent/i/report", content=chunks(),
                      headers={"Authorization": f"Bearer {tokens.issue(job['id'], 1)}"})
    assert big.status_code == 413


def test_liveness_uses_the_daemon_clock(api):
    client, store, *_ = api
    job = client.post("/v1/jobs", json={"spec": GOOD}).json()
    placed = store.jobs.get(job["id"])  # only the current attempt's reports are stored
    placed.placement = Placement(attempt=1, offer=offer(), client_token="t-1",
                                 decided_at=utcnow(), instance_id="i")
    placed.record(JobState.RUNNING, "running", offer=placed.placement.offer)
    store.jobs.save(placed)
    tokens = AgentTokens(b"secret")
    report = {"job_id": job["id"], "attempt": 1, "phase": "running", "at": "2099-01-01T00:00:00Z"}
    assert client.post("/v1/agent/i/report", json=report,
                       headers={"Authorization": f"Bearer {tokens.issue(job['id'], 1)}"}).status_code == 200
    stored = store.agents.last_report(job["id"], 1)
    assert stored.received_at is not None and stored.received_at.year < 2099


def test_chunked_submissions_over_the_limit_get_413_and_need_the_token_first(api, monkeypatch):
    client, *_ = api
    import scheduler.api.limits as limits_module

    def chunks(n):
        for _ in range(n):
            yield b"x" * (1024 * 1024)
    # The limit is read per request; exercise it through a small one.
    monkeypatch.setattr(limits_module, "SUBMIT_BODY_MAX_BYTES", 2 * 1024 * 1024)
    small = client
    assert small.post("/v1/jobs", content=chunks(5)).status_code == 413
    assert small.post("/v1/jobs", content=chunks(5),
                      headers={"Authorization": "Bearer nope"}).status_code == 401
