"""The Budgets, Fleet and Users pages through the real API app and real Redis, signed in by
the dashboard's session cookie: who sees what, the figures equal the users API's, forms need
the session's CSRF token, and a token created on the Users page works for the API until it
is revoked there."""

from __future__ import annotations

import subprocess
from datetime import timedelta

import pytest

from core.models import Job, JobState, Placement, utcnow
from providers.fleet.provider import FleetProvider
from providers.fleet.setup import from_config
from scheduler.controller.context import ProviderRegistry
from scheduler.store.budgets import BudgetSettings
from scheduler.store.fleet import FleetLedger
from tests.factories.jobs import spec
from tests.factories.offers import offer
from tests.fixtures.redis_server import free_port
from tests.integration.dashboard import pages_fixtures
from tests.integration.dashboard.pages_fixtures import parse

# The fixtures, under the names tests ask for.
pages, store = pages_fixtures.dash, pages_fixtures.store


def running_job(store, name: str, owner: str, budget_usd: float | None, hours: float) -> Job:
    """An active job of ``owner`` running ``hours`` on a $0.918/h spot offer."""
    now = utcnow()
    start = now - timedelta(hours=hours)
    job = Job(id=f"{name}-0a0b0c", spec=spec(name=name, owner=owner, budget_usd=budget_usd),
              created_at=start, updated_at=start)
    job.record(JobState.PENDING, "submitted", at=start)
    job.placement = Placement(attempt=1, offer=offer(), client_token=f"{job.id}-1",
                              decided_at=start, instance_id="i-1", started_at=start)
    job.attempt = 1
    job.record(JobState.RUNNING, "running on i-1", at=start)
    return store.jobs.create(job)


def rows_by(page, attr: str) -> dict:
    return {r.attrs[f"data-{attr}"]: r for r in page.find_all("tr", **{f"data_{attr}": True})}


# Budgets


@pytest.fixture
def budgets(pages):
    s = pages.store
    s.users.update("alice", budget_usd=10.0)
    s.spend.publish_settings(BudgetSettings(users={"bob": 4.0, "carol": 100.0}))
    # A stored job's spend goes to its owner's ledger: alice's two running jobs add $0.918
    # each to a finished one's $6.664, 85 % of her $10; bob is past his $4.
    s.spend.record("alice", "a-1", 8.5 - 2 * 0.918)
    s.spend.record("bob", "b-1", 4.0)
    running_job(s, "alice-run", "alice", 1.0, 1.0)   # $0.918 of $1: 91.8 %
    running_job(s, "bob-run", "bob", 10.0, 1.0)
    running_job(s, "nobudget", "alice", None, 1.0)
    return pages


def test_budgets_of_users_equal_the_users_api_and_show_their_marks(budgets):
    page = parse(budgets.session("admin").get("/ui/budgets").text)
    users = rows_by(page.find("table", data_testid="user-budgets"), "user")
    assert set(users) == {"admin", "alice", "bob", "carol"}
    api = {u["name"]: u for u in budgets.bearer().get("/v1/users").json()}
    for name in ("alice", "bob"):
        me = budgets.bearer(name).get("/v1/me").json()
        row = users[name]
        assert float(row.find("td", data_field="spent").attrs["data-usd"]) == me["spent_usd"] \
            == api[name]["spent_usd"]
        assert float(row.find("td", data_field="budget").attrs["data-usd"]) == me["budget_usd"]
    assert "budget-80" in users["alice"].attrs["class"]
    assert "budget-100" in users["bob"].attrs["class"]
    assert "budget-none" in users["admin"].attrs["class"]
    assert [m.attrs["data-mark"] for m in users["alice"].find_all("span", data_hit="1")] == ["80"]
    assert [m.attrs["data-mark"] for m in users["bob"].find_all("span", data_hit="1")] \
        == ["80", "90", "100"]
    meter = users["alice"].find("meter")
    assert float(meter.attrs["value"]) == pytest.approx(0.85) and meter.attrs["low"] == "0.8"
    assert "user record" in users["alice"].text and "daemon config" in users["bob"].text


def test_budgets_of_running_jobs(budgets):
    page = parse(budgets.session("admin").get("/ui/budgets").text)
    jobs = rows_by(page.find("table", data_testid="job-budgets"), "job")
    assert set(jobs) == {"alice-run-0a0b0c", "bob-run-0a0b0c"}  # the one without a budget: not
    row = jobs["alice-run-0a0b0c"]
    spent = float(row.find("td", data_field="spent").attrs["data-usd"])
    api = budgets.bearer().get("/v1/jobs/alice-run-0a0b0c").json()
    assert spent == pytest.approx(api["derived"]["cost_usd"], abs=1e-4)  # a second passes between reads
    assert spent == pytest.approx(0.918, rel=0.01) and "budget-90" in row.attrs["class"]


def test_a_user_sees_only_their_own_budgets(budgets):
    html = budgets.session("alice").get("/ui/budgets").text
    page = parse(html)
    assert set(rows_by(page.find("table", data_testid="user-budgets"), "user")) == {"alice"}
    assert set(rows_by(page.find("table", data_testid="job-budgets"), "job")) \
        == {"alice-run-0a0b0c"}
    assert "bob" not in html and "carol" not in html


@pytest.mark.parametrize("path", ["/ui/budgets", "/ui/fleet", "/ui/users", "/ui/offers",
                                  "/ui/prices"])
def test_pages_have_no_inline_script_or_style(budgets, path):
    """The CSP refuses both: a page that needed them would be broken in a browser."""
    page = parse(budgets.session("admin").get(path).text)
    assert not [e for e in page.find_all() if "style" in e.attrs or any(
        a.startswith("on") for a in e.attrs)]
    assert all("src" in s.attrs or s.attrs.get("type") == "application/json"
               for s in page.find_all("script"))
    assert not page.find_all("style")


# Fleet


@pytest.fixture
def fleet(pages, tmp_path, redis_client):
    """A fleet of two hosts that do not answer (a closed port: the rows say so at once), with
    configured GPUs."""
    key = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "", "-f", str(key)],
                   check=True)
    host_key = " ".join(key.with_suffix(".pub").read_text().split()[:2])
    entry = {"kind": "fleet", "hosts": [
        {"name": name, "address": "127.0.0.1", "port": free_port(), "user": "ga",
         "identity_file": str(key), "host_key": host_key,
         "gpus": [{"model": "RTX4090", "count": 2}]}
        for name in ("gpu-a", "gpu-b")]}
    adapter = from_config(entry, tmp_path, tmp_path)
    assert isinstance(adapter, FleetProvider)
    pages.app.state.providers = ProviderRegistry([adapter])
    yield pages, adapter
    adapter.close()


def test_fleet_page_lists_the_apis_hosts(fleet):
    pages, adapter = fleet
    for user in ("admin", "alice"):
        page = parse(pages.session(user).get("/ui/fleet").text)
        hosts = rows_by(page.find("table", data_testid="fleet"), "host")
        assert set(hosts) == {"gpu-a", "gpu-b"}
        api = {h["host"]: h for h in pages.bearer().get("/v1/fleet").json()["hosts"]}
        for name, row in hosts.items():
            assert int(row.find("td", data_field="gpus_free").text) == api[name]["gpus_free"]
            assert row.find("td", data_field="reachable").text.startswith("no")
            assert "2x RTX4090" in row.text
        assert bool(page.find_all("button", data_testid="drain-gpu-a")) == (user == "admin")


def test_admin_drains_and_undrains_from_the_page(fleet):
    pages, adapter = fleet
    admin, csrf = pages.session("admin"), pages.csrf("admin")
    ledger = FleetLedger(pages.store.redis, adapter.name)
    answer = admin.post("/ui/fleet/gpu-a/drain", data={"csrf_token": csrf, "fleet": adapter.name})
    assert answer.status_code == 303 and answer.headers["location"] == "/ui/fleet"
    assert set(ledger.drained()) == {"gpu-a"}
    page = parse(admin.get("/ui/fleet").text)
    row = rows_by(page, "host")["gpu-a"]
    assert row.find("td", data_field="state").text == "drained"
    assert page.find_all("button", data_testid="undrain-gpu-a")
    assert pages.bearer().get("/v1/fleet").json()["hosts"][0]["drained"] is True
    assert admin.post("/ui/fleet/gpu-a/undrain", data={"csrf_token": csrf}).status_code == 303
    assert ledger.drained() == {}
    missing = admin.post("/ui/fleet/gpu-z/drain", data={"csrf_token": csrf})
    assert missing.status_code == 404
    assert parse(missing.text).find("p", role="alert").text.startswith("no fleet host 'gpu-z'")


def test_a_user_may_not_drain_and_forms_need_the_csrf_token(fleet):
    pages, adapter = fleet
    ledger = FleetLedger(pages.store.redis, adapter.name)
    alice = pages.session("alice")
    denied = alice.post("/ui/fleet/gpu-a/drain", data={"csrf_token": pages.csrf("alice")})
    assert denied.status_code == 403 and parse(denied.text).find(data_testid="forbidden")
    assert pages.session("admin").post("/ui/fleet/gpu-a/drain", data={}).status_code == 403
    wrong = pages.session("admin").post("/ui/fleet/gpu-a/drain",
                                        data={"csrf_token": pages.csrf("alice")})
    assert wrong.status_code == 403
    assert ledger.drained() == {}


def test_fleet_page_without_a_fleet_says_so(pages):
    page = parse(pages.session("alice").get("/ui/fleet").text)
    assert "No fleet is configured" in page.find(data_testid="no-fleet").text


# Users


def test_users_page_is_for_admins(pages):
    denied = pages.session("alice").get("/ui/users")
    assert denied.status_code == 403 and "need an admin" in denied.text
    for path, data in (("/ui/users", {"name": "mallory"}), ("/ui/users/alice/tokens", {}),
                       ("/ui/tokens/abc/revoke", {})):
        answer = pages.session("alice").post(path, data={**data, "csrf_token": pages.csrf("alice")})
        assert answer.status_code == 403, path
    assert pages.store.users.get("mallory") is None
    assert len(pages.store.users.tokens("alice")) == 1


def test_users_page_lists_users_with_the_apis_figures(pages):
    pages.store.users.update("bob", budget_usd=20.0)
    pages.store.spend.record("bob", "j", 3.25)
    page = parse(pages.session("admin").get("/ui/users").text)
    users = rows_by(page.find("table", data_testid="users"), "user")
    api = {u["name"]: u for u in pages.bearer().get("/v1/users").json()}
    assert set(users) == set(api) == {"admin", "alice", "bob"}
    for name, row in users.items():
        assert row.find("td", data_field="role").text == api[name]["role"]
        assert float(row.find("td", data_field="spent").attrs["data-usd"]) == api[name]["spent_usd"]
    assert float(users["bob"].find("td", data_field="budget").attrs["data-usd"]) == 20.0
    tokens = {t["id"] for t in pages.bearer().get("/v1/tokens", params={"user": "alice"}).json()}
    assert set(rows_by(users["alice"], "token")) == tokens


def test_add_user_create_token_use_it_and_revoke_it(pages):
    admin, csrf = pages.session("admin"), pages.csrf("admin")
    added = admin.post("/ui/users", data={"csrf_token": csrf, "name": "dave",
                                          "budget_usd": "12.5"})
    assert added.status_code == 303 and added.headers["location"] == "/ui/users"
    me = pages.bearer().get("/v1/users").json()
    assert {"name": "dave", "role": "user", "budget_usd": 12.5} .items() <= \
        next(u for u in me if u["name"] == "dave").items()
    created = admin.post("/ui/users/dave/tokens", data={"csrf_token": csrf, "label": "laptop"})
    assert created.status_code == 200
    page = parse(created.text)
    token, token_id = page.find(data_testid="new-token").text, \
        page.find(data_testid="new-token-id").text
    assert "shown only this once" in page.find("div", role="alert").text
    assert pages.store.redis.hget("ga:tokens", token) is None  # only its hash is kept
    from fastapi.testclient import TestClient
    dave = TestClient(pages.app, headers={"Authorization": f"Bearer {token}"})
    assert dave.get("/v1/me").json()["user"] == "dave"
    users = parse(admin.get("/ui/users").text)
    assert token not in admin.get("/ui/users").text  # never shown again
    assert rows_by(rows_by(users, "user")["dave"], "token")[token_id]
    revoked = admin.post(f"/ui/tokens/{token_id}/revoke", data={"csrf_token": csrf})
    assert revoked.status_code == 303
    assert dave.get("/v1/me").status_code == 401
    row = rows_by(parse(admin.get("/ui/users").text), "token")[token_id]
    assert "revoked" in row.attrs["class"]


def test_posting_the_create_token_form_again_makes_no_second_token(pages):
    admin, csrf = pages.session("admin"), pages.csrf("admin")
    form = parse(admin.get("/ui/users").text).find("form", action="/ui/users/alice/tokens")
    once = form.find("input", name="once").attrs["value"]
    data = {"csrf_token": csrf, "label": "from-ui", "once": once}
    first = admin.post("/ui/users/alice/tokens", data=data)
    made = parse(first.text).find(data_testid="new-token-id").text
    again = admin.post("/ui/users/alice/tokens", data=data)  # a reload of the result page
    assert first.status_code == 200 and again.status_code == 409
    assert made in parse(again.text).find("p", role="alert").text
    assert [r.id for r in pages.store.users.tokens("alice") if r.label == "from-ui"] == [made]
    fresh = parse(admin.get("/ui/users").text).find("form", action="/ui/users/alice/tokens")
    assert fresh.find("input", name="once").attrs["value"] != once


def test_user_form_errors_name_the_field(pages):
    admin, csrf = pages.session("admin"), pages.csrf("admin")
    taken = admin.post("/ui/users", data={"csrf_token": csrf, "name": "alice"})
    assert taken.status_code == 409 and "already exists" in parse(taken.text).find(
        "p", role="alert").text
    bad = admin.post("/ui/users", data={"csrf_token": csrf, "name": "Bad Name!"})
    assert bad.status_code == 422 and parse(bad.text).find("p", role="alert").text.startswith("name:")
    budget = admin.post("/ui/users", data={"csrf_token": csrf, "name": "erin", "budget_usd": "-3"})
    assert budget.status_code == 422 and "budget_usd" in budget.text
    assert pages.store.users.get("erin") is None
    unknown = admin.post("/ui/users/nobody/tokens", data={"csrf_token": csrf})
    assert unknown.status_code == 404


def test_user_forms_need_the_csrf_token(pages):
    admin = pages.session("admin")
    assert admin.post("/ui/users", data={"name": "frank"}).status_code == 403
    assert admin.post("/ui/users/alice/tokens", data={"csrf_token": "0" * 64}).status_code == 403
    assert pages.store.users.get("frank") is None
    assert len(pages.store.users.tokens("alice")) == 1


def test_audit_shows_the_latest_changes(pages):
    admin, csrf = pages.session("admin"), pages.csrf("admin")
    for i in range(3):
        admin.post("/ui/users", data={"csrf_token": csrf, "name": f"u{i}"})
    page = parse(admin.get("/ui/users").text)
    rows = page.find("table", data_testid="audit").find_all("tr", data_audit=True)
    newest = rows[0].text
    assert "POST /ui/users" in newest and "admin" in newest and "303" in newest
    oldest_first = pages.bearer().get("/v1/audit").json()["entries"]
    assert [r.attrs["data-audit"] for r in rows] == [e["id"] for e in reversed(oldest_first)]


def test_users_page_escapes_labels(pages):
    pages.store.users.create_token("bob", "<img src=x onerror=alert(1)>")
    html = pages.session("admin").get("/ui/users").text
    assert "<img src=x" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html
