"""What an attacker tried against users, tokens, the audit stream and the dashboard login,
each refused: names with a trailing newline, anonymous requests pushing the users' audit
trail out, forged audit lines, two admins demoting each other at once, unbounded tokens,
control characters in labels, a login posted from another site, lone surrogates in JSON,
another user's jobs and SSH addresses on the fleet listing. Real app, real Redis."""

from __future__ import annotations

import threading

import pytest
from fastapi.testclient import TestClient

from scheduler.api.app import create_app
from scheduler.checkpoints.local import LocalObjectStore
from scheduler.services.fleet import as_seen_by
from scheduler.store import Store, keys
from scheduler.store.agents import AgentTokens
from scheduler.store.users import (
    TOKENS_PER_USER_MAX,
    Principal,
    Role,
    UserError,
    UserStore,
)
from tests.integration.dashboard.conftest import make_job

ADMIN_TOKEN = "hardening-admin-token-0123456789"


@pytest.fixture
def store(redis_client) -> Store:
    return Store.over(redis_client)


@pytest.fixture
def api(store, tmp_path) -> TestClient:
    app = create_app(store, LocalObjectStore(tmp_path / "objects"), AgentTokens(b"agent"),
                     ADMIN_TOKEN)
    return TestClient(app, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
                      follow_redirects=False)


@pytest.mark.parametrize("name", ["alice\n", "alice\r\n", "\nalice", "al\nice"])
def test_a_name_with_a_newline_is_refused_for_users_and_jobs(api, name):
    assert api.post("/v1/users", json={"name": name}).status_code == 422
    answer = api.post("/v1/jobs", json={"spec": {"name": name, "command": "true"}})
    assert answer.status_code == 422 and "name" in answer.text


def test_anonymous_refused_requests_cannot_push_the_users_trail_out(api, store):
    api.post("/v1/users", json={"name": "carol"})
    anonymous = TestClient(api.app)
    for _ in range(30):
        assert anonymous.post("/v1/users", json={"name": "x"}).status_code == 401
    trail = store.audit.latest(100)
    assert [(e["user"], e["path"], e["status"]) for e in trail] == [("admin", "/v1/users", 201)]
    refused = store.redis.xrange(keys.AUDIT_REFUSED)
    assert len(refused) == 30 and all("user" not in fields for _, fields in refused)


def test_an_audit_entry_cannot_forge_a_line_or_move_the_cursor(api, store):
    # Percent-encoded in the URL; the server sees (and used to store) the decoded path.
    api.post("/v1/x%0a2026-12-01T00:00:00%20admin%20POST%20/v1/users%20201%1b[2J")
    path = store.audit.latest(1)[0]["path"]
    assert "\n" not in path and "\x1b" not in path
    assert path == "/v1/x\\n2026-12-01T00:00:00 admin POST /v1/users 201\\x1b[2J"


def test_two_admins_demoting_each_other_at_once_leave_one_admin(store):
    users = UserStore(store.redis)
    for name in ("ann", "ben"):
        users.add(name, Role.ADMIN)
    users.register_bootstrap(ADMIN_TOKEN)
    users.update("admin", role=Role.USER)
    for _ in range(20):
        barrier = threading.Barrier(2)
        outcomes: list[str] = []

        def demote(name: str) -> None:
            barrier.wait()
            try:
                users.update(name, role=Role.USER)
                outcomes.append("demoted")
            except UserError as exc:
                outcomes.append(f"{exc.status}")

        threads = [threading.Thread(target=demote, args=(n,)) for n in ("ann", "ben")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(outcomes) == ["409", "demoted"]
        admins = [u.name for u in users.list() if u.role is Role.ADMIN]
        assert len(admins) == 1
        users.update("ann" if admins == ["ben"] else "ben", role=Role.ADMIN)


def test_the_daemon_token_makes_admin_an_admin_again_when_none_is_left(store):
    users = store.users
    users.register_bootstrap(ADMIN_TOKEN)
    store.redis.hset(keys.USERS, "admin", store.redis.hget(keys.USERS, "admin").replace(
        '"role": "admin"', '"role": "user"'))
    assert users.resolve(ADMIN_TOKEN).role is Role.USER
    users.register_bootstrap(ADMIN_TOKEN)
    assert users.resolve(ADMIN_TOKEN).role is Role.ADMIN


def test_a_user_holds_a_bounded_number_of_tokens_and_revoked_ones_are_forgotten(store):
    users = store.users
    users.add("carol")
    records = [users.create_token("carol")[1] for _ in range(TOKENS_PER_USER_MAX)]
    with pytest.raises(UserError) as refused:
        users.create_token("carol")
    assert refused.value.status == 409 and refused.value.field == "user"
    for record in records:
        users.revoke(record.id)
        users.create_token("carol")
    kept = users.tokens("carol")
    assert sum(r.revoked_at is None for r in kept) == TOKENS_PER_USER_MAX
    assert len(kept) <= 2 * TOKENS_PER_USER_MAX + 1
    assert store.redis.hlen(keys.TOKEN_IDS) == store.redis.hlen(keys.TOKENS)


@pytest.mark.parametrize("label", ["a\nb", "\x1b]0;pwned\x07", "bidi\u202eevil"])
def test_a_token_label_with_control_characters_is_refused(api, label):
    answer = api.post("/v1/tokens", json={"label": label})
    assert answer.status_code == 422 and answer.json()["detail"].startswith("label: ")


def test_a_new_token_is_not_cached(api):
    answer = api.post("/v1/tokens", json={"label": "ci"})
    assert answer.status_code == 201 and answer.headers["cache-control"] == "no-store"


@pytest.mark.parametrize("headers, status", [
    ({"Origin": "http://evil.example"}, 403),
    ({"Sec-Fetch-Site": "cross-site"}, 403),
    ({"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}, 403),
    ({"Origin": "http://testserver", "Sec-Fetch-Site": "same-origin"}, 303),
    ({"Origin": "null", "Sec-Fetch-Site": "same-origin"}, 303),  # what Chromium sends
    ({}, 303),  # a client that sends neither (curl) is not a browser on another site
])
def test_a_login_posted_from_another_site_is_refused(api, headers, status):
    browser = TestClient(api.app, follow_redirects=False)
    answer = browser.post("/ui/login", data={"token": ADMIN_TOKEN}, headers=headers)
    assert answer.status_code == status, answer.text[:200]
    assert ("ga_session" in answer.headers.get("set-cookie", "")) == (status == 303)


@pytest.mark.parametrize("path", ["/v1/tokens", "/v1/users", "/v1/plans"])
def test_a_lone_surrogate_in_json_is_a_422(api, path):
    answer = api.post(path, content=b'{"label": "\\ud800", "name": "\\ud800", "spec": "\\ud800"}',
                      headers={"Content-Type": "application/json"})
    assert answer.status_code == 422 and answer.json()["detail"]


def test_a_user_sees_no_other_users_job_nor_ssh_address_on_the_fleet(store):
    store.users.add("alice")
    mine = make_job(store, "mine", "alice", finished=False)
    theirs = make_job(store, "theirs", "bob", finished=False)
    rows = [{"host": "h1", "address": "10.0.0.5", "port": 22, "user": "ops",
             "jobs": [{"instance_id": "fleet-1", "job": mine.id, "gpus": [0], "since": "t"},
                      {"instance_id": "fleet-2", "job": theirs.id, "gpus": [1], "since": "t"}]}]
    alice = Principal("alice", Role.USER, "t1")
    seen = as_seen_by(store, rows, alice)[0]
    assert (seen["address"], seen["port"], seen["user"]) == (None, None, None)
    assert seen["jobs"][0]["job"] == mine.id
    assert seen["jobs"][1] == {"instance_id": None, "job": None, "gpus": [1], "since": "t"}
    assert as_seen_by(store, rows, Principal("admin", Role.ADMIN, "t0")) == rows
