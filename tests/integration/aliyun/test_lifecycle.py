"""The Alibaba Cloud adapter's instance lifecycle through the REAL SDK against the fake ECS
endpoint (signatures checked): spot and pay-as-you-go launches, a retried launch with the same
client token, no stock, describe by tag, release, a spot reclaim (Recycling → notice →
released = preempted), an instance listed late, and the controller's orphan sweep."""

from __future__ import annotations

import base64
from datetime import timedelta

import pytest

from core.models import (
    TAG_ATTEMPT,
    TAG_JOB,
    TAG_OWNER,
    InstanceState,
    Market,
    utcnow,
)
from providers.aliyun.launch import CLIENT_TOKEN_TAG
from providers.base import LaunchRequest
from providers.errors import CapacityError, ProviderError
from scheduler.controller.context import AgentBootstrap, Context, ProviderRegistry
from scheduler.controller.orphans import sweep_orphans
from scheduler.store import Store
from scheduler.store.agents import AgentTokens
from scheduler.timing import ORPHAN_GRACE_S
from tests.contract.providers.aliyun.data import (
    GN6I,
    GN6V,
    LIST_CNY,
    OTHER_REGION,
    REGION,
    T0,
)

LAUNCH = {"image_id": "ubuntu_22_04_x64_20G_alibase_20240130.vhd",
          "vswitches": {"cn-hangzhou-h": "vsw-h", "cn-hangzhou-i": "vsw-i",
                        "cn-beijing-g": "vsw-g"},
          "security_groups": {REGION: "sg-hz", OTHER_REGION: "sg-bj"}}
AGENT_SECRET = "secret-agent-token"


@pytest.fixture
def provider(fake_ecs, make_provider):
    """A launch-configured provider on both regions, with its offers listed once."""
    made = make_provider(fake_ecs, regions=[REGION, OTHER_REGION], launch=LAUNCH)
    made.list_offers()
    return made


def _offer(provider, series: str):
    return next(o for o in provider.list_offers() if o.key.series() == series)


def _request(offer, token: str, owner: str = "ga-test") -> LaunchRequest:
    job, attempt = token.rsplit("-", 1)
    return LaunchRequest(offer=offer, client_token=token,
                         tags={TAG_OWNER: owner, TAG_JOB: job, TAG_ATTEMPT: attempt},
                         agent_env={"GA_API_URL": "http://10.0.0.5:8740",
                                    "GA_AGENT_TOKEN": AGENT_SECRET})


SPOT_H = f"aliyun/{REGION}/cn-hangzhou-h/{GN6I}/spot"
OD_I = f"aliyun/{REGION}/cn-hangzhou-i/{GN6V}/on-demand"


def test_spot_and_on_demand_launches(provider, fake_ecs) -> None:
    spot = provider.launch(_request(_offer(provider, SPOT_H), "job-a-1"))
    assert spot.offer.series() == SPOT_H and spot.state is InstanceState.PENDING
    assert spot.client_token == "job-a-1" and spot.tags[TAG_OWNER] == "ga-test"
    (sent,) = fake_ecs.calls("RunInstances")
    assert (sent["SpotStrategy"], sent["SpotDuration"], sent["SpotInterruptionBehavior"]) == (
        "SpotAsPriceGo", "1", "Terminate")
    assert (sent["ClientToken"], sent["ZoneId"], sent["VSwitchId"], sent["SecurityGroupId"]) == (
        "job-a-1", "cn-hangzhou-h", "vsw-h", "sg-hz")
    assert (sent["InstanceChargeType"], sent["InstanceType"], sent["RegionId"]) == (
        "PostPaid", GN6I, REGION)
    script = base64.b64decode(sent["UserData"]).decode()
    assert script.startswith("#!/bin/bash") and AGENT_SECRET not in script
    tags = {sent[f"Tag.{i}.Key"]: sent[f"Tag.{i}.Value"] for i in range(1, 5)}
    assert tags == {TAG_OWNER: "ga-test", TAG_JOB: "job-a", TAG_ATTEMPT: "1",
                    CLIENT_TOKEN_TAG: "job-a-1"}

    on_demand = provider.launch(_request(_offer(provider, OD_I), "job-b-1"))
    assert on_demand.offer.market is Market.ON_DEMAND
    assert fake_ecs.calls("RunInstances")[1]["SpotStrategy"] == "NoSpot"
    assert "SpotDuration" not in fake_ecs.calls("RunInstances")[1]
    states = {i.id: i.state for i in provider.describe({TAG_OWNER: "ga-test"})}
    assert states == {spot.id: InstanceState.RUNNING, on_demand.id: InstanceState.RUNNING}
    assert fake_ecs.rejected == []


def test_spot_with_a_price_limit_in_the_account_currency(fake_ecs, make_provider) -> None:
    provider = make_provider(fake_ecs, regions=[REGION, OTHER_REGION],
                             launch={**LAUNCH, "spot_strategy": "SpotWithPriceLimit",
                                     "spot_price_limit_ratio": 0.5})
    provider.launch(_request(_offer(provider, SPOT_H), "job-l-1"))
    sent = fake_ecs.calls("RunInstances")[0]
    assert sent["SpotStrategy"] == "SpotWithPriceLimit"
    assert float(sent["SpotPriceLimit"]) == pytest.approx(LIST_CNY[GN6I] * 0.5)  # CNY, not USD


def test_retried_launch_with_the_same_token_makes_one_instance(provider, fake_ecs,
                                                                make_provider) -> None:
    offer = _offer(provider, SPOT_H)
    first = provider.launch(_request(offer, "job-c-1"))
    again = provider.launch(_request(offer, "job-c-1"))
    restarted = make_provider(fake_ecs, regions=[REGION, OTHER_REGION], launch=LAUNCH)
    assert first.id == again.id == restarted.launch(_request(offer, "job-c-1")).id
    assert len(fake_ecs.calls("RunInstances")) == 1  # found by its client-token tag
    # ECS's own ClientToken idempotency, when the tag lookup cannot help (e.g. a lost answer):
    params = dict(fake_ecs.calls("RunInstances")[0])
    assert provider.client.run_instance(REGION, {k: v for k, v in params.items() if k in (
        "InstanceType", "ZoneId", "ImageId", "VSwitchId", "SecurityGroupId", "ClientToken",
        "UserData", "SpotStrategy")}) == first.id
    other = provider.launch(_request(offer, "job-c-2"))  # next attempt: a new instance
    assert other.id != first.id and len(provider.describe({TAG_JOB: "job-c"})) == 2


def test_no_stock_is_a_capacity_error_and_the_offer_follows_the_stock(provider, fake_ecs) -> None:
    """Skipping an offer after a capacity error is the controller's one capacity cache (in
    Redis); the adapter raises the typed error and offers what ECS has in stock."""
    offer = _offer(provider, SPOT_H)
    fake_ecs.catalog.stock[REGION]["spot"]["cn-hangzhou-h"][GN6I] = ("SoldOut", "WithoutStock")
    with pytest.raises(CapacityError) as caught:
        provider.launch(_request(offer, "job-d-1"))
    assert caught.value.code == "OperationDenied.NoStock" and caught.value.provider == "aliyun"
    fake_ecs.catalog.stock[REGION]["spot"]["cn-hangzhou-h"][GN6I] = ("Available", "WithStock")
    assert SPOT_H in {o.key.series() for o in provider.list_offers()}


def test_launch_refusals_name_the_problem(provider, make_provider, fake_ecs) -> None:
    offer = _offer(provider, SPOT_H)
    with pytest.raises(ProviderError, match="launch is not configured"):
        make_provider(fake_ecs).launch(_request(offer, "job-e-1"))
    elsewhere = offer.model_copy(update={"zone": "cn-hangzhou-k"})
    with pytest.raises(ProviderError, match="no vSwitch configured for zone cn-hangzhou-k"):
        provider.launch(_request(elsewhere, "job-e-1"))
    foreign = offer.model_copy(update={"provider": "aws"})
    with pytest.raises(ProviderError, match="not configured"):
        provider.launch(_request(foreign, "job-e-1"))
    assert fake_ecs.calls("RunInstances") == []


def test_describe_by_tags_and_terminate(provider, fake_ecs, make_provider) -> None:
    a = provider.launch(_request(_offer(provider, SPOT_H), "job-f-1"))
    b = provider.launch(_request(_offer(provider, f"aliyun/{OTHER_REGION}/cn-beijing-g/{GN6I}/spot"),
                                 "job-g-1"))
    stranger = provider.launch(_request(_offer(provider, OD_I), "job-s-1", owner="someone-else"))
    assert {i.id for i in provider.describe({TAG_OWNER: "ga-test"})} == {a.id, b.id}
    assert [i.id for i in provider.describe({TAG_OWNER: "ga-test", TAG_JOB: "job-g"})] == [b.id]
    assert {a.id, b.id, stranger.id} <= {i.id for i in provider.describe()}

    make_provider(fake_ecs, regions=[REGION, OTHER_REGION]).terminate(b.id)  # tries each region
    provider.terminate(a.id)
    provider.terminate(a.id)  # already released: quiet
    provider.terminate("i-bp1neverexisted")  # never existed: quiet
    assert all(c["Force"] == "true" for c in fake_ecs.calls("DeleteInstance"))
    gone = {i.id: i for i in provider.describe({TAG_OWNER: "ga-test"})}
    # ECS no longer lists them; the adapter remembers what it released and what it saw.
    assert {i.state for i in gone.values()} == {InstanceState.TERMINATED}
    assert gone[a.id].terminated_reason == "terminated on request"
    assert gone[b.id].terminated_reason == "released"  # deleted by another adapter instance
    assert set(fake_ecs.instances) == {stranger.id}


def test_spot_reclaim_gives_a_notice_then_a_preempted_instance(provider, fake_ecs) -> None:
    instance = provider.launch(_request(_offer(provider, SPOT_H), "job-h-1"))
    assert provider.describe({TAG_JOB: "job-h"})[0].notice is None
    fake_ecs.reclaim(instance.id)
    (noticed,) = provider.describe({TAG_JOB: "job-h"})
    assert noticed.notice is not None and noticed.notice.action == "terminate"
    assert noticed.notice.action_at == T0 + timedelta(minutes=5)  # five minutes after Recycling
    assert provider.describe({TAG_JOB: "job-h"})[0].notice == noticed.notice  # stable
    fake_ecs.release(instance.id)
    (released,) = provider.describe({TAG_JOB: "job-h"})
    assert (released.state, released.terminated_reason) == (InstanceState.TERMINATED, "preempted")


def test_an_instance_listed_late_is_pending_meanwhile(fake_ecs_factory, make_provider) -> None:
    fake = fake_ecs_factory(hide_new_instances=3)
    provider = make_provider(fake, regions=[REGION, OTHER_REGION], launch=LAUNCH)
    provider.list_offers()
    instance = provider.launch(_request(_offer(provider, SPOT_H), "job-i-1"))
    assert instance.state is InstanceState.PENDING and instance.client_token == "job-i-1"
    (seen,) = provider.describe({TAG_JOB: "job-i"})  # not listed by ECS yet
    assert (seen.id, seen.state) == (instance.id, InstanceState.PENDING)
    assert provider.launch(_request(_offer(provider, SPOT_H), "job-i-1")).id == instance.id
    assert len(fake.calls("RunInstances")) == 1
    (listed,) = provider.describe({TAG_JOB: "job-i"})
    assert listed.state is InstanceState.RUNNING


def test_orphan_sweep_terminates_only_unclaimed_instances(provider, fake_ecs, redis_client
                                                          ) -> None:
    """The controller's leak collection over the adapter: instances listed by the ownership
    tag; the one no job claims is released after the grace period (ECS's CreationTime has
    minute precision); another owner's instance is never touched."""
    orphan = provider.launch(_request(_offer(provider, SPOT_H), "job-j-1", owner="ga-sweep"))
    stranger = provider.launch(_request(_offer(provider, OD_I), "job-k-1", owner="other"))
    ctx = Context(store=Store.over(redis_client), providers=ProviderRegistry([provider]),
                  bootstrap=AgentBootstrap(api_url="http://127.0.0.1:9", store_url="file:///x",
                                           tokens=AgentTokens(b"s")), owner="ga-sweep")
    ctx.clock = lambda: utcnow() - timedelta(minutes=2)
    assert sweep_orphans(ctx) == []  # younger than the grace period
    ctx.clock = lambda: utcnow() + timedelta(seconds=ORPHAN_GRACE_S + 60)
    assert sweep_orphans(ctx) == [orphan.id]
    gone = {i.id: i.state for i in provider.describe({TAG_OWNER: "ga-sweep"})}
    assert gone == {orphan.id: InstanceState.TERMINATED}
    assert sweep_orphans(ctx) == []  # released instances are left alone
    assert stranger.id in fake_ecs.instances and orphan.id not in fake_ecs.instances
