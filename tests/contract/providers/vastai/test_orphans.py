"""The controller's leak collection over the Vast.ai adapter (real Redis, real SDK, the local
fake): instances are found by their label and ownership tags; the one no job claims is
destroyed after the grace period; another owner's instance is never touched."""

from __future__ import annotations

from datetime import timedelta

from core.models import TAG_ATTEMPT, TAG_JOB, TAG_OWNER, InstanceState, Market, utcnow
from providers.base import LaunchRequest
from scheduler.controller.context import AgentBootstrap, Context, ProviderRegistry
from scheduler.controller.orphans import sweep_orphans
from scheduler.store import Store
from scheduler.store.agents import AgentTokens
from scheduler.timing import ORPHAN_GRACE_S
from tests.contract.providers.vastai.data import ask, needs_examples

pytestmark = needs_examples


def test_the_orphan_sweep_destroys_only_unclaimed_instances(fake_vast_factory, make_provider,
                                                            redis_client) -> None:
    fake = fake_vast_factory([ask(), ask(id=2, machine_id=2)])
    provider = make_provider(fake)
    spot = [o for o in provider.list_offers() if o.market is Market.SPOT]

    def launch(offer, token: str, owner: str):
        return provider.launch(LaunchRequest(offer=offer, client_token=token, tags={
            TAG_OWNER: owner, TAG_JOB: token.rsplit("-", 1)[0], TAG_ATTEMPT: "1"}))

    orphan = launch(spot[0], "job-j-1", "ga-sweep")
    stranger = launch(spot[1], "job-k-1", "other")
    ctx = Context(store=Store.over(redis_client), providers=ProviderRegistry([provider]),
                  bootstrap=AgentBootstrap(api_url="http://127.0.0.1:9", store_url="file:///x",
                                           tokens=AgentTokens(b"s")), owner="ga-sweep")
    ctx.clock = lambda: utcnow() - timedelta(minutes=2)
    assert sweep_orphans(ctx) == []  # younger than the grace period
    ctx.clock = lambda: utcnow() + timedelta(seconds=ORPHAN_GRACE_S + 60)
    assert sweep_orphans(ctx) == [orphan.id]
    gone = {i.id: i.state for i in provider.describe({TAG_OWNER: "ga-sweep"})}
    assert gone == {orphan.id: InstanceState.TERMINATED}
    assert sweep_orphans(ctx) == []  # destroyed instances are left alone
    assert int(stranger.id) in fake.instances and int(orphan.id) not in fake.instances
