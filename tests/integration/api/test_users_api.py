"""Users, tokens and the audit stream through the real API app on a real Redis: the lifecycle
of a user and their tokens, a revocation seen at once by a second replica, only hashes in
Redis, audit entries for every change, whose job a submission is, and per-user budgets set on
the user record."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from scheduler.api.app import create_app
from scheduler.checkpoints.local import LocalObjectStore
from scheduler.store import Store
from scheduler.store.agents import AgentTokens
from scheduler.store.budgets import BudgetSettings

ADMIN_TOKEN = "users-admin-token-0123456789"
SPEC = {"name": "train", "command": "python train.py", "resources": {"gpu_count": 1}}


def _app(redis_client, tmp_path):
    return create_app(Store.over(redis_client), LocalObjectStore(tmp_path / "objects"),
                      AgentTokens(b"users-agent-secret"), ADMIN_TOKEN)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def api(redis_client, tmp_path) -> TestClient:
    return TestClient(_app(redis_client, tmp_path), headers=bearer(ADMIN_TOKEN))


def _user_with_token(api: TestClient, name: str, **fields) -> str:
    assert api.post("/v1/users", json={"name": name, **fields}).status_code == 201
    created = api.post("/v1/tokens", json={"user": name, "label": "test"})
    assert created.status_code == 201, created.text
    return created.json()["token"]


def test_a_user_and_their_tokens_from_creation_to_revocation(api):
    added = api.post("/v1/users", json={"name": "carol", "budget_usd": 25})
    assert added.status_code == 201, added.text
    assert added.json() | {"created_at": None} == {
        "name": "carol", "role": "user", "budget_usd": 25.0, "created_at": None,
        "spent_usd": 0.0}
    again = api.post("/v1/users", json={"name": "carol"})
    assert again.status_code == 409 and again.json()["detail"].startswith("name: ")
    assert api.post("/v1/users", json={"name": "Carol!"}).status_code == 422
    assert [u["name"] for u in api.get("/v1/users").json()] == ["admin", "carol"]

    created = api.post("/v1/tokens", json={"user": "carol", "label": "laptop"}).json()
    token = created["token"]
    assert token.startswith("gat_") and created["user"] == "carol"
    assert created["label"] == "laptop" and created["revoked_at"] is None
    carol = TestClient(api.app, headers=bearer(token))
    assert carol.get("/v1/me").json() == {"user": "carol", "role": "user",
                                          "token_id": created["id"], "budget_usd": 25.0,
                                          "spent_usd": 0.0}
    second = carol.post("/v1/tokens", json={"label": "ci"})
    assert second.status_code == 201 and second.json()["user"] == "carol"
    listed = carol.get("/v1/tokens").json()
    assert [r["id"] for r in listed] == [created["id"], second.json()["id"]]
    assert all(set(r) == {"id", "user", "label", "created_at", "revoked_at"} for r in listed)
    assert carol.get("/v1/tokens", params={"user": "admin"}).status_code == 403
    assert carol.post("/v1/tokens", json={"user": "admin"}).status_code == 403
    assert len(api.get("/v1/tokens").json()) == 3  # the admin's bootstrap token too

    revoked = carol.post(f"/v1/tokens/{second.json()['id']}/revoke")
    assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None
    assert carol.post(f"/v1/tokens/{second.json()['id']}/revoke").json() == revoked.json()
    assert TestClient(api.app, headers=bearer(second.json()["token"])).get(
        "/v1/me").status_code == 401
    admin_token_id = api.get("/v1/me").json()["token_id"]
    assert carol.post(f"/v1/tokens/{admin_token_id}/revoke").status_code == 404

    changed = api.patch("/v1/users/carol", json={"budget_usd": None, "admin": True})
    assert changed.status_code == 200, changed.text
    assert (changed.json()["budget_usd"], changed.json()["role"]) == (None, "admin")
    assert carol.get("/v1/users").status_code == 200  # an admin now, with the same token
    kept = api.patch("/v1/users/carol", json={"admin": False})
    assert kept.json()["budget_usd"] is None and kept.json()["role"] == "user"
    assert api.patch("/v1/users/nobody", json={"admin": True}).status_code == 404
    assert api.patch("/v1/users/carol", json={"budjet_usd": 3}).status_code == 422


@pytest.mark.parametrize("body,field,status", [
    ({"user": "nobody"}, "user", 404),
    ({"label": "x" * 201}, "label", 422),
    ({"lable": "x"}, "lable", 422),
])
def test_a_refused_token_names_the_field(api, body, field, status):
    answer = api.post("/v1/tokens", json=body)
    assert answer.status_code == status, answer.text
    assert field in answer.text


@pytest.mark.parametrize("budget", ["NaN", "Infinity", "-1", "0", "true", '"5"'])
def test_a_budget_must_be_a_positive_number(api, budget):
    answer = api.post("/v1/users", content=f'{{"name": "dave", "budget_usd": {budget}}}',
                      headers={"Content-Type": "application/json"})
    assert answer.status_code == 422, answer.text
    assert "budget_usd" in answer.text
    assert api.get("/v1/users").json()[-1]["name"] == "admin"


def test_a_role_must_be_a_boolean(api):
    answer = api.post("/v1/users", json={"name": "dave", "admin": "yes"})
    assert answer.status_code == 422 and "admin" in answer.text
    assert api.post("/v1/users", json={"name": "dave", "budget_usd": 7}).json()[
        "budget_usd"] == 7.0


def test_the_last_admin_stays_an_admin(api):
    refused = api.patch("/v1/users/admin", json={"admin": False})
    assert refused.status_code == 409 and refused.json()["detail"].startswith("admin: ")
    api.post("/v1/users", json={"name": "erin", "admin": True})
    assert api.patch("/v1/users/admin", json={"admin": False}).json()["role"] == "user"


def test_a_revoked_token_is_refused_at_once_by_another_replica(redis_client, tmp_path):
    one = TestClient(_app(redis_client, tmp_path), headers=bearer(ADMIN_TOKEN))
    two = TestClient(_app(redis_client, tmp_path), headers=bearer(ADMIN_TOKEN))
    token = _user_with_token(one, "frank")
    frank_on_two = TestClient(two.app, headers=bearer(token))
    assert frank_on_two.get("/v1/me").json()["user"] == "frank"
    token_id = frank_on_two.get("/v1/me").json()["token_id"]
    assert one.post(f"/v1/tokens/{token_id}/revoke").status_code == 200
    refused = frank_on_two.get("/v1/me")
    assert refused.status_code == 401
    assert frank_on_two.get("/v1/jobs").status_code == 401
    # and a user made an admin on one replica is one on the other at the next request
    other = _user_with_token(two, "gina")
    gina_on_two = TestClient(two.app, headers=bearer(other))
    assert gina_on_two.get("/v1/users").status_code == 403
    one.patch("/v1/users/gina", json={"admin": True})
    assert gina_on_two.get("/v1/users").status_code == 200


def _every_value(redis_client) -> list[str]:
    """Every key name and every stored value of every key, as text."""
    out: list[str] = []
    for key in redis_client.scan_iter(count=1000):
        out.append(key)
        kind = redis_client.type(key)
        if kind == "string":
            out.append(redis_client.get(key))
        elif kind == "hash":
            out.extend(x for kv in redis_client.hgetall(key).items() for x in kv)
        elif kind == "list":
            out.extend(redis_client.lrange(key, 0, -1))
        elif kind == "set":
            out.extend(redis_client.smembers(key))
        elif kind == "zset":
            out.extend(m for m, _ in redis_client.zrange(key, 0, -1, withscores=True))
        elif kind == "stream":
            out.extend(x for _, fields in redis_client.xrange(key)
                       for kv in fields.items() for x in kv)
        else:
            raise AssertionError(f"{key}: a {kind} key this test cannot read")
    return out


def test_only_hashes_of_tokens_are_in_redis(api, redis_client):
    token = _user_with_token(api, "hank")
    hank = TestClient(api.app, headers=bearer(token))
    assert hank.post("/v1/jobs", json={"spec": SPEC}).status_code == 201
    assert hank.post("/v1/tokens", json={"label": "second"}).status_code == 201
    secret = token.split("_", 2)[2]  # gat_<id>_<secret>; the secret itself may hold "_"
    assert len(secret) >= 40
    values = _every_value(redis_client)
    assert len(values) > 10  # users, tokens, the job, the audit stream
    for value in values:
        assert secret not in value and ADMIN_TOKEN not in value


def test_every_change_is_in_the_audit_stream_with_who_what_status_and_client(api):
    token = _user_with_token(api, "ivy")
    ivy = TestClient(api.app, headers=bearer(token))
    ivy_id = ivy.get("/v1/me").json()["token_id"]
    assert ivy.post("/v1/users", json={"name": "jack"}).status_code == 403
    assert ivy.post("/v1/jobs", json={"spec": SPEC}).status_code == 201
    assert TestClient(api.app).post("/v1/jobs", json={"spec": SPEC}).status_code == 401
    page = api.get("/v1/audit").json()
    rows = [(e.get("user"), e["method"], e["path"], e["status"]) for e in page["entries"]]
    assert rows == [("admin", "POST", "/v1/users", 201), ("admin", "POST", "/v1/tokens", 201),
                    ("ivy", "POST", "/v1/users", 403), ("ivy", "POST", "/v1/jobs", 201)]
    refused = api.get("/v1/audit", params={"refused": "true"}).json()["entries"]
    assert [(e.get("user"), e["path"], e["status"]) for e in refused] == [
        (None, "/v1/jobs", 401)]
    newest = api.get("/v1/audit", params={"newest": "true", "limit": 2}).json()["entries"]
    assert [e["id"] for e in newest] == [e["id"] for e in page["entries"][-2:]]
    ivys = [e for e in page["entries"] if e.get("user") == "ivy"]
    assert all(e["token_id"] == ivy_id and e["client"] and e["via"] == "bearer" and e["at"]
               for e in ivys)
    assert page["next"] == page["entries"][-1]["id"]
    # reading on from a cursor, filtered by user, and a page limit
    first = api.get("/v1/audit", params={"limit": 2}).json()
    rest = api.get("/v1/audit", params={"after": first["next"]}).json()
    assert [e["id"] for e in first["entries"] + rest["entries"]][:5] == \
        [e["id"] for e in page["entries"]]
    only = api.get("/v1/audit", params={"user": "ivy"}).json()["entries"]
    assert [e["id"] for e in only] == [e["id"] for e in ivys]
    one = api.get("/v1/audit", params={"user": "ivy", "limit": 1}).json()
    assert [e["id"] for e in one["entries"]] == [ivys[0]["id"]] == [one["next"]]
    more = api.get("/v1/audit", params={"user": "ivy", "after": one["next"]}).json()
    assert [e["id"] for e in more["entries"]] == [e["id"] for e in ivys[1:]]
    end = api.get("/v1/audit", params={"after": "18446744073709551615-18446744073709551615"})
    assert end.json() == {"entries": [], "next": "18446744073709551615-18446744073709551615"}


@pytest.mark.parametrize("after", ["x", "1-2-3", "99999999999999999999-0", "-1"])
def test_a_malformed_audit_cursor_is_a_422_naming_after(api, after):
    answer = api.get("/v1/audit", params={"after": after})
    assert answer.status_code == 422
    assert "after" in answer.text


def test_whose_job_a_submission_is(api):
    kate = TestClient(api.app, headers=bearer(_user_with_token(api, "kate")))
    _user_with_token(api, "liam")

    def submit(client: TestClient, **spec):
        return client.post("/v1/jobs", json={"spec": {**SPEC, **spec}})

    assert submit(kate).json()["spec"]["owner"] == "kate"
    assert submit(kate, owner="kate").json()["spec"]["owner"] == "kate"
    refused = submit(kate, owner="liam")
    assert refused.status_code == 422
    [problem] = refused.json()["problems"]
    assert problem["field"] == "owner"
    assert "only an admin may submit on behalf of another user" in problem["problem"]
    assert submit(api).json()["spec"]["owner"] == "admin"
    assert submit(api, owner="liam").json()["spec"]["owner"] == "liam"
    unknown = submit(api, owner="nobody")
    assert unknown.status_code == 422 and unknown.json()["problems"][0]["field"] == "owner"
    assert {j["spec"]["owner"] for j in kate.get("/v1/jobs").json()} == {"kate"}


def test_the_budget_on_the_user_record_applies_to_their_submissions(api, redis_client):
    store = Store.over(redis_client)
    mia = TestClient(api.app, headers=bearer(_user_with_token(api, "mia", budget_usd=10)))
    assert mia.post("/v1/jobs", json={"spec": SPEC}).status_code == 201
    store.spend.record("mia", "old-job", 10.5)
    refused = mia.post("/v1/jobs", json={"spec": SPEC})
    assert refused.status_code == 409, refused.text
    assert refused.json()["detail"].startswith("owner 'mia' has spent $10.50 of the $10.00")
    assert mia.get("/v1/me").json() | {"token_id": None} == {
        "user": "mia", "role": "user", "token_id": None, "budget_usd": 10.0, "spent_usd": 10.5}
    # the record's budget wins over the daemon config's for the same user
    store.spend.publish_settings(BudgetSettings(users={"mia": 100.0}))
    assert mia.post("/v1/jobs", json={"spec": SPEC}).status_code == 409
    api.patch("/v1/users/mia", json={"budget_usd": 20})
    assert mia.post("/v1/jobs", json={"spec": SPEC}).status_code == 201
    # without one on the record, the config's applies
    api.patch("/v1/users/mia", json={"budget_usd": None})
    store.spend.publish_settings(BudgetSettings(users={"mia": 10.0}))
    assert mia.post("/v1/jobs", json={"spec": SPEC}).status_code == 409
    assert mia.get("/v1/me").json()["budget_usd"] == 10.0
    # an admin submitting on mia's behalf is held to mia's budget, not their own
    on_behalf = api.post("/v1/jobs", json={"spec": {**SPEC, "owner": "mia"}})
    assert on_behalf.status_code == 409
    assert api.post("/v1/jobs", json={"spec": SPEC}).status_code == 201
