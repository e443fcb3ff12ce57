"""Submissions the API refuses with a clear 4xx (never a 500): non-finite numbers (JSON
``NaN``/``Infinity``, which Python's JSON reader accepts), booleans for numbers, and a job of
an owner whose budget is already spent. Real API app, real Redis."""
# ruff: noqa: F811 (pytest fixtures imported from a sibling module)

from __future__ import annotations

import json

import pytest

from scheduler.store.budgets import BudgetSettings, SpendStore
from tests.integration.api.test_submit import GOOD, _nothing_stored, api  # noqa: F401


def _post_raw(client, text: str):
    return client.post("/v1/jobs", content=text, headers={"Content-Type": "application/json"})


RAW = [
    ("budget_usd", '"budget_usd": NaN'),
    ("budget_usd", '"budget_usd": Infinity'),
    ("expected_hours", '"expected_hours": NaN'),
    ("max_price_usd_per_hour", '"max_price_usd_per_hour": -Infinity'),
    ("max_interruption_risk", '"max_interruption_risk": NaN'),
    ("resources.min_vram_gib", '"resources": {"min_vram_gib": NaN}'),
    ("checkpoint.grace_s", '"checkpoint": {"grace_s": Infinity}'),
]


@pytest.mark.parametrize("field,fragment", RAW, ids=[r[1] for r in RAW])
def test_non_finite_numbers_get_a_422_naming_the_field(api, redis_client, field, fragment):
    client, _, _, objects_dir = api
    spec = json.dumps(GOOD)[:-1] + ", " + fragment + "}"
    response = _post_raw(client, '{"spec": ' + spec + "}")
    assert response.status_code == 422, response.text
    [problem] = response.json()["problems"]
    assert problem["field"] == field and "finite" in problem["problem"]
    _nothing_stored(redis_client, objects_dir)


def test_a_nan_where_the_request_model_wants_text_is_a_422_not_a_500(api):
    client = api[0]
    response = _post_raw(client, '{"spec": {"name": "x"}, "bundle_b64": NaN}')
    assert response.status_code == 422, response.text
    [problem] = response.json()["detail"]
    assert problem["loc"] == ["body", "bundle_b64"] and problem["input"] == "nan"


@pytest.mark.parametrize("field", ["budget_usd", "expected_hours", "max_failures"])
def test_a_boolean_is_not_a_number(api, redis_client, field):
    client, _, _, objects_dir = api
    response = client.post("/v1/jobs", json={"spec": {**GOOD, field: True}})
    assert response.status_code == 422, response.text
    assert [p["field"] for p in response.json()["problems"]] == [field]
    _nothing_stored(redis_client, objects_dir)


def test_an_owner_whose_budget_is_spent_cannot_submit(api, redis_client):
    """The daemon config's budget of a user without one of their own; the admin (the test's
    token) submits on the users' behalf."""
    client, store = api[0], api[1]
    store.users.add("alice")
    store.users.add("bob")
    spend = SpendStore(redis_client)
    spend.publish_settings(BudgetSettings(users={"alice": 10.0}))
    spend.record("alice", "old-job", 9.0)
    ok = client.post("/v1/jobs", json={"spec": {**GOOD, "owner": "alice"}})
    assert ok.status_code == 201, ok.text  # 90 %: still room
    spend.record("alice", "old-job", 10.5)
    refused = client.post("/v1/jobs", json={"spec": {**GOOD, "owner": "alice"}})
    assert refused.status_code == 409, refused.text
    assert refused.json()["detail"].startswith(
        "owner 'alice' has spent $10.50 of the $10.00 budget")
    assert client.post("/v1/jobs", json={"spec": {**GOOD, "owner": "bob"}}).status_code == 201
