"""The Offers and Prices pages through the real API app and real Redis, signed in by the
dashboard's session cookie: the numbers equal the API's for the same query, the filters
filter, and a replayed market's history (as ``schedctl demo`` records it) gives a chart."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from fastapi.testclient import TestClient

from core.models import Job, JobState, Placement, PriceObservation, utcnow
from tests.factories.jobs import spec
from tests.factories.offers import offer
from tests.integration.dashboard import pages_fixtures
from tests.integration.dashboard.pages_fixtures import parse

# The fixtures, under the names tests ask for.
pages, store = pages_fixtures.dash, pages_fixtures.store

SPOT_A = "aws/us-west-2/us-west-2a/p3.2xlarge/spot"
SPOT_B = "aws/us-west-2/us-west-2b/p3.2xlarge/spot"
OD_A = "aws/us-west-2/us-west-2a/p3.2xlarge/on-demand"


@pytest.fixture
def market(pages):
    """Live offers in two regions (V100 and A100, spot and on-demand) and a day of history."""
    now = utcnow()
    s = pages.store
    s.offers.replace_offers("aws", [
        offer(zone="us-west-2a", price_usd_per_hour=0.9181, observed_at=now),
        offer(zone="us-west-2a", market="on-demand", price_usd_per_hour=3.06,
              interruption_risk=0.0, observed_at=now),
        offer(zone="us-west-2b", price_usd_per_hour=1.25, interruption_risk=0.2,
              observed_at=now),
        offer(region="us-east-1", zone="us-east-1c", instance_type="p4d.24xlarge",
              gpu_model="A100", gpu_count=8, vram_gib=40, price_usd_per_hour=11.5,
              on_demand_price_usd_per_hour=32.77, observed_at=now)])
    s.offers.append_prices([
        PriceObservation(series=series, observed_at=now - timedelta(hours=h), price_usd_per_hour=p)
        for series, points in {SPOT_A: [(20, 0.95), (15, 0.93), (10, 0.9181)],
                               SPOT_B: [(18, 1.1), (0, 1.25)],
                               OD_A: [(20, 3.06), (0, 3.06)]}.items()
        for h, p in points])
    return pages


def prices_by_series(page) -> dict[str, float]:
    return {td.attrs["data-series"]: float(td.attrs["data-usd"])
            for td in page.find_all("td", data_field="price") if "data-usd" in td.attrs}


def test_offers_page_shows_the_apis_rows_and_prices(market):
    admin, alice = market.session("admin"), market.session("alice")
    api = market.bearer().get("/v1/offers").json()
    for client in (admin, alice):
        answer = client.get("/ui/offers")
        assert answer.status_code == 200, answer.text
        page = parse(answer.text)
        rows = page.find("table", data_testid="offers").find_all("tr", data_offer=True)
        assert [r.attrs["data-instance"] for r in rows] == [
            "/".join((r["provider"], r["region"], r["zone"], r["instance_type"])) for r in api]
        shown = prices_by_series(page)
        for r in api:
            key = "/".join((r["provider"], r["region"], r["zone"], r["instance_type"]))
            assert shown[f"{key}/spot"] == r["spot_usd_per_hour"]
            assert shown.get(f"{key}/on-demand") == r["on_demand_usd_per_hour"]
    first = rows[0]
    assert first.attrs["data-offer"] == SPOT_A  # the price its age is of: spot's
    spot = first.find("td", data_market="spot")
    assert spot.text == "$0.918" and spot.attrs["data-usd"] == "0.9181"
    age = first.find("td", data_field="age")
    assert age.attrs["title"] == api[0]["price_since"] and age.text == "10h"
    assert first.find("td", data_field="polled").attrs["title"] == api[0]["observed_at"]


@pytest.mark.parametrize("query, api_query, zones", [
    ({"gpu": "a100"}, {"gpu": "a100"}, ["us-east-1c"]),
    ({"provider": "AWS", "market": "spot", "min_vram_gib": "20"}, {"min_vram_gib": 20},
     ["us-east-1c"]),
    ({"region": "us-west-2"}, {}, ["us-west-2a", "us-west-2b"]),
    ({"max_usd_per_hour": "1.0"}, {}, ["us-west-2a"]),
    ({"market": "on-demand", "max_usd_per_hour": "3.1"}, {"market": "on-demand"},
     ["us-west-2a", "us-west-2b"]),
    ({"market": "on-demand", "max_usd_per_hour": "3"}, {"market": "on-demand"}, []),
])
def test_offer_filters(market, query, api_query, zones):
    page = parse(market.session("alice").get("/ui/offers", params=query).text)
    rows = page.find_all("tr", data_offer=True)
    assert [r.attrs["data-instance"].split("/")[2] for r in rows] == zones
    api = {(r["zone"], r["instance_type"]): r
           for r in market.bearer().get("/v1/offers", params=api_query).json()}
    for row in rows:
        _, _, zone, itype = row.attrs["data-instance"].split("/")
        for td in row.find_all("td", data_field="price"):
            field = "spot_usd_per_hour" if td.attrs["data-market"] == "spot" \
                else "on_demand_usd_per_hour"
            assert float(td.attrs["data-usd"]) == api[(zone, itype)][field]


def test_one_market_shows_only_its_column(market):
    page = parse(market.session("alice").get("/ui/offers", params={"market": "spot"}).text)
    assert {td.attrs["data-market"] for td in page.find_all("td", data_field="price")} == {"spot"}


@pytest.mark.parametrize("query, field", [({"min_vram_gib": "-1"}, "min_vram_gib"),
                                          ({"max_usd_per_hour": "cheap"}, "max_usd_per_hour"),
                                          ({"market": "reserved"}, "market")])
def test_bad_offer_filters_are_named(market, query, field):
    answer = market.session("alice").get("/ui/offers", params=query)
    assert answer.status_code == 422
    assert parse(answer.text).find("p", role="alert").text.startswith(f"{field}:")


def test_no_offers_say_so(pages):
    page = parse(pages.session("alice").get("/ui/offers").text)
    assert "no provider has listed any yet" in page.find(data_testid="no-offers").text


def test_offer_values_are_escaped(pages):
    pages.store.offers.replace_offers("aws", [offer(instance_type="<script>x</script>")])
    html = pages.session("alice").get("/ui/offers").text
    assert "<script>x</script>" not in html and "&lt;script&gt;x&lt;/script&gt;" in html


def test_pages_need_a_session(pages):
    pages.tokens["nobody"] = "not-a-token"
    answer = pages.session("nobody").get("/ui/offers")
    assert answer.status_code == 303 and answer.headers["location"].startswith("/ui/login")
    for path in ("/ui/offers", "/ui/prices"):
        anonymous = TestClient(pages.app, follow_redirects=False).get(path)
        assert anonymous.status_code == 303
        assert anonymous.headers["location"] == f"/ui/login?next={path}"


def chart(page, chart_id: str = "chart-prices") -> dict:
    el = page.find("div", id=chart_id)
    return json.loads(page.find("script", id=el.attrs["data-chart-src"]).text)


def step_value(points: list[list], at_s: float) -> float | None:
    from datetime import datetime
    value = None
    for t, v in points:
        if datetime.fromisoformat(t).timestamp() <= at_s:
            value = v
    return value


def test_prices_chart_of_a_region_and_type_has_zones_and_markets(market):
    answer = market.session("alice").get("/ui/prices", params={"gpu": "V100", "period": "24h"})
    assert answer.status_code == 200, answer.text
    page = parse(answer.text)
    data = chart(page)
    assert {s["label"] for s in data["series"]} == {"us-west-2a spot", "us-west-2a on-demand",
                                                    "us-west-2b spot"}
    assert all(s["step"] for s in data["series"]) and data["y_label"] == "USD/h"
    api = market.bearer()
    for s in data["series"]:
        zone, mkt = s["label"].split()
        series = f"aws/us-west-2/{zone}/p3.2xlarge/{mkt}"
        pts = api.get("/v1/history/points", params={"series": series, "since": "24h"}).json()
        for x, v in zip(data["x"], s["values"]):
            if v is not None:
                assert v == step_value(pts["points"], x)
    stats = {r.attrs["data-series"]: r for r in page.find("table", data_testid="price-stats")
             .find_all("tr", data_series=True)}
    api_rows = api.get("/v1/history", params={"gpu": "V100", "since": "24h"}).json()["rows"]
    assert set(stats) == {r["series_key"] for r in api_rows}
    for r in api_rows:
        assert float(stats[r["series_key"]].find("td", data_field="p50").attrs["data-usd"]) \
            == r["p50"]


def test_prices_chosen_by_series(market):
    page = parse(market.session("alice").get(
        "/ui/prices", params=[("series", SPOT_A), ("series", SPOT_B), ("period", "7d")]).text)
    data = chart(page)
    assert sorted(s["label"] for s in data["series"]) == ["us-west-2a spot", "us-west-2b spot"]
    assert [v for v in data["series"][0]["values"] if v is not None][-1] == 0.9181


def test_prices_of_unknown_series_and_bad_period(market):
    page = parse(market.session("alice").get("/ui/prices", params={"series": "aws/x/y/z/spot"}).text)
    assert "no history for 'aws/x/y/z/spot'" in page.find("p", class_="warning").text
    bad = market.session("alice").get("/ui/prices", params={"period": "1y"})
    assert bad.status_code == 422 and "period:" in parse(bad.text).find("p", role="alert").text


def test_prices_default_to_the_cheapest_gpu_and_show_a_replayed_market(pages):
    """As the demo: only a replayed market has offers and history; the page opens on it."""
    now = utcnow()
    source = "replay:demo"
    pages.store.offers.replace_offers("aws", [offer(observed_at=now)], source=source)
    pages.store.offers.append_prices([
        PriceObservation(series=SPOT_A, observed_at=now - timedelta(minutes=m),
                         price_usd_per_hour=p) for m, p in ((30, 0.8), (20, 0.85), (5, 0.918))],
        source=source)
    page = parse(pages.session("bob").get("/ui/prices").text)
    data = chart(page)
    assert [s["label"] for s in data["series"]] == ["us-west-2a spot"]
    assert sum(v is not None for v in data["series"][0]["values"]) >= 3
    assert "replay:demo" in page.find("section", class_="chart-box").text


def test_prices_without_history_say_so(pages):
    page = parse(pages.session("bob").get("/ui/prices").text)
    assert "No price history yet" in page.find(data_testid="no-prices").text
    assert chart(page)["x"] == []


def test_prices_open_on_the_gpu_of_the_users_running_job(market):
    now = utcnow()
    a100 = "aws/us-east-1/us-east-1c/p4d.24xlarge/spot"
    market.store.offers.append_prices([PriceObservation(
        series=a100, observed_at=now - timedelta(hours=h), price_usd_per_hour=p)
        for h, p in ((5, 12.0), (1, 11.5))])
    job = Job(id="big-0a0b0c", spec=spec(name="big", owner="alice"), created_at=now,
              updated_at=now)
    job.record(JobState.PENDING, "submitted", at=now)
    job.placement = Placement(attempt=1, offer=offer(
        region="us-east-1", zone="us-east-1c", instance_type="p4d.24xlarge", gpu_model="A100",
        gpu_count=8, vram_gib=40, price_usd_per_hour=11.5), client_token="big-1", decided_at=now)
    market.store.jobs.create(job)
    mine = parse(market.session("alice").get("/ui/prices", params={"period": "24h"}).text)
    assert [s["label"] for s in chart(mine)["series"]] == ["us-east-1c spot"]
    others = parse(market.session("bob").get("/ui/prices", params={"period": "24h"}).text)
    assert "us-west-2a spot" in [s["label"] for s in chart(others)["series"]]
