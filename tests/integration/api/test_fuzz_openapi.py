"""The API fuzzed from its own OpenAPI spec (schemathesis) against a real Redis and a real
local checkpoint store, with a valid user token: no 5xx, and every answer conforms to the spec
(status codes, content types, schemas). Bounded: a few dozen examples per operation."""

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

TOKEN = "fuzz-user-token"
AGENT_SECRET = b"fuzz-agent-secret"
EXAMPLES_PER_OPERATION = 20
# GET /v1/events long-polls up to wait_s (≤ 10 s) when no event is new: fuzzed values keep
# the same meaning but are capped so the run stays fast.
MAX_FUZZ_WAIT_S = 0.05


@pytest.fixture
def api_schema(redis_client, tmp_path):
    app = create_app(Store.over(redis_client), LocalObjectStore(tmp_path / "objects"),
                     AgentTokens(AGENT_SECRET), TOKEN)
    return schemathesis.openapi.from_asgi("/openapi.json", app)


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
    case.call_and_validate(headers={"Authorization": f"Bearer {TOKEN}"},
                           excluded_checks=[positive_data_acceptance])


@pytest.mark.parametrize("spec,field", [
    ({"name": "a", "command": "x\ud800", "resources": {"gpu_count": 1}}, "command"),
    ({"name": "a", "command": "x", "env": {"A": "\udfff"}}, "env.A"),
    ({"name": "a", "command": "x", "env": {"B\ud800": "b"}}, "env"),
])
def test_lone_surrogates_in_a_spec_are_a_422_naming_the_field(api_schema, redis_client, spec,
                                                               field):
    """Found by hand past the fuzzer (which generates valid Unicode only): JSON escapes of half
    a UTF-16 pair used to reach Redis and fail there with a 500."""
    client = TestClient(api_schema.app, headers={"Authorization": f"Bearer {TOKEN}"})
    answer = client.post("/v1/jobs", content=json.dumps({"spec": spec}).encode(),
                         headers={"Content-Type": "application/json"})
    assert answer.status_code == 422, answer.text
    assert answer.json()["problems"][0]["field"] == field
    assert redis_client.keys("ga:job:*") == []
