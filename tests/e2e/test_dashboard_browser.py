"""The dashboard in a real headless Chromium (tests/fixtures/browser.py) against one real daemon
on the demo market, shared by the module: the admin runs the demo's job, a second user "alice"
(made through the users and tokens API) runs her own jobs, one of which prints markup.

Checked in the browser: login with a token, the demo job's cost on the jobs table and the job
page equal to ``schedctl status``, charts drawn with data, another user's job absent (and its
page a 404), a job's output shown as text and never run as markup, the security headers and the
session cookie's flags, logout. Every page's console must stay free of errors and CSP
violations; screenshots land in test-artifacts/dashboard/.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.config import examples_dir
from providers.replay.provider import ReplayProvider
from scheduler.cli.bundle import load_spec_file, pack_spec
from scheduler.daemon import read_daemon_info
from tests.e2e.harness import TERMINAL, DaemonProcess
from tests.fixtures.browser import watched_page
from tests.fixtures.waiting import wait_until

pytestmark = pytest.mark.e2e
DEMO_SPEC = examples_dir() / "charlm-job.yaml"
MARKET = examples_dir() / "market.yaml"
SCRIPT_LINE = "<script>window.__pwned=1</script>"
IMG_LINE = "<img src=x onerror=window.__pwned=1>"
# A job whose every free-text field a page may show carries markup: the command (and so the
# log lines it prints, shown in the log tail and, as it exits non-zero, in the failure's
# block) and an environment value. Names cannot hold '<' (the spec refuses).
XSS_SPEC = {
    "name": "x-script",
    "command": f"printf '%s\\n' '{SCRIPT_LINE}' '{IMG_LINE}'; exit 3",
    "env": {"NOTE": "<script>window.__pwned=2</script><b>bold</b>"},
    "resources": {"gpu_count": 1, "min_vram_gib": 16},
}
# The demo's job, shorter than the demo's 45,000 steps (a module's budget): still long enough
# that the market's first reclaim, ~25 s after the daemon starts, usually catches it.
DEMO_JOB_STEPS = "20000"
ALICE_JOB_STEPS = "2000"


@dataclass
class Dashboard:
    daemon: DaemonProcess
    url: str
    admin_token: str
    demo_job: str  # the admin's

    def api(self, token: str | None = None) -> httpx.Client:
        """An API client with ``token`` (default: the admin's)."""
        return httpx.Client(base_url=self.url, timeout=10,
                            headers={"Authorization": f"Bearer {token or self.admin_token}"})

    def wait_terminal(self, job_id: str, timeout_s: float = 240) -> dict[str, Any]:
        with self.api() as api:
            return wait_until(
                lambda: (j := api.get(f"/v1/jobs/{job_id}").json())["state"] in TERMINAL and j,
                timeout_s, f"job {job_id} to end", interval_s=0.5,
                detail=self.daemon.log_tail)


@dataclass
class Alice:
    token: str
    job: str  # a small run of the demo's training job
    xss_job: str  # prints markup


def _submit(api: httpx.Client, raw: dict[str, Any]) -> str:
    r = api.post("/v1/jobs", json={"spec": raw, "bundle_b64": pack_spec(raw)})
    assert r.status_code in (200, 201), r.text
    return r.json()["id"]


@pytest.fixture(scope="module")
def dash(tmp_path_factory) -> Dashboard:
    """One daemon on the demo market for the module, running the demo's job as the admin
    (the daemon's own token)."""
    home = tmp_path_factory.mktemp("dashboard") / "home"
    daemon = DaemonProcess(home, MARKET)
    try:
        daemon.start()
        url = read_daemon_info(home)["api_url"]
        admin_token = (home / "api-token").read_text().strip()
        d = Dashboard(daemon, url, admin_token, "")
        with d.api() as admin:
            raw = load_spec_file(DEMO_SPEC)
            raw["env"] = {**raw.get("env", {}), "CHARLM_STEPS": DEMO_JOB_STEPS}
            d.demo_job = _submit(admin, raw)
        yield d
    finally:
        daemon.stop()
        ReplayProvider(MARKET, home / "replay").shutdown_cloud()


@pytest.fixture(scope="module", autouse=True)
def alice(dash) -> Alice:
    """User "alice" (not an admin) and a token of hers, made through the API by the admin,
    and her two jobs, submitted with her token. Used by the whole module so her jobs run
    while the first tests do."""
    with dash.api() as admin:
        r = admin.post("/v1/users", json={"name": "alice", "admin": False, "budget_usd": 50})
        assert r.status_code in (200, 201), r.text
        r = admin.post("/v1/tokens", json={"user": "alice", "label": "browser test"})
        assert r.status_code in (200, 201), r.text
        token = r.json()["token"]
    with dash.api(token) as api:
        raw = load_spec_file(DEMO_SPEC)
        raw.update(name="alice-charlm", env={**raw.get("env", {}), "CHARLM_STEPS": ALICE_JOB_STEPS})
        job = _submit(api, raw)
        xss_job = _submit(api, dict(XSS_SPEC))
    return Alice(token, job, xss_job)


@pytest.fixture
def page(browser, dash, request):
    with watched_page(browser, request, base_url=dash.url) as p:
        yield p


def login(page, token: str, user: str) -> None:
    page.goto("/ui/login")
    page.screenshot("login")
    form = page.page.locator("form", has=page.page.locator("input[name=token]"))
    form.locator("input[name=token]").fill(token)
    with page.page.expect_navigation(url=re.compile(r"/ui/$"), wait_until="load") as landed:
        form.locator("button[type=submit], input[type=submit], button:not([type])").first.click()
    assert landed.value is not None and landed.value.status == 200, landed.value
    who = page.page.locator("[data-testid=who]")
    assert re.match(rf"{re.escape(user)}\b", who.inner_text().strip()), who.inner_text()
    page.assert_clean()
    page.screenshot(f"overview-{user}")


def shown_usd(text: str) -> tuple[float, int]:
    """``$1,234.5678`` (within ``text``) -> (1234.5678, 4 digits after the point)."""
    m = re.search(r"\$\s?(-?[\d,]+)(?:\.(\d+))?", text)
    assert m, f"no dollar figure in {text!r}"
    digits = m.group(2) or ""
    return float(m.group(1).replace(",", "") + ("." + digits if digits else "")), len(digits)


def schedctl_status_cost(home: Path, job_id: str) -> str:
    """The ``cost $X`` figure of ``schedctl status JOB`` (the real CLI, as a user runs it)."""
    env = {**os.environ, "GA_HOME": str(home), "COLUMNS": "200"}
    env.pop("GA_API_TOKEN", None)
    out = subprocess.run([sys.executable, "-m", "scheduler", "status", job_id], env=env,
                         capture_output=True, text=True, timeout=60, check=True).stdout
    m = re.search(r"\bcost (\$[\d,]+\.\d+) for ", out)
    assert m, out
    return m.group(1)


def job_row(page, job_id: str):
    return page.page.locator(f'tr[data-job-id="{job_id}"]')


def drawn_points(page, selector: str) -> int:
    chart = page.page.locator(selector)
    chart.wait_for(state="attached")
    page.page.wait_for_function(
        "s => document.querySelector(s).hasAttribute('data-drawn-points')", arg=selector,
        timeout=10_000)
    return int(chart.get_attribute("data-drawn-points"))


def test_watcher_reports_an_inline_script_the_csp_refuses(dash, page):
    """The console check of every test here catches a page whose inline script or style
    attribute the dashboard's CSP refuses: a page served with that CSP reports both."""
    csp = page.page.request.get(f"{dash.url}/ui/login").headers["content-security-policy"]
    page.page.route(f"{dash.url}/ui/csp-probe", lambda route: route.fulfill(
        status=200, content_type="text/html", headers={"content-security-policy": csp},
        body="<p style='color:red'>probe</p><script>window.__ran = 1</script>"))
    page.page.goto("/ui/csp-probe", wait_until="load")
    assert page.page.evaluate("typeof window.__ran") == "undefined"

    def both_reported() -> bool:
        page.page.wait_for_timeout(50)  # lets Playwright deliver the console events
        found = " ".join(page.unexpected_errors())
        return "CSP violation: script-src" in found and "CSP violation: style-src" in found

    wait_until(both_reported, 10, "the CSP violations to be reported",
               detail=lambda: "\n".join(page.errors))
    page.allow("CSP violation|Content Security Policy")
    page.assert_clean()


def test_security_headers_and_session_cookie(dash, page):
    unauthenticated = page.goto("/ui/login")
    headers = unauthenticated.headers
    login(page, dash.admin_token, "admin")
    response = page.goto("/ui/jobs")
    page.screenshot("jobs")
    for h in (headers, response.headers):
        csp = h.get("content-security-policy", "")
        assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp, h
        assert "'unsafe-inline'" not in csp, csp
        assert h.get("x-frame-options") == "DENY", h
        assert h.get("x-content-type-options") == "nosniff", h
    assert response.headers.get("cache-control") == "no-store", response.headers
    cookie = next(c for c in page.context.cookies() if c["name"] == "ga_session")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict", cookie
    # The session is the token itself only in the HttpOnly cookie, never in a script's reach.
    assert dash.admin_token not in page.page.content()


def test_prices_chart_drawn_with_data(dash, page):
    login(page, dash.admin_token, "admin")
    page.goto("/ui/prices")
    assert drawn_points(page, "#chart-prices") > 0
    assert page.page.locator("#chart-prices canvas").count() >= 1
    page.screenshot("prices")


def test_other_users_job_absent(dash, alice, page):
    dash.wait_terminal(alice.job)
    login(page, alice.token, "alice")
    page.goto("/ui/jobs")
    page.screenshot("alice-jobs")
    row = job_row(page, alice.job)
    assert row.count() == 1
    assert row.locator('[data-field="owner"]').inner_text().strip() == "alice"
    assert row.locator('[data-field="name"]').inner_text().strip() == "alice-charlm"
    assert job_row(page, dash.demo_job).count() == 0
    assert dash.demo_job not in page.page.content()
    owners = {c.strip() for c in page.page.locator('tr[data-job-id] [data-field="owner"]')
              .all_inner_texts()}
    assert owners == {"alice"}, owners
    # Her own job's page opens; the admin's answers 404 (not 403: it does not exist for her).
    page.goto(f"/ui/jobs/{alice.job}")
    page.allow(r"status of 404")
    page.goto(f"/ui/jobs/{dash.demo_job}", status=404)
    page.screenshot("admin-job-404")


def test_job_output_is_text_not_markup(dash, alice, page):
    done = dash.wait_terminal(alice.xss_job, 120)
    assert done["state"] == "failed", done["events"]
    assert IMG_LINE in done["command_failure"]["log_tail"], done["command_failure"]
    with dash.api(alice.token) as api:
        lines = wait_until(
            lambda: (ls := api.get(f"/v1/jobs/{alice.xss_job}/logs").json()["lines"])
            and IMG_LINE in ls and ls, 30, "the job's log lines to arrive")
    assert SCRIPT_LINE in lines
    login(page, alice.token, "alice")
    page.goto("/ui/jobs")
    assert job_row(page, alice.xss_job).count() == 1
    page.goto(f"/ui/jobs/{alice.xss_job}")
    page.screenshot("xss-job")
    p = page.page
    assert p.evaluate("typeof window.__pwned") == "undefined"
    text = p.locator("main").inner_text()
    assert SCRIPT_LINE in text and IMG_LINE in text, text
    # Shown as text: no element was made from the job's output.
    assert p.locator('img[src="x"]').count() == 0
    assert p.evaluate("""() => Array.from(document.scripts).filter(
        s => s.type !== 'application/json' && s.textContent.includes('__pwned')).length""") == 0
    assert p.locator("main b", has_text="bold").count() == 0


def test_demo_job_cost_equals_schedctl_status(dash, alice, page):
    done = dash.wait_terminal(dash.demo_job)
    assert done["state"] == "succeeded", done["events"]
    api_cost = done["derived"]["cost_usd"]
    assert api_cost > 0
    cli_cost = schedctl_status_cost(dash.daemon.home, dash.demo_job)
    assert cli_cost == f"${api_cost:,.4f}"

    login(page, dash.admin_token, "admin")
    page.goto("/ui/jobs")
    row = job_row(page, dash.demo_job)
    assert row.count() == 1
    assert row.locator('[data-field="name"]').inner_text().strip() == "charlm-demo"
    assert row.locator('[data-field="owner"]').inner_text().strip() == "admin"
    assert row.locator('[data-field="state"]').inner_text().strip() == "succeeded"
    for field in ("where", "price", "cost", "cost_per_1k", "saved"):
        assert row.locator(f'[data-field="{field}"]').count() == 1, field
    shown, digits = shown_usd(row.locator('[data-field="cost"]').inner_text())
    assert shown == round(api_cost, digits)
    assert f"${shown:,.{digits}f}" == f"${float(cli_cost[1:].replace(',', '')):,.{digits}f}"
    # Alice's jobs are listed too: the admin sees everyone's.
    assert job_row(page, alice.job).count() == 1
    page.screenshot("admin-jobs")

    page.page.locator(f'tr[data-job-id="{dash.demo_job}"] a').first.click()
    page.page.wait_for_url(re.compile(rf"/ui/jobs/{dash.demo_job}$"))
    page.page.wait_for_load_state("load")
    cost = page.page.locator('span[data-field="cost"][data-usd]')
    assert float(cost.get_attribute("data-usd")) == api_cost
    assert f"${float(cost.get_attribute('data-usd')):,.4f}" == cli_cost
    assert drawn_points(page, "#chart-placements") > 0
    assert page.page.locator("#chart-placements canvas").count() >= 1
    assert page.page.locator("#chart-gpu").count() == 1
    events = page.page.locator("ul#events > li[data-event-id]")
    assert events.count() >= 1
    page.screenshot("demo-job")
    page.assert_clean()


def test_logout(dash, page):
    login(page, dash.admin_token, "admin")
    page.goto("/ui/jobs")
    page.page.locator("form.logout button[type=submit]").click()
    page.page.wait_for_url(re.compile(r"/ui/login"))
    page.page.wait_for_load_state("load")
    page.screenshot("logged-out")
    assert not [c for c in page.context.cookies() if c["name"] == "ga_session" and c["value"]]
    page.goto("/ui/jobs")
    assert re.search(r"/ui/login(\?next=/ui/jobs)?$", page.page.url), page.page.url
    page.screenshot("jobs-after-logout")
    # The old token itself still works for the API (logout ends the browser's session only).
    with dash.api() as api:
        assert api.get("/v1/jobs").status_code == 200
