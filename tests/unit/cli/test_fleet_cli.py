"""``GET /v1/fleet``, ``POST /v1/fleet/{host}/drain|undrain`` and ``schedctl fleet``: over a
real Redis (the slot ledger), the real API app served on a port, and a real fleet adapter
whose hosts listen nowhere (their GPUs as configured, the host unreachable), so no SSH server
is needed: what a host reports over SSH is tested with real sshd hosts in the fleet's own
tests and end to end (tests/e2e/test_fleet.py)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from core.models import Job, Placement, utcnow
from providers.fleet.provider import FleetProvider
from providers.fleet.settings import FleetSettings
from scheduler.api.app import create_app
from scheduler.checkpoints.local import LocalObjectStore
from scheduler.cli import app as cli_app
from scheduler.cli import render
from scheduler.cli.main import app as cli
from scheduler.controller.context import ProviderRegistry
from scheduler.store import Store
from scheduler.store.agents import AgentTokens
from scheduler.store.fleet import FleetLedger
from tests.factories.jobs import spec
from tests.factories.offers import offer
from tests.fixtures.redis_server import free_port
from tests.fixtures.served_api import serve_api
from tests.unit.cli.test_render_width import text

TOKEN = "user-token"


def _host_key() -> str:
    public = Ed25519PrivateKey.generate().public_key()
    return public.public_bytes(serialization.Encoding.OpenSSH,
                               serialization.PublicFormat.OpenSSH).decode()


def _fleet(name: str, *hosts: str) -> FleetProvider:
    """A fleet whose hosts have 2 configured RTX 4090s each and refuse connections."""
    closed = free_port()  # nothing listens there: SSH is refused at once
    return FleetProvider(FleetSettings.model_validate({
        "name": name, "connect_timeout_s": 2, "hosts": [
            {"name": h, "address": "127.0.0.1", "port": closed, "user": "ml", "use_agent": True,
             "host_key": _host_key(), "gpus": [{"model": "RTX4090", "count": 2}],
             "labels": {"site": "office", "rack": "r2"}, "cost_per_gpu_hour_usd": 0.17}
            for h in hosts]}))


@pytest.fixture
def daemon_api(redis_client, tmp_path):
    """The API app with two fleets (``lab``: box1, box2; ``annex``: box2) and a replayed
    market, as the daemon registers them."""
    store = Store.over(redis_client)
    tokens = AgentTokens(b"agent-secret")
    app = create_app(store, LocalObjectStore(tmp_path / "objects"), tokens, TOKEN)
    fleets = [_fleet("lab", "box1", "box2"), _fleet("annex", "box2")]
    app.state.providers = ProviderRegistry(fleets)
    yield app, store, tokens
    for fleet in fleets:
        fleet.close()


@pytest.fixture
def api(daemon_api):
    app, store, tokens = daemon_api
    return TestClient(app, headers={"Authorization": f"Bearer {TOKEN}"}), store, tokens


def _job_on(store: Store, ledger: FleetLedger, host: str, gpus: list[int]) -> Job:
    """An active job placed on ``host`` whose instance holds ``gpus`` in the ledger."""
    now = utcnow()
    slot = offer(provider=ledger.fleet, region="office", zone="r2", market="on-demand",
                 instance_type=f"{host}.{len(gpus)}xRTX4090", gpu_model="RTX4090",
                 gpu_count=len(gpus), vram_gib=24, interruption_risk=0.0)
    iid = f"{host}.train-0001-1"
    assert ledger.claim(host, gpus, len(gpus), iid) == gpus
    job = Job(id="train-0001", spec=spec(), created_at=now, updated_at=now, placement=Placement(
        attempt=1, offer=slot, client_token="train-0001-1", decided_at=now, instance_id=iid,
        started_at=now))
    return store.jobs.create(job)


def test_the_list_has_every_host_its_gpus_slots_and_jobs(api):
    client, store, _ = api
    lab = FleetLedger(store.redis, "lab")
    job = _job_on(store, lab, "box1", [1])
    lab.mark_seen("box1", utcnow() - timedelta(seconds=90))
    rows = client.get("/v1/fleet").json()["hosts"]
    assert [(r["fleet"], r["host"]) for r in rows] == [("lab", "box1"), ("lab", "box2"),
                                                       ("annex", "box2")]
    box1 = rows[0]
    assert box1["gpus"] == [{"model": "RTX4090", "count": 2, "vram_gib": 24.0}]
    assert (box1["gpu_count"], box1["gpus_used"], box1["gpus_free"]) == (2, 1, 1)
    assert box1["jobs"] == [{"instance_id": "box1.train-0001-1", "job": job.id, "gpus": [1],
                             "since": box1["jobs"][0]["since"]}]
    assert box1["labels"] == {"site": "office", "rack": "r2"} and box1["user"] == "ml"
    assert not box1["reachable"] and "unreachable" in box1["error"]
    assert box1["gpus_from"] == "configured" and box1["cost_per_gpu_hour_usd"] == 0.17
    assert 90 <= box1["last_seen_age_s"] < 120 and not box1["drained"]
    assert rows[1]["last_seen_at"] is None and rows[1]["jobs"] == []


def test_drain_and_undrain_go_to_the_hosts_own_fleet_and_are_idempotent(api):
    client, store, _ = api
    lab, annex = FleetLedger(store.redis, "lab"), FleetLedger(store.redis, "annex")
    row = client.post("/v1/fleet/box1/drain").json()
    assert row["drained"] and row["host"] == "box1" and row["fleet"] == "lab"
    first = lab.drained()["box1"]
    assert client.post("/v1/fleet/box1/drain").json()["drained_at"] == first.isoformat()
    assert lab.drained() == {"box1": first}  # a second drain keeps the notice's deadline
    assert lab.claim("box1", [0], 1, "box1.late-1") is None  # no new job there
    assert client.post("/v1/fleet/box2/drain", params={"fleet": "annex"}).json()["drained"]
    assert set(annex.drained()) == {"box2"} and set(lab.drained()) == {"box1"}
    assert not client.post("/v1/fleet/box1/undrain").json()["drained"]
    assert client.post("/v1/fleet/box1/undrain").status_code == 200
    assert lab.drained() == {} and lab.claim("box1", [0], 1, "box1.late-1") == [0]


@pytest.mark.parametrize("path, params, status, names", [
    ("/v1/fleet/box9/drain", {}, 404, ["no fleet host 'box9'", "lab/box1", "annex/box2"]),
    ("/v1/fleet/box1/undrain", {"fleet": "annex"}, 404, ["no fleet host 'box1'", "(hosts: box2)"]),
    ("/v1/fleet/box2/drain", {}, 422, ["fleet: host 'box2' is in fleets lab, annex"]),
    ("/v1/fleet/bad.host/drain", {}, 422, ["host", "pattern"]),
    ("/v1/fleet/" + "b" * 41 + "/drain", {}, 422, ["host", "40 characters"]),
    ("/v1/fleet/box1/drain", {"fleet": "x/y"}, 422, ["fleet", "pattern"]),
])
def test_bad_hosts_are_refused_naming_the_field(api, path, params, status, names):
    client, store, _ = api
    answer = client.post(path, params=params)
    assert answer.status_code == status, answer.text
    detail = json.dumps(answer.json()["detail"])
    assert all(name in detail for name in names), detail
    assert FleetLedger(store.redis, "lab").drained() == {}


def test_fleet_routes_need_the_users_token(daemon_api):
    app, store, tokens = daemon_api
    client = TestClient(app)
    agent = tokens.issue("train-0001", 1)
    for method, path in (("GET", "/v1/fleet"), ("POST", "/v1/fleet/box1/drain"),
                         ("POST", "/v1/fleet/box1/undrain")):
        for headers in ({}, {"Authorization": "Bearer wrong"},
                        {"Authorization": f"Bearer {agent}"}):
            answer = client.request(method, path, headers=headers)
            assert answer.status_code == 401, (method, path, headers, answer.text)
    assert FleetLedger(store.redis, "lab").drained() == {}


def test_without_a_fleet_the_list_is_empty_and_every_host_unknown(redis_client, tmp_path):
    app = create_app(Store.over(redis_client), LocalObjectStore(tmp_path / "o"),
                     AgentTokens(b"s"), TOKEN)
    client = TestClient(app, headers={"Authorization": f"Bearer {TOKEN}"})
    assert client.get("/v1/fleet").json() == {"hosts": []}
    refused = client.post("/v1/fleet/box1/drain")
    assert refused.status_code == 404
    assert "no kind: fleet provider configured" in refused.json()["detail"]


# ----- the CLI ---------------------------------------------------------------------------
@pytest.fixture
def cli_home(daemon_api, tmp_path, monkeypatch):
    """The API served on a real port, and a GA_HOME pointing the CLI at it."""
    app, store, _ = daemon_api
    with serve_api(app, tmp_path / "home", TOKEN, monkeypatch):
        monkeypatch.setattr(cli_app.console, "width", 200)
        yield tmp_path / "home", store


def _run(home, *args):
    return CliRunner().invoke(cli, [*args, "--home", str(home)], catch_exceptions=False)


def test_schedctl_fleet_list_drain_undrain(cli_home):
    home, store = cli_home
    _job_on(store, FleetLedger(store.redis, "lab"), "box1", [0])
    listed = _run(home, "fleet", "list")
    assert listed.exit_code == 0, listed.output
    out = " ".join(listed.output.split())
    assert "lab/box1" in out and "annex/box2" in out and "2x RTX4090 24G" in out
    assert "train-0001 (0)" in out and "never seen" in out
    drained = _run(home, "fleet", "drain", "box1")
    assert drained.exit_code == 0, drained.output
    assert "lab/box1 drained; moving train-0001" in " ".join(drained.output.split())
    rows = json.loads(_run(home, "fleet", "list", "--format", "json").output)["hosts"]
    assert [r["drained"] for r in rows] == [True, False, False]
    csv = _run(home, "fleet", "list", "--format", "csv").output.splitlines()
    assert csv[0].startswith("fleet,host,address,port") and len(csv) == 4
    assert _run(home, "fleet", "undrain", "box1").exit_code == 0
    assert "drained" not in " ".join(_run(home, "fleet", "list").output.split()).split("state")[1]


def test_schedctl_fleet_refusals_name_the_host_and_the_field(cli_home):
    home, _ = cli_home
    unknown = _run(home, "fleet", "drain", "box9")
    assert unknown.exit_code == 2 and "no fleet host 'box9'" in unknown.output
    ambiguous = _run(home, "fleet", "drain", "box2")
    assert ambiguous.exit_code == 2 and "name one" in ambiguous.output
    assert _run(home, "fleet", "drain", "box2", "--fleet", "annex").exit_code == 0
    assert _run(home, "fleet", "list", "--format", "yaml").exit_code == 2


def _row(**over):
    row = {"fleet": "lab", "host": "box1", "address": "10.0.0.5", "port": 22, "user": "ml",
           "labels": {"site": "office", "rack": "r2"}, "region": "office", "zone": "r2",
           "gpus": [{"model": "RTX4090", "count": 8, "vram_gib": 24.0}], "gpu_count": 8,
           "gpus_from": "nvidia-smi", "gpus_used": 3, "gpus_busy_elsewhere": 1, "gpus_free": 4,
           "jobs": [{"instance_id": "box1.charlm-demo-ckpt-7f3a2b9c-2",
                     "job": "charlm-demo-ckpt-7f3a2b9c", "gpus": [0, 1], "since": "x"},
                    {"instance_id": "box1.t-1", "job": None, "gpus": [2], "since": "x"}],
           "drained": False, "drained_at": None, "reachable": True, "error": None,
           "last_seen_at": "x", "last_seen_age_s": 75.0, "cost_per_gpu_hour_usd": 0.22}
    return {**row, **over}


def test_the_fleet_table_keeps_job_ids_whole_at_80_columns():
    out = text(render.fleet_table([_row(), _row(host="box2", drained=True, jobs=[])], width=80))
    assert "charlm-demo-ckpt-7f3a2b9c (0,1)" in out and "box1.t-1 (2)" in out
    assert "8x RTX4090 24G" in out and "drained" in out and "not shown at 80 columns" in out
    wide = text(render.fleet_table([_row()], width=200), 200)
    assert "1m ago" in wide and "10.0.0.5:22" in wide and "office/r2" in wide
    assert "$0.220" in wide and "not shown" not in wide
    several = _row(gpus=[{"model": "A100-80GB", "count": 2, "vram_gib": 80.0},
                         {"model": "V100", "count": 1, "vram_gib": 16.0}], gpu_count=3)
    assert "2x A100-80GB 80G + 1x V100 16G" in text(render.fleet_table([several], width=200), 200)


# ----- cost-report: owned apart from rented ----------------------------------------------
def test_cost_report_separates_owned_from_rented_compute(api):
    client, store, _ = api
    start = utcnow() - timedelta(hours=3)
    slot = offer(provider="lab", region="office", zone="r2", market="on-demand",
                 instance_type="box1.1xRTX4090", gpu_model="RTX4090", vram_gib=24,
                 price_usd_per_hour=0.17, interruption_risk=0.0)
    spot = offer(price_usd_per_hour=0.9)
    job = Job(id="train-0002", spec=spec(), created_at=start, updated_at=utcnow(), placements=[
        Placement(attempt=1, offer=spot, client_token="a", decided_at=start, started_at=start,
                  ended_at=start + timedelta(hours=1)),
        Placement(attempt=2, offer=slot, client_token="b", decided_at=start,
                  started_at=start + timedelta(hours=1), ended_at=start + timedelta(hours=3))])
    store.jobs.create(job)
    report = client.get("/v1/cost-report").json()
    [row], totals = report["jobs"], report["totals"]
    assert [p["owned"] for p in row["placements"]] == [False, True]
    assert row["owned_compute_usd"] == pytest.approx(2 * 0.17)
    assert row["owned_gpu_hours"] == pytest.approx(2.0)
    assert row["rented_compute_usd"] == pytest.approx(0.9)
    assert row["rented_gpu_hours"] == pytest.approx(1.0)
    assert totals["owned_compute_usd"] + totals["rented_compute_usd"] == \
        pytest.approx(totals["compute_usd"])
    assert report["owned_providers"] == ["annex", "lab"]
    out = " ".join(text(render.cost_report(report, width=200), 200).split())
    assert "compute on owned machines (annex, lab): $0.3400 over 2.00 GPU-h" in out
    assert "rented: $0.9000 over 1.00 GPU-h" in out
