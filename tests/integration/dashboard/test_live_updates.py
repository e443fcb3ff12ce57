"""The dashboard's page script in a real headless Chromium against the app served on a real
port (real Redis): new events appear on the job page and the Overview as text, the list stays
bounded, and the Jobs table re-reads a job's row when one of its events arrives."""

from __future__ import annotations

from datetime import timedelta

import pytest

from core.models import JobState, utcnow
from scheduler.api.auth import SESSION_COOKIE
from tests.fixtures.browser import watched_page
from tests.fixtures.served_api import serve_api
from tests.fixtures.waiting import wait_until
from tests.integration.dashboard.conftest import make_job

XSS = "<img src=x onerror=window.__pwned=1>"


@pytest.fixture
def served(dash, tmp_path, monkeypatch):
    with serve_api(dash.app, tmp_path / "home", dash.tokens["admin"], monkeypatch) as url:
        yield url


@pytest.fixture
def page(browser, request, served, dash):
    with watched_page(browser, request, base_url=served) as p:
        p.context.add_cookies([{"name": SESSION_COOKIE, "value": dash.tokens["alice"],
                                "url": served, "httpOnly": True, "sameSite": "Strict"}])
        yield p


def _add_event(dash, job_id: str, message: str, state: JobState = JobState.RUNNING) -> None:
    job = dash.store.jobs.get(job_id)
    job.record(state, message, at=utcnow())
    dash.store.jobs.save(job)


def test_new_events_are_prepended_as_text_on_the_job_page(dash, page):
    job = make_job(dash.store, "train", "alice", finished=False)
    page.goto(f"/ui/jobs/{job.id}")
    items = page.page.locator("ul#events > li[data-event-id]")
    before = items.count()
    _add_event(dash, job.id, XSS)
    wait_until(lambda: items.count() == before + 1, 15, "the new event on the page")
    first = items.first
    assert first.locator(".message").inner_text() == XSS
    assert page.page.locator("ul#events img").count() == 0
    assert page.page.evaluate("typeof window.__pwned") == "undefined"
    page.assert_clean()


def test_the_event_list_keeps_at_most_its_bound(dash, page):
    job = make_job(dash.store, "train", "alice", finished=False)
    page.goto(f"/ui/jobs/{job.id}")
    page.page.evaluate("document.getElementById('events').setAttribute('data-max', '7')")
    for i in range(12):
        _add_event(dash, job.id, f"step {i}")
    items = page.page.locator("ul#events > li[data-event-id]")
    wait_until(lambda: items.first.locator(".message").inner_text() == "step 11", 15,
               "the newest event first")
    assert items.count() == 7


def test_the_overview_shows_only_the_user_s_new_events(dash, page):
    mine = make_job(dash.store, "mine", "alice", finished=False)
    theirs = make_job(dash.store, "theirs", "bob", finished=False)
    page.goto("/ui/")
    _add_event(dash, theirs.id, "bob's secret step")
    _add_event(dash, mine.id, "alice's step")
    items = page.page.locator("ul#events > li[data-event-id]")
    wait_until(lambda: items.first.locator(".message").inner_text() == "alice's step", 15,
               "alice's event on the overview")
    assert "bob's secret step" not in page.page.locator("main").inner_text()


def test_the_jobs_table_rereads_a_row_when_its_job_changes(dash, page):
    job = make_job(dash.store, "train", "alice", finished=False)
    page.goto("/ui/jobs")
    state = page.page.locator(f'tr[data-job-id="{job.id}"] [data-field="state"]')
    assert state.inner_text().strip() == "running"
    done = dash.store.jobs.get(job.id)
    done.placement.ended_at = done.placement.started_at + timedelta(minutes=30)
    done.placements.append(done.placement)
    done.placement = None
    done.record(JobState.SUCCEEDED, "command exited 0", at=utcnow())
    dash.store.jobs.save(done)
    wait_until(lambda: state.inner_text().strip() == "succeeded", 20, "the refreshed row")
    page.assert_clean()
