"""Real AWS spot dumps (2019-12 → 2020-03) imported next to a running replayed market that
sells the same offer key (``aws`` us-east-1c p3.2xlarge spot, as the demo market does): real
Redis, a real replay cloud process polled by the real poller, the real import. Each source's
series stays its own: the 2020 figures are the files' (computed here straight from the JSON),
the replayed series holds exactly what the replay cloud reported, and neither extends the
other."""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime, timedelta

import pytest

from providers.replay import ReplayProvider, shutdown_cloud
from scheduler.observability.providers import counted
from scheduler.poller.offers import OfferPoller
from scheduler.services import history as history_service
from scheduler.services.history_import import import_path
from tests.integration.cli.conftest import served  # noqa: F401  (the API on a real port)
from tests.integration.history.conftest import DUMPS
from tests.integration.history.test_import_real import (
    _ms,
    changes_by_series,
    read_files,
    step_stats,
)

SERIES = "aws/us-east-1/us-east-1c/p3.2xlarge/spot"
ZONE = dict(zone="us-east-1c", instance_type="p3.2xlarge", market="spot")

# The demo market's us-east-1c p3.2xlarge offer, with its first spot step 1.2 s (wall) after
# the cloud starts instead of 30 s, so the test sees a replayed price change quickly.
MARKET = """
name: demo
time_scale: 60
notice_seconds: 10
offers:
  - {provider: aws, region: us-east-1, zone: us-east-1c, instance_type: p3.2xlarge,
     gpu_model: V100, gpu_count: 1, vram_gib: 16, vcpus: 8, memory_gib: 61,
     on_demand_price_usd_per_hour: 3.06, spot_price_usd_per_hour: 0.918,
     interruption_risk: 0.15, spot_price_series: [{at_hours: 0.02, price: 0.952}]}
"""


@pytest.fixture
def replay(tmp_path):
    (tmp_path / "market.yaml").write_text(MARKET)
    provider = ReplayProvider(tmp_path / "market.yaml", tmp_path / "cloud",
                              [sys.executable, "-c", "pass"])
    yield provider
    provider.close()
    shutdown_cloud(tmp_path / "cloud")


@pytest.fixture(scope="module")
def files(data_dir):
    return read_files(data_dir / DUMPS)


def test_real_dumps_and_a_running_replay_market_stay_apart(store, data_dir, files, replay):
    poll = OfferPoller(store, counted([replay], store.redis)[0])  # wrapped as the daemon does
    assert poll() == 2  # the market runs: its spot and on-demand offer are stored
    import_path(store, data_dir / DUMPS)  # the real dumps, while the market keeps running
    time.sleep(1.5)  # past the replayed spot step (0.02 market hours)
    poll()

    _, distinct, newest = files
    points = changes_by_series(distinct)[("us-east-1c", "p3.2xlarge")]
    start, end = _ms("2020-03-01T00:00:00Z"), _ms("2020-03-20T00:00:00Z")
    want = step_stats(points, start, end)

    # The 2020 query for that zone: the files' prices (raw tier: exact).
    result = history_service.query(store, since="2020-03-01", until="2020-03-20", **ZONE)
    [row] = result["rows"]
    assert row["series_key"] == SERIES and row["source"] == "real"
    for k in ("min", "p50", "p90", "max", "last"):
        assert row[k] == want[k], k
    assert row["mean"] == pytest.approx(want["mean"], rel=1e-9)

    # offers --at inside the dumps: the zone is there at the price in force then.
    at = "2020-03-10T12:00:00Z"
    in_force = [(ms, p) for ms, p in points if ms <= _ms(at)][-1]
    got = {(r["zone"], r["instance_type"]): r for r in history_service.offers_at(store, at)}
    assert got[("us-east-1c", "p3.2xlarge")]["spot_usd_per_hour"] == in_force[1]
    assert got[("us-east-1c", "p3.2xlarge")]["observed_at"] == \
        datetime.fromtimestamp(in_force[0] / 1000, UTC).isoformat()
    assert got[("us-east-1c", "p3.2xlarge")]["source"] == "real"

    # The real series ends where the dumps end: no replayed price carries it to now.
    real_now = history_service.query(store, since="30d", source="real", **ZONE)
    assert real_now["rows"] == []
    assert real_now["outside"]["count"] == 1
    assert real_now["outside"]["last"] == datetime.fromtimestamp(
        newest["us-east-1"] / 1000, UTC).isoformat()
    assert [r for r in history_service.offers_at(store, "1m", source="real")
            if r["zone"] == "us-east-1c"] == []

    # The replayed series is intact: exactly the changes the replay cloud reported.
    reported = [(round(o.observed_at.timestamp() * 1000), o.price_usd_per_hour)  # ms stored
                for o in replay.poll_prices(None) if o.series == SERIES]
    assert [p for _, p in reported] == [0.918, 0.952]
    curve = history_service.points(store, SERIES, since="1h", source="replay:demo")
    assert [p for _, p in curve["points"]][:2] == [0.918, 0.952]
    assert [datetime.fromisoformat(t) for t, _ in curve["points"][:2]] == [
        datetime.fromtimestamp(ms / 1000, UTC) for ms, _ in reported]
    replayed = history_service.query(store, since="1h", source="replay:demo", **ZONE)
    [rrow] = replayed["rows"]
    assert rrow["source"] == "replay:demo"
    assert (rrow["min"], rrow["max"], rrow["last"], rrow["changes"]) == (0.918, 0.952, 0.952, 1)
    assert history_service.query(store, since="2019-01-01", until="2020-04-01",
                                 source="replay:demo", **ZONE)["rows"] == []

    # What a demo user sees by default for today: the replayed prices, labelled as such.
    today = history_service.query(store, since="1h", **ZONE)
    assert today["source"] == ["replay:demo"] and [r["source"] for r in today["rows"]] == [
        "replay:demo"]
    [now_row] = [r for r in history_service.offers_at(store, "now", market="spot")
                 if (r["zone"], r["instance_type"]) == ("us-east-1c", "p3.2xlarge")]
    assert (now_row["source"], now_row["spot_usd_per_hour"]) == ("replay:demo", 0.952)
    # ... and never one statistic pooling both sources, even when both are asked for.
    both = history_service.query(store, since="2019-01-01", source="all", by="zone", **ZONE)
    assert sorted(r["source"] for r in both["rows"]) == ["real", "replay:demo"]
    assert datetime.now(UTC) - datetime.fromisoformat(today["until"]) < timedelta(minutes=1)


@pytest.fixture
def env(monkeypatch, served):  # noqa: F811
    """The CLI pointed at the API served over the test Redis."""
    monkeypatch.setenv("GA_HOME", str(served.home))
    monkeypatch.setenv("COLUMNS", "160")


def test_cli_and_api_say_which_source_answered(env, store, data_dir, replay, tmp_path):
    from fastapi.testclient import TestClient
    from typer.testing import CliRunner

    from scheduler.api.app import create_app
    from scheduler.checkpoints.local import LocalObjectStore
    from scheduler.cli.main import app as cli
    from scheduler.store.agents import AgentTokens

    OfferPoller(store, replay)()
    import_path(store, data_dir / DUMPS / "us-east-1")
    run = lambda *args: CliRunner().invoke(cli, list(args), catch_exceptions=False)

    today = run("history", "--zone", "us-east-1c", "--since", "1h")
    assert today.exit_code == 0, today.output
    assert "replayed market 'demo' (not real prices)" in today.output
    assert "replay:demo aws/us-east-1c p3.2xlarge" in today.output
    past = run("history", "--zone", "us-east-1c", "--since", "2020-03-01", "--until", "2020-03-20")
    assert past.exit_code == 0 and "us-east-1c p3.2xlarge" in past.output
    assert "replay" not in past.output
    real_today = run("history", "--zone", "us-east-1c", "--since", "1h", "--source", "real")
    assert real_today.exit_code == 1 and "none with prices in" in real_today.output
    at = run("offers", "--at", "2020-03-10T12:00Z", "--gpu", "V100")
    assert at.exit_code == 0 and "aws/us-east-1c" in at.output and "replay" not in at.output
    bad = run("history", "--source", "replayed")
    assert bad.exit_code != 0 and "source" in bad.output

    app = create_app(store, LocalObjectStore(tmp_path / "objects"), AgentTokens(b"s"), "t")
    client = TestClient(app, headers={"Authorization": "Bearer t"})
    refused = client.get("/v1/history", params={"source": "replay:no such"})
    assert refused.status_code == 422 and refused.json()["detail"].startswith("source:")
    assert client.get("/v1/offers", params={"at": "now", "source": "x"}).status_code == 422
    rows = client.get("/v1/offers", params={"at": "2020-03-10T12:00Z", "source": "real"}).json()
    assert {r["source"] for r in rows} == {"real"} and "us-east-1c" in {r["zone"] for r in rows}
    curve = client.get("/v1/history/points", params={"series": SERIES, "since": "1h",
                                                     "source": "replay:demo"}).json()
    assert curve["source"] == "replay:demo" and curve["points"][0][1] == 0.918
    live = client.get("/v1/offers").json()
    assert [(r["zone"], r["source"]) for r in live] == [("us-east-1c", "replay:demo")]
