"""Every dashboard route by every kind of caller: an admin's session, the owner's, another
user's, a revoked token's, an agent token put in the cookie, and no session. A route without a
row here fails the test, so a new page cannot skip its checks."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from fastapi.routing import APIRoute

from scheduler.api.auth import SESSION_COOKIE, csrf_token
from scheduler.store.agents import AgentTokens
from tests.integration.dashboard.conftest import make_job

CALLERS = ("admin", "owner", "other", "revoked", "agent", "none")
LOGIN = 303  # no valid session: redirected to the login page


def users(admin: int, owner: int, other: int) -> dict[str, int]:
    return {"admin": admin, "owner": owner, "other": other,
            "revoked": LOGIN, "agent": LOGIN, "none": LOGIN}


@dataclass(frozen=True)
class Call:
    """``path`` with ``{job}`` (alice's job) and ``{token}`` (a token id of alice's); a form
    body (the session's CSRF token is added for callers with a session)."""

    path: str
    expect: dict[str, int]
    form: dict[str, str] = field(default_factory=dict)


MATRIX: dict[tuple[str, str], Call] = {
    ("GET", "/ui/login"): Call("/ui/login", dict.fromkeys(CALLERS, 200)),
    ("POST", "/ui/login"): Call("/ui/login", dict.fromkeys(CALLERS, 401),
                                form={"token": "not-a-token"}),
    ("POST", "/ui/logout"): Call("/ui/logout", {**users(303, 303, 303)}),
    ("GET", "/ui/"): Call("/ui/", users(200, 200, 200)),
    ("GET", "/ui/jobs"): Call("/ui/jobs", users(200, 200, 200)),
    ("GET", "/ui/jobs/{job_id}"): Call("/ui/jobs/{job}", users(200, 200, 404)),
    ("POST", "/ui/jobs/{job_id}/cancel"): Call("/ui/jobs/{job}/cancel", users(303, 303, 404)),
    ("GET", "/ui/offers"): Call("/ui/offers", users(200, 200, 200)),
    ("GET", "/ui/prices"): Call("/ui/prices", users(200, 200, 200)),
    ("GET", "/ui/budgets"): Call("/ui/budgets", users(200, 200, 200)),
    ("GET", "/ui/fleet"): Call("/ui/fleet", users(200, 200, 200)),
    ("POST", "/ui/fleet/{host}/drain"): Call("/ui/fleet/h1/drain", users(404, 403, 403)),
    ("POST", "/ui/fleet/{host}/undrain"): Call("/ui/fleet/h1/undrain", users(404, 403, 403)),
    ("GET", "/ui/users"): Call("/ui/users", users(200, 403, 403)),
    ("POST", "/ui/users"): Call("/ui/users", users(303, 403, 403), form={"name": "carol"}),
    ("POST", "/ui/users/{name}/tokens"): Call("/ui/users/alice/tokens", users(200, 403, 403)),
    ("POST", "/ui/tokens/{token_id}/revoke"): Call("/ui/tokens/{token}/revoke",
                                                   users(303, 403, 403)),
}


def page_routes(app) -> set[tuple[str, str]]:
    found: set[tuple[str, str]] = set()

    def walk(routes, prefix: str) -> None:
        for route in routes:
            original = getattr(route, "original_router", None)
            if original is not None:
                walk(original.routes, prefix + route.include_context.prefix)
            elif isinstance(route, APIRoute) and (prefix + route.path).startswith("/ui"):
                found.update((m, prefix + route.path) for m in route.methods - {"HEAD"})

    walk(app.routes, "")
    return found


def test_every_dashboard_route_has_a_row(dash):
    assert page_routes(dash.app) == set(MATRIX)


@pytest.mark.parametrize("route", sorted(MATRIX), ids=lambda r: f"{r[0]} {r[1]}")
def test_who_may_call_what(dash, route):
    """Every caller in turn on one store per route (the admin first: its changes, a cancel or
    a revocation, are idempotent for the callers after it)."""
    job = make_job(dash.store, "train", "alice", finished=False)
    _, spare = dash.store.users.create_token("alice", label="spare")
    revoked_token, gone = dash.store.users.create_token("bob", label="gone")
    dash.store.users.revoke(gone.id)
    cookies = {"admin": dash.tokens["admin"], "owner": dash.tokens["alice"],
               "other": dash.tokens["bob"], "revoked": revoked_token,
               "agent": AgentTokens(b"secret").issue(job.id, 1)}
    call = MATRIX[route]
    path = call.path.format(job=job.id, token=spare.id)
    wrong = []
    for caller in CALLERS:
        client = dash.browser()
        if caller in cookies:
            client.cookies.set(SESSION_COOKIE, cookies[caller])
        if route[0] == "GET":
            answer = client.get(path)
        else:
            # Every caller with a cookie sends that cookie's own CSRF token: what is checked
            # here is who they are, not the CSRF check (tested on its own).
            form = {**call.form, **({"csrf_token": csrf_token(cookies[caller])}
                                    if caller in cookies else {})}
            answer = client.post(path, data=form)
        if answer.status_code != call.expect[caller]:
            wrong.append(f"as {caller}: {answer.status_code}, not {call.expect[caller]}: "
                         f"{answer.text[:300]}")
        elif answer.status_code == LOGIN and caller not in ("admin", "owner", "other") \
                and not answer.headers["location"].startswith("/ui/login"):
            wrong.append(f"as {caller}: redirected to {answer.headers['location']}")
    assert not wrong, "\n".join(wrong)
