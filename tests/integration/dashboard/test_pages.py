"""Dashboard pages as a signed-in browser gets them: login and logout, the Overview, the Jobs
table and the job page, what each user may see, escaping of everything a job controls,
CSRF and the security headers."""

from __future__ import annotations

import html
import json
import re

import pytest

from core.models import JobState, utcnow
from scheduler.api.auth import SESSION_COOKIE
from scheduler.services import jobs as job_service
from tests.integration.dashboard.conftest import make_job

XSS = "<script>alert(1)</script>"


def _text(fragment: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


def _cells(page: str, job_id: str) -> dict[str, str]:
    """The text of each data-field cell of the table row of ``job_id``."""
    row = re.search(rf'<tr data-job-id="{re.escape(job_id)}">(.*?)</tr>', page, re.S)
    assert row, f"no row for {job_id}"
    cells = re.findall(r'<td data-field="(\w+)"[^>]*>(.*?)</td>', row.group(1), re.S)
    return {k: _text(v) for k, v in cells}


# -- login and logout ------------------------------------------------------------------------

def test_a_page_without_a_session_redirects_to_the_login_with_next(dash):
    answer = dash.browser().get("/ui/jobs?state=running")
    assert answer.status_code == 303
    assert answer.headers["location"] == "/ui/login?next=/ui/jobs"


def test_login_sets_a_strict_http_only_cookie_and_goes_to_next(dash):
    answer = dash.browser().post("/ui/login", data={"token": dash.tokens["alice"],
                                                   "next": "/ui/jobs"})
    assert answer.status_code == 303
    assert answer.headers["location"] == "/ui/jobs"
    cookie = answer.headers["set-cookie"]
    assert cookie.startswith(f"{SESSION_COOKIE}={dash.tokens['alice']};")
    for part in ("HttpOnly", "SameSite=strict", "Path=/", "Max-Age=43200"):
        assert part.lower() in cookie.lower()
    assert "secure" not in cookie.lower()  # plain http here


def test_login_over_https_sets_a_secure_cookie(dash):
    client = dash.browser()
    client.base_url = "https://testserver"
    answer = client.post("https://testserver/ui/login", data={"token": dash.tokens["alice"]})
    assert answer.status_code == 303
    assert "secure" in answer.headers["set-cookie"].lower()


def test_login_never_sends_the_browser_to_another_site(dash):
    for bad in ("https://evil.example/ui/", "//evil.example/ui", "/\\evil.example",
                "/jobs", "/ui\r\nSet-Cookie: x=1", "javascript:alert(1)"):
        answer = dash.browser().post("/ui/login", data={"token": dash.tokens["bob"],
                                                       "next": bad})
        assert answer.status_code == 303, bad
        assert answer.headers["location"] == "/ui/", bad


def test_login_is_audited_under_the_user_who_logged_in(dash):
    dash.browser().post("/ui/login", data={"token": dash.tokens["alice"]})
    entries = [e for e in dash.store.audit.read() if e["path"] == "/ui/login"]
    assert entries and entries[-1]["user"] == "alice" and entries[-1]["status"] == 303


def test_a_wrong_or_revoked_token_gets_401_without_its_echo(dash):
    answer = dash.browser().post("/ui/login", data={"token": "gat_000000000000_" + "x" * 30})
    assert answer.status_code == 401
    assert "invalid or revoked token" in answer.text
    assert "x" * 30 not in answer.text
    assert "set-cookie" not in answer.headers
    record = dash.store.users.tokens("bob")[0]
    dash.store.users.revoke(record.id)
    answer = dash.browser().post("/ui/login", data={"token": dash.tokens["bob"]})
    assert answer.status_code == 401
    assert dash.tokens["bob"] not in answer.text


def test_logout_needs_the_csrf_token_and_drops_the_cookie(dash):
    client = dash.browser("alice")
    assert client.post("/ui/logout").status_code == 403
    answer = client.post("/ui/logout", data={"csrf_token": dash.csrf("alice")})
    assert answer.status_code == 303
    assert answer.headers["location"] == "/ui/login"
    assert answer.headers["set-cookie"].startswith(f'{SESSION_COOKIE}=""')
    assert "max-age=0" in answer.headers["set-cookie"].lower()


# -- the Jobs table and the job page ---------------------------------------------------------

def test_jobs_table_shows_the_api_figures_of_each_job(dash):
    job = make_job(dash.store, "train", "alice")
    api = dash.browser().get(f"/v1/jobs/{job.id}", headers={
        "Authorization": f"Bearer {dash.tokens['alice']}"}).json()
    page = dash.browser("alice").get("/ui/jobs")
    assert page.status_code == 200
    cells = _cells(page.text, job.id)
    d = api["derived"]
    assert cells["state"] == "succeeded"
    assert cells["name"] == "train"
    assert cells["owner"] == "alice"
    assert cells["where"] == "aws/us-west-2/us-west-2b p3.2xlarge spot"
    assert cells["price"] == "$0.9180"
    # 1 h at $0.918 + 1 h at $1.20 + 30 min at $0.918
    assert d["cost_usd"] == 2.577
    assert cells["cost"] == f"${d['cost_usd']:,.4f}" == "$2.5770"
    saved = d["on_demand_cost_usd"] - d["cost_usd"]
    assert cells["saved"] == f"${saved:,.4f} ({d['savings_pct']:.1f}%)"
    assert cells["cost_per_1k"] == "-"


def test_users_see_only_their_own_jobs_and_admins_everyone_s(dash):
    mine = make_job(dash.store, "mine", "alice")
    theirs = make_job(dash.store, "theirs", "bob")
    alice = dash.browser("alice").get("/ui/jobs").text
    assert f'data-job-id="{mine.id}"' in alice
    assert theirs.id not in alice
    admin = dash.browser("admin").get("/ui/jobs").text
    assert f'data-job-id="{mine.id}"' in admin and f'data-job-id="{theirs.id}"' in admin
    assert dash.browser("alice").get(f"/ui/jobs/{theirs.id}").status_code == 404
    assert dash.browser("alice").get("/ui/jobs/no-such-job").status_code == 404
    assert dash.browser("admin").get(f"/ui/jobs/{theirs.id}").status_code == 200


def test_jobs_filters_are_query_parameters(dash):
    done = make_job(dash.store, "finished-run", "alice")
    running = make_job(dash.store, "ongoing-run", "bob", finished=False)
    admin = dash.browser("admin")

    def shown(query: str) -> set[str]:
        return set(re.findall(r'<tr data-job-id="([^"]+)"', admin.get(f"/ui/jobs?{query}").text))

    assert shown("") == {done.id, running.id}
    assert shown("state=running") == {running.id}
    assert shown("state=active") == {running.id}
    assert shown("state=finished") == {done.id}
    assert shown("owner=alice") == {done.id}
    assert shown("q=ONGOING") == {running.id}
    assert shown("q=nothing-like-it") == set()
    assert shown("state=bogus") == {done.id, running.id}  # an unknown state filters nothing
    # A user's owner filter is ignored: she sees her own jobs whatever she asks.
    assert set(re.findall(r'<tr data-job-id="([^"]+)"',
                          dash.browser("alice").get("/ui/jobs?owner=bob").text)) == {done.id}


def test_job_page_cost_equals_the_summary_and_the_table(dash):
    job = make_job(dash.store, "train", "alice")
    summary = job_service.summary(dash.store.jobs.get(job.id))
    page = dash.browser("alice").get(f"/ui/jobs/{job.id}").text
    m = re.search(r'<span data-field="cost" data-usd="([^"]+)">([^<]+)</span>', page)
    assert m, page
    assert float(m.group(1)) == summary["derived"]["cost_usd"]
    assert m.group(2) == _cells(dash.browser("alice").get("/ui/jobs").text, job.id)["cost"]
    assert 'id="chart-placements"' in page and 'id="chart-gpu"' in page
    assert "preemption notice; migrating" in page  # the move's reason
    assert "preempted" in page


def test_placements_chart_is_a_step_series_of_the_price_paid(dash):
    job = make_job(dash.store, "train", "alice")
    page = dash.browser("alice").get(f"/ui/jobs/{job.id}").text
    m = re.search(r'<script type="application/json" id="data-placements">(.*?)</script>',
                  page, re.S)
    chart = json.loads(m.group(1))
    assert chart["y_label"] == "USD/h"
    first, second = chart["series"]
    assert first["step"] and second["step"]
    t0 = job.placements[0].started_at.timestamp()
    assert chart["x"][:3] == [t0, t0 + 3600, t0 + 7200]
    assert first["values"][:3] == [0.918, 1.2, 1.2]
    assert second["values"][:3] == [None, None, None]
    assert second["values"][-2:] == [0.918, 0.918] and first["values"][-1] is None


def test_job_page_lists_the_log_tail_and_the_job_s_events(dash):
    job = make_job(dash.store, "train", "alice")
    dash.store.jobs.append_logs(job.id, [f"line {i}" for i in range(300)])
    page = dash.browser("alice").get(f"/ui/jobs/{job.id}").text
    assert "line 299" in page and "line 100" in page and "line 99\n" not in page
    ids = re.findall(r'<li data-event-id="([0-9-]+)"', page)
    assert len(ids) == len(job.events)
    assert ids == sorted(ids, reverse=True)  # newest first
    assert re.search(r'<ul id="events"[^>]* data-cursor="[0-9-]+"', page)


def test_cancel_needs_csrf_and_the_owner_or_an_admin(dash):
    job = make_job(dash.store, "train", "alice", finished=False)
    alice = dash.browser("alice")
    page = alice.get(f"/ui/jobs/{job.id}").text
    assert f'action="/ui/jobs/{job.id}/cancel"' in page
    assert f'name="csrf_token" value="{dash.csrf("alice")}"' in page
    assert alice.post(f"/ui/jobs/{job.id}/cancel").status_code == 403
    assert not dash.store.jobs.get(job.id).cancel_requested
    bob = dash.browser("bob")
    answer = bob.post(f"/ui/jobs/{job.id}/cancel", data={"csrf_token": dash.csrf("bob")})
    assert answer.status_code == 404
    assert not dash.store.jobs.get(job.id).cancel_requested
    answer = alice.post(f"/ui/jobs/{job.id}/cancel", data={"csrf_token": dash.csrf("alice")})
    assert answer.status_code == 303
    assert answer.headers["location"] == f"/ui/jobs/{job.id}"
    assert dash.store.jobs.get(job.id).cancel_requested
    assert "cancel requested" in alice.get(f"/ui/jobs/{job.id}").text


# -- the Overview ----------------------------------------------------------------------------

def test_overview_shows_active_jobs_spend_budgets_and_events_of_the_user(dash):
    mine = make_job(dash.store, "mine", "alice", finished=False)
    theirs = make_job(dash.store, "theirs", "bob", finished=False)
    dash.store.users.update("alice", budget_usd=10.0)
    dash.store.users.update("bob", budget_usd=5.0)
    dash.store.spend.record("alice", mine.id, 8.5)
    dash.store.spend.record("bob", theirs.id, 6.0)
    page = dash.browser("alice").get("/ui/")
    assert page.status_code == 200
    text = page.text
    assert f'data-job-id="{mine.id}"' in text and theirs.id not in text
    assert 'data-user="alice" class="level-80"' in text
    assert 'data-user="bob"' not in text
    burn = _text(re.search(r'data-testid="burn-rate">(.*?)</div>', text, re.S).group(1))
    assert "$0.92/h" in burn and "1 placement running" in burn
    assert '<meter min="0" max="11.0"' in text and 'value="8.5"' in text
    events = re.findall(r'<li data-event-id="[0-9-]+" data-job-id="([^"]+)"', text)
    assert events and set(events) == {mine.id}
    admin = dash.browser("admin").get("/ui/").text
    assert 'data-user="bob" class="level-100"' in admin
    assert f'data-job-id="{theirs.id}"' in admin
    # Spend tiles are what was billed in the window (GET /v1/spend), whenever the job was
    # created: alice's job started before the month and runs on, so the month has spend.
    billed = dash.browser().get("/v1/spend", params={"since": utcnow().strftime("%Y-%m-01")},
                                headers={"Authorization": f"Bearer {dash.tokens['alice']}"})
    tile = _text(re.search(r'data-testid="spend-month">(.*?)</div>', text, re.S).group(1))
    shown = float(re.search(r"\$([0-9,.]+)", tile).group(1).replace(",", ""))
    assert billed.json()["compute_usd"] > 0
    assert shown == pytest.approx(billed.json()["compute_usd"], abs=0.01)  # the job runs on
    assert "billed to 1 job" in tile


# -- escaping and headers --------------------------------------------------------------------

def test_markup_from_a_job_is_text_everywhere(dash):
    job = make_job(dash.store, "train", "alice", finished=False, message=XSS)
    dash.store.jobs.append_logs(job.id, [XSS, "<img src=x onerror=alert(2)>"])
    alice = dash.browser("alice")
    for path in ("/ui/", f"/ui/jobs/{job.id}", f"/ui/jobs?q={XSS}"):
        answer = alice.get(path)
        assert answer.status_code == 200, path
        assert "<script>alert" not in answer.text, path
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in answer.text, path
        assert "<img src=x" not in answer.text
        csp = answer.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
        assert answer.headers["x-frame-options"] == "DENY"
        assert answer.headers["cache-control"] == "no-store"


def test_chart_data_blocks_cannot_close_their_script_element(dash):
    job = make_job(dash.store, "train", "alice")
    page = dash.browser("alice").get(f"/ui/jobs/{job.id}").text
    for block in re.findall(r'<script type="application/json" id="[^"]+">(.*?)</script>',
                            page, re.S):
        assert "<" not in block
        json.loads(block)


def test_a_state_changing_page_request_without_csrf_is_refused(dash):
    job = make_job(dash.store, "train", "alice", finished=False)
    answer = dash.browser("alice").post(f"/ui/jobs/{job.id}/cancel",
                                        data={"csrf_token": "0" * 64})
    assert answer.status_code == 403
    assert dash.store.jobs.get(job.id).state is JobState.RUNNING


def test_gpu_chart_has_each_attempt_s_reported_sample(dash):
    from core.models.agents import AgentPhase, AgentReport
    from core.models.work import GpuSample

    job = make_job(dash.store, "train", "alice", finished=False)
    at = utcnow()
    sample = GpuSample(gpus=1, util_pct=87.5, max_util_pct=99, memory_used_gib=12,
                       memory_total_gib=16, window_s=2, readings=4, at=at)
    dash.store.agents.save_report(AgentReport(job_id=job.id, attempt=2,
                                              phase=AgentPhase.RUNNING, at=at, gpu=sample))
    page = dash.browser("alice").get(f"/ui/jobs/{job.id}").text
    m = re.search(r'<script type="application/json" id="data-gpu">(.*?)</script>', page, re.S)
    chart = json.loads(m.group(1))
    assert chart["x"] == [at.timestamp()]
    assert [s["values"] for s in chart["series"]] == [[87.5], [75.0]]


def test_a_token_a_cookie_cannot_carry_is_refused_at_login_not_looped(dash):
    odd = "daemon token; with spaces"
    dash.store.users.register_bootstrap(odd)
    assert dash.store.users.resolve(odd) is not None
    answer = dash.browser().post("/ui/login", data={"token": odd})
    assert answer.status_code == 400
    assert "set-cookie" not in answer.headers
    assert odd not in answer.text
