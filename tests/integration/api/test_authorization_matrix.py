"""Who may call what: every API route of the real app, called by each kind of caller, against
a real Redis, with real jobs submitted through the API by their owner.

Callers: ``admin`` (the daemon's token), ``owner`` (alice, a plain user who owns the job the
route is asked about), ``other`` (bob, a plain user), ``revoked`` (alice's revoked token),
``agent`` (the agent token of alice's job attempt) and ``none`` (no token). A route of the app
without a row in :data:`MATRIX` fails :func:`test_every_route_has_a_row`, so a new route
cannot ship without its permissions stated here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

from core.models import PriceObservation, utcnow
from scheduler.api.app import create_app
from scheduler.checkpoints.local import LocalObjectStore
from scheduler.store import Store
from scheduler.store.agents import AgentTokens
from scheduler.store.history import HistoryStore

ADMIN_TOKEN = "matrix-admin-token"
AGENT_SECRET = b"matrix-agent-secret"
CALLERS = ("admin", "owner", "other", "revoked", "agent", "none")
SERIES = "aws/us-east-1/us-east-1a/g5.xlarge/spot"
SPEC = {"name": "train", "command": "python train.py",
        "resources": {"gpu_count": 1, "min_vram_gib": 16}}


def users(admin: int, owner: int, other: int) -> dict[str, int]:
    """Statuses for the three user tokens; a revoked token, an agent token (outside
    ``/v1/agent/``) and no token are 401 on every authenticated route."""
    return {"admin": admin, "owner": owner, "other": other,
            "revoked": 401, "agent": 401, "none": 401}


@dataclass(frozen=True)
class Call:
    """How the matrix calls a route: ``path`` with ``{job}`` (alice's job), ``{token}`` (a
    second token of alice's) filled in, a query and a JSON body."""

    path: str
    expect: dict[str, int]
    query: dict[str, Any] = field(default_factory=dict)
    body: dict[str, Any] | None = None


# (method, route path) -> the call and the status each caller gets.
MATRIX: dict[tuple[str, str], Call] = {
    ("GET", "/v1/health"): Call("/v1/health", dict.fromkeys(CALLERS, 200)),
    # jobs: the owner and admins; another user's job is a 404 like an unknown id
    ("POST", "/v1/jobs"): Call("/v1/jobs", users(201, 201, 201), body={"spec": SPEC}),
    ("GET", "/v1/jobs"): Call("/v1/jobs", users(200, 200, 200)),
    ("GET", "/v1/jobs/{job_id}"): Call("/v1/jobs/{job}", users(200, 200, 404)),
    ("POST", "/v1/jobs/{job_id}/cancel"): Call("/v1/jobs/{job}/cancel", users(200, 200, 404)),
    ("GET", "/v1/jobs/{job_id}/logs"): Call("/v1/jobs/{job}/logs", users(200, 200, 404)),
    ("GET", "/v1/events"): Call("/v1/events", users(200, 200, 404), query={"job": "{job}"}),
    ("GET", "/v1/spend"): Call("/v1/spend", users(200, 200, 200), query={"since": "1d"}),
    ("GET", "/v1/cost-report"): Call("/v1/cost-report", users(200, 200, 404),
                                     query={"job": "{job}"}),
    # the market: any user
    ("GET", "/v1/offers"): Call("/v1/offers", users(200, 200, 200)),
    ("GET", "/v1/history"): Call("/v1/history", users(200, 200, 200)),
    ("GET", "/v1/history/points"): Call("/v1/history/points", users(200, 200, 200),
                                        query={"series": SERIES}),
    ("POST", "/v1/plans"): Call("/v1/plans", users(200, 200, 200),
                                body={"spec": SPEC, "compute_hours": 2}),
    # operations: admins (no fleet is configured, so an admin's drain names an unknown host)
    ("GET", "/metrics"): Call("/metrics", users(200, 403, 403)),
    ("GET", "/v1/fleet"): Call("/v1/fleet", users(200, 200, 200)),
    ("POST", "/v1/fleet/{host}/drain"): Call("/v1/fleet/h1/drain", users(404, 403, 403)),
    ("POST", "/v1/fleet/{host}/undrain"): Call("/v1/fleet/h1/undrain", users(404, 403, 403)),
    # agents: only the agent token of the job attempt
    ("POST", "/v1/agent/{instance_id}/report"): Call(
        "/v1/agent/i-1/report", {**users(401, 401, 401), "agent": 200},
        body={"job_id": "{job}", "attempt": 1, "phase": "running", "at": "{now}"}),
    # users, tokens, audit
    ("GET", "/v1/me"): Call("/v1/me", users(200, 200, 200)),
    ("GET", "/v1/users"): Call("/v1/users", users(200, 403, 403)),
    ("POST", "/v1/users"): Call("/v1/users", users(201, 403, 403), body={"name": "carol"}),
    ("PATCH", "/v1/users/{name}"): Call("/v1/users/bob", users(200, 403, 403),
                                        body={"budget_usd": 5.0}),
    ("POST", "/v1/tokens"): Call("/v1/tokens", users(201, 201, 403), body={"user": "alice"}),
    ("GET", "/v1/tokens"): Call("/v1/tokens", users(200, 200, 403), query={"user": "alice"}),
    ("POST", "/v1/tokens/{token_id}/revoke"): Call("/v1/tokens/{token}/revoke",
                                                   users(200, 200, 404)),
    ("GET", "/v1/audit"): Call("/v1/audit", users(200, 403, 403)),
}


def api_routes(app) -> set[tuple[str, str]]:
    """Every (method, path) of the app's API routes, included routers walked (this FastAPI
    keeps an included router as one entry of ``app.routes``); the dashboard's pages under
    ``/ui/`` and the docs are left out (tests/e2e covers the pages)."""
    found: set[tuple[str, str]] = set()

    def walk(routes, prefix: str) -> None:
        for route in routes:
            original = getattr(route, "original_router", None)
            if original is not None:
                walk(original.routes, prefix + route.include_context.prefix)
            elif isinstance(route, APIRoute):
                path = prefix + route.path
                if not path.startswith("/ui"):
                    found.update((m, path) for m in route.methods)

    walk(app.routes, "")
    return found


@dataclass
class World:
    client: TestClient
    tokens: dict[str, str | None]
    job_id: str
    spare_token_id: str


@pytest.fixture
def world(redis_client, tmp_path) -> World:
    store = Store.over(redis_client)
    agent_tokens = AgentTokens(AGENT_SECRET)
    app = create_app(store, LocalObjectStore(tmp_path / "objects"), agent_tokens, ADMIN_TOKEN)
    an_hour_ago = utcnow() - timedelta(hours=1)
    HistoryStore(redis_client).append([PriceObservation(
        series=SERIES, price_usd_per_hour=0.5, observed_at=an_hour_ago)])
    store.users.add("alice")
    store.users.add("bob")
    alice, _ = store.users.create_token("alice", "laptop")
    bob, _ = store.users.create_token("bob")
    revoked, record = store.users.create_token("alice", "old")
    store.users.revoke(record.id)
    _, spare = store.users.create_token("alice", "spare")
    client = TestClient(app)
    submitted = client.post("/v1/jobs", json={"spec": SPEC},
                            headers={"Authorization": f"Bearer {alice}"})
    assert submitted.status_code == 201, submitted.text
    job_id = submitted.json()["id"]
    assert submitted.json()["spec"]["owner"] == "alice"
    tokens = {"admin": ADMIN_TOKEN, "owner": alice, "other": bob, "revoked": revoked,
              "agent": agent_tokens.issue(job_id, 1), "none": None}
    return World(client, tokens, job_id, spare.id)


def _fill(value: Any, world: World) -> Any:
    if isinstance(value, str):
        return (value.replace("{job}", world.job_id).replace("{token}", world.spare_token_id)
                .replace("{now}", utcnow().isoformat()))
    if isinstance(value, dict):
        return {k: _fill(v, world) for k, v in value.items()}
    return value


def test_every_route_has_a_row(redis_client, tmp_path):
    app = create_app(Store.over(redis_client), LocalObjectStore(tmp_path / "objects"),
                     AgentTokens(AGENT_SECRET), ADMIN_TOKEN)
    routes = api_routes(app)
    assert routes, "no API route found: the walk over app.routes no longer works"
    assert sorted(routes - set(MATRIX)) == [], "routes without a row in MATRIX"
    assert sorted(set(MATRIX) - routes) == [], "rows of MATRIX for routes the app lacks"


@pytest.mark.parametrize("method,route", sorted(MATRIX), ids=[f"{m} {p}" for m, p in sorted(MATRIX)])
def test_who_may_call_what(world: World, method: str, route: str):
    """Every caller in turn, on one world per route (the admin first: a change it makes, such
    as a cancel or a revocation, is idempotent for the callers after it)."""
    call = MATRIX[(method, route)]
    wrong = []
    for caller in CALLERS:
        token = world.tokens[caller]
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        response = world.client.request(method, _fill(call.path, world),
                                        params=_fill(call.query, world) or None,
                                        json=_fill(call.body, world), headers=headers)
        if response.status_code != call.expect[caller]:
            wrong.append(f"as {caller}: {response.status_code}, not {call.expect[caller]}: "
                         f"{response.text[:300]}")
        elif response.status_code == 404 and "{job}" in call.path + str(call.query) and \
                response.json() != {"detail": f"no job {world.job_id!r}"}:
            # another user's job is answered exactly as an unknown id would be
            wrong.append(f"as {caller}: a 404 unlike an unknown job's: {response.text[:300]}")
    assert not wrong, "\n".join(wrong)


def test_listings_hold_only_what_the_caller_may_see(world: World):
    """Jobs, events and cost reports: alice sees her job, bob none of it, the admin all."""
    tokens = world.tokens
    bob_job = world.client.post("/v1/jobs", json={"spec": {**SPEC, "name": "bobs"}},
                                headers={"Authorization": f"Bearer {tokens['other']}"}).json()

    def seen(caller: str) -> dict[str, set[str]]:
        headers = {"Authorization": f"Bearer {tokens[caller]}"}
        jobs = world.client.get("/v1/jobs", headers=headers).json()
        events = world.client.get("/v1/events", headers=headers).json()["events"]
        report = world.client.get("/v1/cost-report", headers=headers).json()
        recent = world.client.get("/v1/cost-report", params={"since": "1d"},
                                  headers=headers).json()
        return {"jobs": {j["id"] for j in jobs}, "events": {e["job_id"] for e in events},
                "costs": {r["job"] for r in report["jobs"]}, "count": report["totals"]["jobs"],
                "recent": {r["job"] for r in recent["jobs"]}}

    mine, bobs = {world.job_id}, {bob_job["id"]}
    assert seen("owner") == {"jobs": mine, "events": mine, "costs": mine, "count": 1,
                             "recent": mine}
    assert seen("other") == {"jobs": bobs, "events": bobs, "costs": bobs, "count": 1,
                             "recent": bobs}
    both = mine | bobs
    assert seen("admin") == {"jobs": both, "events": both, "costs": both, "count": 2,
                             "recent": both}
    admin = {"Authorization": f"Bearer {tokens['admin']}"}
    only_bob = world.client.get("/v1/jobs", params={"owner": "bob"}, headers=admin).json()
    assert [j["id"] for j in only_bob] == [bob_job["id"]]
    # a user's owner filter never widens their view
    asked = world.client.get("/v1/jobs", params={"owner": "bob"},
                             headers={"Authorization": f"Bearer {tokens['owner']}"}).json()
    assert asked == []


def test_a_plan_like_another_users_job_is_a_404(world: World):
    headers = {"Authorization": f"Bearer {world.tokens['other']}"}
    answer = world.client.post("/v1/plans", json={"spec": SPEC, "like_job": world.job_id},
                               headers=headers)
    assert answer.status_code == 404
    assert answer.json() == {"detail": f"no job {world.job_id!r}"}


def test_a_users_long_poll_wakes_for_their_events_only(world: World):
    """Events of another user's job do not end a user's wait; the wait stays bounded."""
    alice = {"Authorization": f"Bearer {world.tokens['owner']}"}
    bob = {"Authorization": f"Bearer {world.tokens['other']}"}
    bobs = world.client.post("/v1/jobs", json={"spec": SPEC}, headers=bob).json()["id"]
    cursor = world.client.get("/v1/events", headers=alice).json()["next"]
    world.client.post(f"/v1/jobs/{bobs}/cancel", headers=bob)
    started = time.monotonic()
    waited = world.client.get("/v1/events", params={"after": cursor, "wait_s": 1},
                              headers=alice).json()
    assert waited["events"] == [] and 0.9 <= time.monotonic() - started < 3
    world.client.post(f"/v1/jobs/{world.job_id}/cancel", headers=alice)
    mine = world.client.get("/v1/events", params={"after": waited["next"], "wait_s": 1},
                            headers=alice).json()["events"]
    assert [(e["job_id"], e["owner"], e["message"]) for e in mine] == [
        (world.job_id, "alice", "cancel requested")]
