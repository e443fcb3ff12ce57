"""``schedctl plan`` shows what the daemon would do: on one market (a real replay cloud polled
into a real Redis), the plan's policy scenario and a fresh placement by the real reconcile loop
choose the same offer, also when the cheapest offer per hour is not the risk-aware choice, and
the plan's costs are the policy's. With a daemon (the API route, given the daemon's providers)
and without one (the configured providers listed directly)."""

from __future__ import annotations

import pytest
import yaml
from fastapi.testclient import TestClient

from core.models import JobState
from scheduler.api.app import create_app
from scheduler.checkpoints.local import LocalObjectStore
from scheduler.controller.reconcile import reconcile_pass
from scheduler.poller.offers import OfferPoller
from scheduler.services import jobs as job_service
from scheduler.services.plans import plan_without_daemon
from scheduler.store.agents import AgentTokens
from tests.integration.controller.conftest import controller_context, replay_market  # noqa: F401

TOKEN = "user-token"
# "risky" is the cheapest per hour but reclaimed almost every month (a mean run of ~104 market
# hours); with an hour between checkpoints (60 market hours at 60x) a reclaim loses ~30 h of
# work, so its risk-aware cost is ~0.14/h and "steady" (0.12/h, rarely reclaimed) wins.
MARKET = """
name: planmatch
time_scale: 60
notice_seconds: 2
offers:
  - {provider: aws, region: r1, zone: r1a, instance_type: risky, gpu_model: T4, gpu_count: 1,
     vram_gib: 16, vcpus: 4, memory_gib: 16, spot_price_usd_per_hour: 0.10,
     interruption_risk: 0.999}
  - {provider: aws, region: r1, zone: r1b, instance_type: steady, gpu_model: T4, gpu_count: 1,
     vram_gib: 16, vcpus: 4, memory_gib: 16, spot_price_usd_per_hour: 0.12,
     interruption_risk: 0.01, on_demand_price_usd_per_hour: 0.50}
  - {provider: aws, region: r1, zone: r1b, instance_type: small, gpu_model: T4, gpu_count: 1,
     vram_gib: 8, vcpus: 4, memory_gib: 16, spot_price_usd_per_hour: 0.05}
"""
SPEC = {"name": "train", "command": "python train.py", "expected_hours": 20,
        "resources": {"gpu_count": 1, "min_vram_gib": 16},
        "checkpoint": {"sync_interval_s": 3600}}


@pytest.fixture
def market(redis_client, replay_market, tmp_path):  # noqa: F811
    provider = replay_market(MARKET)
    ctx = controller_context(redis_client, provider)
    OfferPoller(ctx.store, provider)()
    app = create_app(ctx.store, LocalObjectStore(tmp_path / "objects"), AgentTokens(b"s"), TOKEN)
    app.state.providers = ctx.providers  # as the daemon does
    return ctx, TestClient(app, headers={"Authorization": f"Bearer {TOKEN}"}), provider


def _placed(ctx, spec) -> str:
    job = job_service.submit(ctx.store, None, spec)
    reconcile_pass(ctx)
    job = ctx.store.jobs.get(job.id)
    assert job.state is JobState.PROVISIONING, job.waiting_reason
    return job.placement.offer.key.series()


@pytest.mark.parametrize("spec", [
    SPEC,
    {**SPEC, "checkpoint": {"sync_interval_s": 60}},  # little to lose: the cheapest wins
    {**SPEC, "market": "on-demand"},
])
def test_plan_through_the_api_chooses_what_a_placement_chooses(market, spec):
    ctx, client, _ = market
    body = client.post("/v1/plans", json={"spec": spec}).json()
    policy = body["scenarios"]["policy"]
    assert policy["series"] == _placed(ctx, spec)
    # Its expected cost is the one the policy ranks by, and the best offer by expected cost.
    assert body["best_offers"][0]["series"] == policy["series"]
    assert "effective $" in policy["reason"] and "eligible" in policy["reason"]


def test_the_cheapest_per_hour_is_not_the_risk_aware_choice(market):
    ctx, client, _ = market
    body = client.post("/v1/plans", json={"spec": SPEC}).json()
    cheapest = min(ctx.store.offers.all_offers(), key=lambda o: o.price_usd_per_hour
                   if o.vram_gib >= 16 else 1e9)
    assert cheapest.instance_type == "risky"
    assert body["scenarios"]["policy"]["instance_type"] == "steady"
    assert _placed(ctx, SPEC).endswith("/steady/spot")
    risky = next(r for r in body["best_offers"] if r["instance_type"] == "risky")
    steady = body["scenarios"]["policy"]
    # The risk-aware model: risky's reclaims cost it rework, steady's hardly any.
    assert risky["rework_hours"] > 5 and steady["rework_hours"] < 0.5
    assert risky["cost_usd"]["expected"] > steady["cost_usd"]["expected"]
    assert body["scenarios"]["spot"]["instance_type"] == "steady"
    assert body["scenarios"]["on-demand"]["market"] == "on-demand"


def test_plan_without_a_daemon_lists_the_configured_market_and_agrees(market, tmp_path):
    ctx, _, provider = market
    home = tmp_path / "home"
    home.mkdir()
    # The daemon's config for this market, sharing the running cloud's state (its clock).
    (home / "config.yaml").write_text(yaml.safe_dump({"providers": [
        {"kind": "replay", "market": str(provider.market.path),
         "state_dir": str(provider.state_dir)}]}))
    ctx.store.redis.delete(*ctx.store.redis.keys("ga:offers*"))  # no daemon: nothing polled
    assert ctx.store.offers.all_offers() == []
    body = plan_without_daemon(ctx.store, home, SPEC)
    assert body["offers_source"].startswith("listed now by the configured providers")
    assert body["scenarios"]["policy"]["instance_type"] == "steady"
    OfferPoller(ctx.store, provider)()  # a daemon starts: it polls, then places
    assert _placed(ctx, SPEC) == body["scenarios"]["policy"]["series"]


def test_an_empty_market_says_so_as_a_placement_would(redis_client, tmp_path):
    from scheduler.store import Store

    app = create_app(Store.over(redis_client), LocalObjectStore(tmp_path / "objects"),
                     AgentTokens(b"s"), TOKEN)
    client = TestClient(app, headers={"Authorization": f"Bearer {TOKEN}"})
    body = client.post("/v1/plans", json={"spec": SPEC})
    assert body.status_code == 200, body.text
    body = body.json()
    assert body["eligible"] == 0 and body["best_offers"] == []
    assert body["scenarios"]["policy"] == {"reason": "no offer fits: the market has no offers"}
    assert body["scenarios"]["spot"] is None and body["scenarios"]["on-demand"] is None


def test_with_history_only_the_estimates_say_the_daemon_would_wait(redis_client, tmp_path):
    from datetime import timedelta

    from core.models import PriceObservation, utcnow
    from scheduler.store import Store

    store = Store.over(redis_client)
    at = utcnow() - timedelta(days=1)
    store.offers.append_prices([PriceObservation(series="aws/us-east-1/us-east-1b/p3.2xlarge/spot",
                                                 observed_at=at, price_usd_per_hour=0.95)])
    app = create_app(store, LocalObjectStore(tmp_path / "objects"), AgentTokens(b"s"), TOKEN)
    client = TestClient(app, headers={"Authorization": f"Bearer {TOKEN}"})
    body = client.post("/v1/plans", json={"spec": SPEC}).json()
    assert body["offers_source"] == "latest prices in history" and body["eligible"] == 1
    assert body["best_offers"][0]["instance_type"] == "p3.2xlarge"
    assert body["scenarios"]["spot"]["price_now"] == 0.95
    assert body["scenarios"]["policy"] == {"reason": "no provider lists an offer now: the daemon "
                                           "would wait (these estimates use the latest prices "
                                           "in history)"}
