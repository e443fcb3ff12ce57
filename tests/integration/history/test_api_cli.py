"""History, plans and cost reports through the real API app and the real CLI: against the API
served on a real port, and without a daemon (``history import``/``retention`` and ``plan``
read the test Redis through ``REDIS_URL``; the others refuse)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import yaml
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from core.models import Job, JobState, Placement, PlacementEnd, utcnow
from scheduler.api.app import create_app
from scheduler.checkpoints.checkpoints import commit_checkpoint
from scheduler.checkpoints.local import LocalObjectStore
from scheduler.cli.main import app as cli
from scheduler.services import costs
from scheduler.services.history_import import import_path
from scheduler.store.agents import AgentTokens
from tests.factories.jobs import spec
from tests.factories.offers import offer
from tests.integration.cli.conftest import served  # noqa: F401  (the API on a real port)
from tests.integration.history.conftest import DUMPS

TOKEN = "user-token"
WINDOW = {"since": "2019-12-01", "until": "2020-04-01"}
SPEC = {"name": "train", "command": "python train.py",
        "resources": {"gpu_count": 1, "min_vram_gib": 16, "gpu_models": ["V100"]},
        "checkpoint": {"sync_interval_s": 600}}


@pytest.fixture
def east(store, data_dir):
    """The us-east-1 dumps in history, and live offers for two of its series."""
    import_path(store, data_dir / DUMPS / "us-east-1")
    store.offers.replace_offers("aws", [
        offer(region="us-east-1", zone="us-east-1b", price_usd_per_hour=0.95, interruption_risk=0.1),
        offer(region="us-east-1", zone="us-east-1c", price_usd_per_hour=0.99, interruption_risk=0.02),
        offer(region="us-east-1", zone="us-east-1b", market="on-demand", price_usd_per_hour=3.06,
              interruption_risk=0.0)])
    return store


@pytest.fixture
def api(east, tmp_path):
    objects = LocalObjectStore(tmp_path / "objects")
    app = create_app(east, objects, AgentTokens(b"secret"), TOKEN)
    return TestClient(app, headers={"Authorization": f"Bearer {TOKEN}"}), objects


def test_history_routes(api):
    client, _ = api
    assert client.get("/v1/history", headers={"Authorization": "Bearer nope"}).status_code == 401
    body = client.get("/v1/history", params={"gpu": "V100", **WINDOW}).json()
    assert body["matched"] == 12 and len(body["rows"]) == 12
    assert all(r["gpu_model"] == "V100" and r["min"] <= r["p50"] <= r["p90"] <= r["max"]
               for r in body["rows"])
    zones = client.get("/v1/history", params={"gpu": "V100", "by": "zone", "per_gpu": True,
                                              **WINDOW}).json()["rows"]
    assert {r["zone"] for r in zones} == {"us-east-1b", "us-east-1c", "us-east-1d", "us-east-1f"}
    hours = client.get("/v1/history", params={"gpu": "K80", "by": "hour-of-day", **WINDOW}).json()
    assert [r["hour"] for r in hours["rows"]] == list(range(24))
    bad = client.get("/v1/history", params={"by": "week"})
    assert bad.status_code == 422 and "by: got 'week'" in bad.json()["detail"]
    assert client.get("/v1/history", params={"since": "last tuesday"}).status_code == 422
    pts = client.get("/v1/history/points", params={"series": "aws/us-east-1/us-east-1b/p3.2xlarge/spot",
                                                   **WINDOW}).json()["points"]
    assert len(pts) > 100 and pts[0][0] < pts[-1][0]
    past = client.get("/v1/offers", params={"at": "2020-03-10T12:00Z", "gpu": "V100"}).json()
    assert past and all(r["spot_usd_per_hour"] and r["interruption_risk"] is None for r in past)
    now = client.get("/v1/offers").json()
    assert {r["zone"] for r in now} == {"us-east-1b", "us-east-1c"}


def test_plan_route(api):
    client, _ = api
    body = client.post("/v1/plans", json={"spec": SPEC, "compute_hours": 100,
                                          "lookback": "2019-12-01"}).json()
    assert body["offers_source"] == "latest offers" and body["eligible"] == 3
    od, spot, policy = (body["scenarios"][k] for k in ("on-demand", "spot", "policy"))
    # The policy's cost to finish: the compute hours plus one restart overhead, billed.
    assert od["market"] == "on-demand" and od["cost_usd"]["expected"] == pytest.approx(3.06 * 100.1)
    assert spot["market"] == "spot" and spot["history_hours"] > 1000
    assert spot["duration_hours"]["expected"] > 100 and spot["cost_usd"]["expected"] < 306
    assert policy["zone"] == "us-east-1b" and "spot pays" in policy["reason"]
    assert [r["cost_usd"]["expected"] for r in body["best_offers"]] == sorted(
        r["cost_usd"]["expected"] for r in body["best_offers"])
    refused = client.post("/v1/plans", json={"spec": {**SPEC, "market": "cheap"}})
    assert refused.status_code == 422 and refused.json()["problems"][0]["field"] == "market"


def test_plan_uses_the_specs_hours_and_flags_its_budget(api):
    client, _ = api
    budgeted = {**SPEC, "expected_hours": 100, "budget_usd": 0.10}
    body = client.post("/v1/plans", json={"spec": budgeted, "lookback": "2019-12-01"}).json()
    assert body["compute_hours"] == 100 and body["compute_hours_source"] == "spec"
    assert body["budget_usd"] == 0.10 and body["over_budget"] == ["on-demand", "spot", "policy"]
    assert all(r["over_budget"] for r in body["best_offers"])
    # 0.05 h and the launch (0.1 h) billed: ~$0.14 on spot, ~$0.46 on-demand.
    small = client.post("/v1/plans", json={"spec": {**budgeted, "budget_usd": 0.15},
                                           "compute_hours": 0.05,
                                           "lookback": "2019-12-01"}).json()
    assert small["compute_hours_source"] == "option" and small["over_budget"] == ["on-demand"]
    plain = client.post("/v1/plans", json={"spec": SPEC}).json()
    assert plain["compute_hours"] == 1 and plain["compute_hours_source"] == "default"
    assert plain["budget_usd"] is None and plain["over_budget"] == []
    assert "over_budget" not in plain["best_offers"][0]


def _job_with_checkpoints(store, objects, tmp_path) -> Job:
    src = tmp_path / "ckpt"
    src.mkdir()
    (src / "model.bin").write_bytes(b"x" * 1_000_000)
    first = commit_checkpoint(objects, "train-1", src, attempt=1)
    (src / "opt.bin").write_bytes(b"y" * 500_000)
    second = commit_checkpoint(objects, "train-1", src, attempt=1)
    t = second.created_at
    spot = offer(price_usd_per_hour=1.0, gpu_count=1)
    od = offer(market="on-demand", price_usd_per_hour=3.0, gpu_count=1, zone="us-west-2b")
    job = Job(id="train-1", spec=spec(), created_at=t - timedelta(hours=3), updated_at=t,
              state=JobState.SUCCEEDED, on_demand_reference_usd_per_hour=3.0)
    job.placements = [
        Placement(attempt=1, offer=spot, client_token="a", decided_at=t - timedelta(hours=3),
                  started_at=first.created_at - timedelta(hours=2), ended_at=t + timedelta(seconds=1),
                  end_reason=PlacementEnd.PREEMPTED),
        Placement(attempt=2, offer=od, client_token="b", decided_at=t, time_scale=2.0,
                  started_at=t + timedelta(seconds=2), ended_at=t + timedelta(seconds=2, hours=1),
                  end_reason=PlacementEnd.SUCCEEDED)]
    store.jobs.create(job)
    return job


def test_cost_report(api, east, tmp_path):
    client, objects = api
    job = _job_with_checkpoints(east, objects, tmp_path)
    report = client.get("/v1/cost-report", params={"job": job.id,
                                                   "transfer_usd_per_gb": 0.1}).json()
    [row] = report["jobs"]
    hours_1 = row["placements"][0]["billed_hours"]
    assert row["placements"][1]["billed_hours"] == pytest.approx(2.0)  # 1 h × time scale 2
    assert row["compute_usd"] == pytest.approx(hours_1 * 1.0 + 2.0 * 3.0)
    assert row["on_demand_usd"] == pytest.approx((hours_1 + 2.0) * 3.0)
    assert row["usd_per_gpu_hour"] == pytest.approx(row["compute_usd"] / (hours_1 + 2.0))
    ck = row["checkpoints"]
    # The checkpoint files compress (zstd, where it pays): transfer is what was stored.
    assert (ck["checkpoints"], ck["original_bytes"]) == (2, 1_500_000)
    assert ck["uploaded_bytes"] == ck["restored_bytes"] == ck["stored_bytes"] < 1_500_000
    assert row["transfer_usd"] == pytest.approx(
        (ck["uploaded_bytes"] + ck["restored_bytes"]) / 2**30 * 0.1)
    assert row["total_usd"] == pytest.approx(row["compute_usd"] + row["storage_usd"] + row["transfer_usd"])
    assert report["totals"]["jobs"] == 1 and report["totals"]["savings_pct"] > 0
    assert client.get("/v1/cost-report", params={"job": "nope"}).status_code == 404
    since = costs.report(east, objects, since=utcnow() - timedelta(days=1))
    assert [r["job"] for r in since["jobs"]] == [job.id]


@pytest.fixture
def env(monkeypatch, redis_server, served, tmp_path):  # noqa: F811
    """The CLI pointed at the served API (GA_HOME) and at the test Redis (REDIS_URL, for the
    commands that read it themselves)."""
    monkeypatch.setenv("REDIS_URL", redis_server.url)
    monkeypatch.setenv("GA_HOME", str(served.home))
    monkeypatch.setenv("COLUMNS", "120")
    return tmp_path


def test_cli(env, redis_client, data_dir):
    runner = CliRunner()
    run = lambda *args: runner.invoke(cli, list(args), catch_exceptions=False)
    imported = run("history", "import", str(data_dir / DUMPS / "us-east-1"))
    assert imported.exit_code == 0 and "stored" in imported.output
    table = run("history", "--gpu", "V100", "--since", "2019-12-01", "--until", "2020-04-01")
    assert table.exit_code == 0 and "us-east-1b" in table.output and "p3.2xlarge" in table.output
    rows = run("history", "--gpu", "K80", "--by", "zone", "--since", "2019-12-01", "--format", "csv")
    assert rows.exit_code == 0 and rows.output.splitlines()[0].startswith("provider,region,zone,min")
    as_json = json.loads(run("history", "--instance-type", "p3.2xlarge", "--zone", "us-east-1b",
                             "--since", "2019-12-01", "--format", "json").output)
    assert as_json["rows"][0]["series_key"] == "aws/us-east-1/us-east-1b/p3.2xlarge/spot"
    plot = run("history", "--zone", "us-east-1b", "--instance-type", "p3.2xlarge", "--since",
               "2020-03-01", "--until", "2020-03-10", "--plot")
    assert plot.exit_code == 0 and "USD/hour" in plot.output
    empty = run("history", "--gpu", "V100")
    assert empty.exit_code == 1 and "history spans 2019-12" in empty.output
    past = run("offers", "--at", "2020-03-10T12:00Z", "--gpu", "V100")
    assert past.exit_code == 0 and "p3.2xlarge" in past.output
    assert run("history", "retention", "--raw-days", "10").output.startswith("raw price changes: 10 days")
    bad = run("history", "retention", "--raw-days", "0")
    assert bad.exit_code == 2 and "raw_days" in bad.output
    spec_file = env / "job.yaml"
    spec_file.write_text(yaml.safe_dump(SPEC))
    plan = run("plan", str(spec_file), "--compute-hours", "10", "--lookback", "2019-12-01")
    assert plan.exit_code == 0 and "five best offers" in plan.output
    assert "latest prices in history" in " ".join(plan.output.split())  # the daemon's plan
    spec_file.write_text(yaml.safe_dump({**SPEC, "expected_hours": 100, "budget_usd": 0.1}))
    plan = run("plan", str(spec_file), "--lookback", "2019-12-01")
    assert "100 compute hours (the spec's expected_hours)" in plan.output
    assert "over budget" in plan.output and "$0.10" in plan.output
    again = run("history", "import", str(data_dir / DUMPS / "us-east-1"))
    assert "stored 0 price changes" in again.output and "not re-stored: older than the raw" \
        " window" in again.output and "dropped" not in again.output
    report = json.loads(run("cost-report", "--format", "json").output)
    assert report["totals"]["jobs"] == 0


def test_cli_without_a_daemon(monkeypatch, redis_server, redis_client, data_dir, tmp_path):
    """History import and retention read Redis themselves, and plan plans by itself; every
    other command needs the daemon and says how to start one."""
    monkeypatch.setenv("REDIS_URL", redis_server.url)
    monkeypatch.setenv("GA_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("COLUMNS", "120")
    run = lambda *args: CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert run("history", "import", str(data_dir / DUMPS / "us-east-1")).exit_code == 0
    assert run("history", "retention").output.startswith("raw price changes:")
    spec_file = tmp_path / "job.yaml"
    spec_file.write_text(yaml.safe_dump(SPEC))
    plan = run("plan", str(spec_file), "--compute-hours", "10", "--lookback", "2019-12-01",
               "--format", "json")
    assert plan.exit_code == 0, plan.output
    assert json.loads(plan.output)["offers_source"].startswith("listed now by the configured")
    for command in (["history", "--gpu", "V100"], ["offers", "--at", "2020-03-10T12:00Z"],
                    ["cost-report"]):
        refused = run(*command)
        assert refused.exit_code == 2, command
        assert "no daemon has run with GA_HOME" in refused.output and "schedctl daemon" in \
            refused.output
