"""The AWS adapter's instance lifecycle against moto's EC2 server (real HTTP): spot and
on-demand launches, a retried launch with the same client token, ownership tags, describe by
tag, terminate, and the controller's orphan sweep over the adapter."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta

from core.models import (
    TAG_ATTEMPT,
    TAG_JOB,
    TAG_OWNER,
    InstanceState,
    Market,
    Offer,
    utcnow,
)
from providers.base import LaunchRequest
from providers.bootstrap import AGENT_BASE_DIR
from scheduler.controller.context import AgentBootstrap, Context, ProviderRegistry
from scheduler.controller.orphans import sweep_orphans
from scheduler.store import Store
from scheduler.store.agents import AgentTokens
from scheduler.timing import ORPHAN_GRACE_S

T0 = datetime(2026, 11, 30, 12, tzinfo=UTC)


def _offer(market: Market, region: str = "us-east-1", zone: str = "us-east-1b",
           itype: str = "g5.xlarge") -> Offer:
    return Offer(provider="aws", region=region, zone=zone, instance_type=itype, market=market,
                 gpu_model="A10G", gpu_count=1, vram_gib=22888 / 1024, vcpus=4, memory_gib=16,
                 price_usd_per_hour=0.5, observed_at=T0)


def _request(owner: str, token: str, market: Market = Market.SPOT, **offer_kw) -> LaunchRequest:
    return LaunchRequest(offer=_offer(market, **offer_kw), client_token=token,
                         tags={TAG_OWNER: owner, TAG_JOB: token.rsplit("-", 1)[0],
                               TAG_ATTEMPT: token.rsplit("-", 1)[1]},
                         agent_env={"GA_API_URL": "http://10.0.0.5:8740",
                                    "GA_AGENT_TOKEN": "secret-agent-token"})


def _raw(ec2, region: str, instance_id: str) -> dict:
    return ec2(region).describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]


def test_spot_and_on_demand_launches(make_provider, ec2, owner: str) -> None:
    provider = make_provider()
    spot = provider.launch(_request(owner, "job-a-1"))
    assert spot.offer.series() == "aws/us-east-1/us-east-1b/g5.xlarge/spot"
    # RunInstances answers ``pending`` (EC2 does; moto always does): launch reports that
    # reply, not a later describe.
    assert spot.state is InstanceState.PENDING
    assert spot.client_token == "job-a-1" and spot.tags[TAG_OWNER] == owner
    raw = _raw(ec2, "us-east-1", spot.id)
    assert raw["InstanceLifecycle"] == "spot" and raw["ClientToken"] == "job-a-1"
    assert raw["Placement"]["AvailabilityZone"] == "us-east-1b"
    assert {t["Key"]: t["Value"] for t in raw["Tags"]} == {
        TAG_OWNER: owner, TAG_JOB: "job-a", TAG_ATTEMPT: "1", "Name": "gpu-arbiter job-a-1"}

    # The user data arrived base64-encoded once: the instance would run our script.
    encoded = ec2("us-east-1").describe_instance_attribute(
        InstanceId=spot.id, Attribute="userData")["UserData"]["Value"]
    script = base64.b64decode(encoded).decode()
    assert script.startswith("#!/bin/bash") and f"GA_DIR={AGENT_BASE_DIR}" in script
    assert "gpu-arbiter==0.1.0" in script and "secret-agent-token" not in script

    on_demand = provider.launch(_request(owner, "job-b-1", Market.ON_DEMAND, region="us-west-2",
                                         zone="us-west-2a"))
    raw = _raw(ec2, "us-west-2", on_demand.id)
    assert "InstanceLifecycle" not in raw and on_demand.offer.market is Market.ON_DEMAND
    assert on_demand.offer.region == "us-west-2"


def test_retried_launch_with_the_same_token_makes_one_instance(make_provider, owner: str) -> None:
    provider = make_provider()
    first = provider.launch(_request(owner, "job-c-1"))
    again = provider.launch(_request(owner, "job-c-1"))
    # A new adapter (a restarted daemon) retrying the launch finds it too.
    restarted = make_provider().launch(_request(owner, "job-c-1"))
    assert first.id == again.id == restarted.id
    mine = provider.describe({TAG_OWNER: owner})
    assert [i.id for i in mine] == [first.id]
    other = provider.launch(_request(owner, "job-c-2"))  # next attempt: a new instance
    assert other.id != first.id and len(provider.describe({TAG_OWNER: owner})) == 2


def test_describe_by_tags_and_terminate(make_provider, ec2, owner: str) -> None:
    provider = make_provider()
    a = provider.launch(_request(owner, "job-d-1"))
    b = provider.launch(_request(owner, "job-e-1", region="us-west-2", zone="us-west-2b"))
    stranger = provider.launch(_request(f"{owner}-other", "job-f-1"))
    assert {i.id for i in provider.describe({TAG_OWNER: owner})} == {a.id, b.id}
    assert [i.id for i in provider.describe({TAG_OWNER: owner, TAG_JOB: "job-e"})] == [b.id]
    assert {a.id, b.id, stranger.id} <= {i.id for i in provider.describe()}

    fresh = make_provider()  # does not know which region b lives in: tries each
    fresh.terminate(b.id)
    provider.terminate(a.id)
    provider.terminate(a.id)  # already terminated: quiet
    provider.terminate("i-0123456789abcdef0")  # never existed: quiet
    states = {i.id: i for i in provider.describe({TAG_OWNER: owner})}
    assert {i.state for i in states.values()} == {InstanceState.TERMINATED}
    assert states[a.id].terminated_reason == "terminated on request"  # moto's StateReason
    assert _raw(ec2, "us-west-2", b.id)["State"]["Name"] == "terminated"
    assert _raw(ec2, "us-east-1", stranger.id)["State"]["Name"] != "terminated"


def test_orphan_sweep_terminates_only_unclaimed_instances(make_provider, redis_client,
                                                          owner: str) -> None:
    """The controller's leak collection (scheduler/controller/orphans.py) over the adapter:
    instances listed by the ownership tag; the one no job claims is terminated after the
    grace period; another owner's instance is never touched."""
    provider = make_provider()
    orphan = provider.launch(_request(owner, "job-h-1"))
    stranger = provider.launch(_request(f"{owner}-other", "job-i-1"))
    ctx = Context(store=Store.over(redis_client), providers=ProviderRegistry([provider]),
                  bootstrap=AgentBootstrap(api_url="http://127.0.0.1:9", store_url="file:///x",
                                           tokens=AgentTokens(b"s")), owner=owner)
    assert sweep_orphans(ctx) == []  # younger than the grace period
    ctx.clock = lambda: utcnow() + timedelta(seconds=ORPHAN_GRACE_S + 5)
    assert sweep_orphans(ctx) == [orphan.id]
    gone = {i.id: i.state for i in provider.describe({TAG_OWNER: owner})}
    assert gone == {orphan.id: InstanceState.TERMINATED}
    assert sweep_orphans(ctx) == []  # terminated instances are left alone
    alive = provider.describe({TAG_OWNER: f"{owner}-other"})
    assert [i.state.is_gone() for i in alive] == [False] and alive[0].id == stranger.id
