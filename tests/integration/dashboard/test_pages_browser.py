"""The Offers, Prices, Budgets, Fleet and Users pages in a real headless Chromium
(tests/fixtures/browser.py) against the real API app served on a port, over real Redis:
every page loads without a console error or CSP violation, the price chart is drawn with
its points, the admin's forms (drain, create a token, revoke it) work from the browser, and
a user gets the 403 page for Users. Screenshots land in test-artifacts/dashboard/."""

from __future__ import annotations

import subprocess
from datetime import timedelta

import httpx
import pytest

from core.models import PriceObservation, utcnow
from providers.fleet.setup import from_config
from scheduler.api.app import create_app
from scheduler.api.auth import SESSION_COOKIE
from scheduler.checkpoints.local import LocalObjectStore
from scheduler.controller.context import ProviderRegistry
from scheduler.store import Store
from scheduler.store.agents import AgentTokens
from scheduler.store.budgets import BudgetSettings
from scheduler.store.users import Role
from tests.factories.offers import offer
from tests.fixtures.browser import watched_page
from tests.fixtures.redis_server import free_port
from tests.fixtures.served_api import serve_api
from tests.integration.dashboard.test_budget_fleet_users_pages import running_job

ADMIN_TOKEN = "browser-admin-token"
ZONES = ("us-west-2a", "us-west-2b")


def seed(store: Store) -> dict[str, str]:
    """Offers and a day of prices in two zones, users with budgets, a running job with a
    budget; the users' tokens."""
    now = utcnow()
    store.offers.replace_offers("aws", [
        *(offer(zone=z, price_usd_per_hour=0.9 + i / 10, observed_at=now)
          for i, z in enumerate(ZONES)),
        offer(zone="us-west-2a", market="on-demand", price_usd_per_hour=3.06, observed_at=now)])
    store.offers.append_prices([
        PriceObservation(series=f"aws/us-west-2/{z}/p3.2xlarge/spot",
                         observed_at=now - timedelta(hours=h), price_usd_per_hour=p + i / 10)
        for i, z in enumerate(ZONES) for h, p in ((20, 0.95), (12, 0.97), (6, 0.91), (0, 0.9))])
    store.offers.append_prices([PriceObservation(
        series="aws/us-west-2/us-west-2a/p3.2xlarge/on-demand",
        observed_at=now - timedelta(hours=h), price_usd_per_hour=3.06) for h in (20, 0)])
    store.users.add("alice", Role.USER, budget_usd=10.0)
    store.spend.publish_settings(BudgetSettings(users={"bob": 5.0}))
    store.spend.record("alice", "old-job", 9.2)
    running_job(store, "alice-run", "alice", 1.0, 1.0)  # $0.918: 80 and 90 %
    return {"admin": ADMIN_TOKEN, "alice": store.users.create_token("alice")[0]}


@pytest.fixture
def site(redis_client, tmp_path, monkeypatch):
    store = Store.over(redis_client)
    app = create_app(store, LocalObjectStore(tmp_path / "objects"), AgentTokens(b"secret"),
                     ADMIN_TOKEN)
    key = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "", "-f", str(key)],
                   check=True)
    host_key = " ".join(key.with_suffix(".pub").read_text().split()[:2])
    adapter = from_config({"kind": "fleet", "hosts": [
        {"name": "gpu-a", "address": "127.0.0.1", "port": free_port(), "user": "ga",
         "identity_file": str(key), "host_key": host_key,
         "gpus": [{"model": "RTX4090", "count": 2}]}]}, tmp_path, tmp_path)
    app.state.providers = ProviderRegistry([adapter])
    tokens = seed(store)
    with serve_api(app, tmp_path / "home", ADMIN_TOKEN, monkeypatch) as url:
        yield url, tokens, store
    adapter.close()


@pytest.fixture
def page(browser, request, site):
    """A watched page of the served site; sign it in with :func:`sign_in`."""
    with watched_page(browser, request, base_url=site[0]) as p:
        yield p


def sign_in(page, url: str, token: str) -> None:
    page.context.add_cookies([{"name": SESSION_COOKIE, "value": token, "url": url,
                               "httpOnly": True, "sameSite": "Strict"}])


def drawn_points(page, selector: str) -> int:
    page.page.wait_for_function(
        "s => document.querySelector(s) && document.querySelector(s)"
        ".hasAttribute('data-drawn-points')", arg=selector, timeout=10_000)
    return int(page.page.locator(selector).get_attribute("data-drawn-points"))


def test_admin_pages_in_a_browser(site, page):
    url, tokens, _ = site
    sign_in(page, url, tokens["admin"])
    page.goto("/ui/offers")
    cells = page.page.locator("td[data-field=price][data-market=spot]")
    assert cells.count() == 2 and cells.first.get_attribute("data-usd") == "0.9"
    page.screenshot("offers")

    page.goto("/ui/prices?gpu=V100&period=24h")
    assert drawn_points(page, "#chart-prices") >= 6
    assert page.page.locator("#chart-prices canvas").count() >= 1
    page.screenshot("prices")

    page.goto("/ui/budgets")
    assert page.page.locator("tr[data-user=alice] meter").is_visible()
    assert page.page.locator("tr[data-job] span[data-hit]").count() == 2  # 80 and 90 %
    page.screenshot("budgets")

    page.goto("/ui/fleet")
    page.page.click("[data-testid=drain-gpu-a]")
    page.page.wait_for_selector("[data-testid=undrain-gpu-a]")
    assert page.page.locator("tr[data-host=gpu-a] td[data-field=state]").inner_text() \
        == "drained"
    page.screenshot("fleet")

    page.goto("/ui/users")
    page.page.fill("tr[data-user=alice] input[name=label]", "from the browser")
    page.page.click("[data-testid=token-alice]")
    token = page.page.locator("[data-testid=new-token]").inner_text().strip()
    token_id = page.page.locator("[data-testid=new-token-id]").inner_text().strip()
    page.screenshot("new-token")
    me = httpx.get(f"{url}/v1/me", headers={"Authorization": f"Bearer {token}"})
    assert me.json()["user"] == "alice"
    page.goto("/ui/users")
    page.page.click(f"[data-testid=revoke-{token_id}]")
    page.page.wait_for_selector(f"tr[data-token='{token_id}'].revoked")
    page.screenshot("users")
    assert httpx.get(f"{url}/v1/me",
                     headers={"Authorization": f"Bearer {token}"}).status_code == 401


def test_a_user_in_a_browser(site, page):
    url, tokens, _ = site
    sign_in(page, url, tokens["alice"])
    page.allow(r"Failed to load resource: the server responded with a status of 403")
    page.goto("/ui/users", status=403)
    assert page.page.locator("[data-testid=forbidden]").is_visible()
    assert page.page.locator("nav a[href='/ui/users']").count() == 0
    page.goto("/ui/budgets")
    assert [r.get_attribute("data-user") for r in
            page.page.locator("tr[data-user]").all()] == ["alice"]
    page.goto("/ui/fleet")
    assert page.page.locator("button[data-testid^=drain]").count() == 0
    page.screenshot("user-fleet")
