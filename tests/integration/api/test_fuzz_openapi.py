"""The API fuzzed from its own OpenAPI spec (schemathesis) against a real Redis and a real
local checkpoint store, by an admin and by a plain user, with jobs of both users and of a
third stored: no 5xx, and every answer conforms to the spec (status codes, content types,
schemas). Bounded: a few dozen examples per operation and caller."""

from __future__ import annotations

import json

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

from scheduler.api.app import create_app
from scheduler.checkpoints.local import LocalObjectStore
from scheduler.store import Store
from scheduler.store.agents import AgentTokens

TOKEN = "fuzz-admin-token"  # the daemon's token: the admin's
AGENT_SECRET = b"fuzz-agent-secret"
EXAMPLES_PER_OPERATION = 20
# GET /v1/events long-polls up to wait_s (≤ 10 s) when no event is new: fuzzed values keep
# the same meaning but are capped so the run stays fast.
MAX_FUZZ_WAIT_S = 0.05


CALLERS = ("admin", "user")
JOB_SPEC = {"name": "fuzzed", "command": "true"}


@pytest.fixture(params=CALLERS)
def api_schema(request, redis_client, tmp_path):
    """The app with users alice and bob (their jobs stored, submitted through the API) and
    the fuzzing caller's token in ``app.state.fuzz_token``: the admin's, or alice's."""
    store = Store.over(redis_client)
    app = create_app(store, LocalObjectStore(tmp_path / "objects"), AgentTokens(AGENT_SECRET),
                     TOKEN)
    tokens = {"admin": TOKEN}
    for name in ("alice", "bob"):
        store.users.add(name, budget_usd=100.0)
        tokens[name], _ = store.users.create_token(name)
    client = TestClient(app)
    for name in ("alice", "bob", "admin"):
        answer = client.post("/v1/jobs", json={"spec": JOB_SPEC},
                             headers={"Authorization": f"Bearer {tokens[name]}"})
        assert answer.status_code == 201, answer.text
    app.state.fuzz_token = tokens["alice" if request.param == "user" else "admin"]
    return schemathesis.openapi.from_asgi("/openapi.json", app)


def _auth(case_or_schema) -> dict[str, str]:
    schema = getattr(case_or_schema, "operation", None)
    app = (schema.schema if schema is not None else case_or_schema).app
    return {"Authorization": f"Bearer {app.state.fuzz_token}"}


# The agent route takes agent tokens only: fuzzed below with one.
schema = schemathesis.pytest.from_fixture("api_schema").exclude(path_regex="^/v1/agent/")


@schema.parametrize()
@settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None,
          suppress_health_check=list(HealthCheck))
def test_no_server_error_and_answers_conform(case):
    if case.query and "wait_s" in case.query:
        try:
            case.query["wait_s"] = min(float(case.query["wait_s"]), MAX_FUZZ_WAIT_S)
        except (TypeError, ValueError):
            pass  # a malformed value is part of the fuzzing: it must get a 422
    # Some parameters' formats are stated in prose, not in the schema (durations like "30d",
    # market names), so a schema-valid value may rightly get a 422 naming the field: the
    # positive-acceptance check does not apply; every other check does.
    case.call_and_validate(headers=_auth(case), excluded_checks=[positive_data_acceptance])


# Bad inputs found past the fuzzer (which keeps to the schema's types and small sizes), run
# as explicit cases through the same checks: each used to be a 500 or was accepted (201).
SPEC = {"name": "a", "command": "true"}
EXPLICIT_BAD = [
    # (method, path, query, body, status, text the answer must hold)
    ("GET", "/v1/history", {"since": "300000y"}, None, 422, "since: got '300000y': out of range"),
    ("GET", "/v1/history", {"until": "0001-01-01T00:00+01:00"}, None, 422, "until: "),
    ("GET", "/v1/history/points", {"series": "aws/r/z/t/spot", "since": "9" * 400 + "d"}, None,
     422, "since: "),
    ("GET", "/v1/offers", {"at": "999999999y"}, None, 422, "at: got '999999999y': out of range"),
    ("GET", "/v1/offers", {"market": "bogus"}, None, 422, "market"),
    ("GET", "/v1/offers", {"min_vram_gib": "nan"}, None, 422, "min_vram_gib"),
    ("GET", "/v1/offers", {"min_vram_gib": "-1"}, None, 422, "min_vram_gib"),
    ("GET", "/v1/cost-report", {"since": "300000y"}, None, 422, "since: "),
    ("POST", "/v1/plans", None, {"spec": SPEC, "lookback": "300000y"}, 422, "lookback: "),
    ("POST", "/v1/jobs", None, {"spec": SPEC, "bundle_b64": "H4sIAAAAAAAA"}, 422, "bundle_b64"),
    ("POST", "/v1/jobs", None, {"spec": {**SPEC, "command": "x" * (2**20)}}, 422,
     "at most 16384 characters"),
    ("POST", "/v1/jobs", None, {"spec": {**SPEC, "env": {f"V{i}": "" for i in range(129)}}},
     422, "at most 128 variables"),
    ("POST", "/v1/jobs", None, {"spec": {**SPEC, "zones": {"allow": ["z"] * 257}}}, 422,
     "zones.allow"),
    ("POST", "/v1/jobs", None, {"spec": {**SPEC, "env": {f"a{i}": "" for i in range(50_000)}}},
     413, "spec: the body holds"),
]


@pytest.mark.parametrize("method,path,query,body,status,text", EXPLICIT_BAD,
                         ids=[f"{m} {p} {t[:24]}" for m, p, _, _, _, t in EXPLICIT_BAD])
def test_explicit_bad_inputs_are_a_4xx_naming_the_field(api_schema, redis_client, method, path,
                                                        query, body, status, text):
    operation = api_schema[path][method]
    case = operation.Case(query=query, **({"body": body, "media_type": "application/json"}
                                          if body is not None else {}))
    answer = case.call_and_validate(headers=_auth(api_schema),
                                    excluded_checks=[positive_data_acceptance])
    assert answer.status_code == status, answer.text[:300]
    assert text in answer.text and len(answer.content) < 4000
    assert len(redis_client.keys("ga:job:*")) == 3  # the fixture's jobs only


@pytest.mark.parametrize("spec,field", [
    ({"name": "a", "command": "x\ud800", "resources": {"gpu_count": 1}}, "command"),
    ({"name": "a", "command": "x", "env": {"A": "\udfff"}}, "env.A"),
    ({"name": "a", "command": "x", "env": {"B\ud800": "b"}}, "env"),
])
def test_lone_surrogates_in_a_spec_are_a_422_naming_the_field(api_schema, redis_client, spec,
                                                               field):
    """Found by hand past the fuzzer (which generates valid Unicode only): JSON escapes of half
    a UTF-16 pair used to reach Redis and fail there with a 500."""
    client = TestClient(api_schema.app, headers=_auth(api_schema))
    answer = client.post("/v1/jobs", content=json.dumps({"spec": spec}).encode(),
                         headers={"Content-Type": "application/json"})
    assert answer.status_code == 422, answer.text
    assert answer.json()["problems"][0]["field"] == field
    assert len(redis_client.keys("ga:job:*")) == 3
