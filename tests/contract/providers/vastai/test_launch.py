"""Launch, describe and terminate through the real vastai SDK against the local fake: the bid
sent, refusals before any create, idempotency on the client token (label), the duplicate left
by a race, outbid as a preemption without notice, destroy, and the onstart script."""

from __future__ import annotations

import base64
import json
import re
import subprocess

import pytest

from core.models import TAG_JOB, TAG_OWNER, InstanceState, Market, Offer
from providers.base import LaunchRequest
from providers.errors import CapacityError, ProviderError
from providers.vastai.launch import create_arguments
from providers.vastai.settings import VastLaunchSettings
from tests.contract.providers.vastai.data import ask, needs_examples

pytestmark = needs_examples
SECRET = "agent-token-and-store-secret-0123456789"


def _offers(provider, market: Market = Market.SPOT) -> Offer:
    return next(o for o in provider.list_offers() if o.market is market)


def _request(offer: Offer, token: str = "job-1-1", max_price: float | None = None) -> LaunchRequest:
    return LaunchRequest(offer=offer, client_token=token,
                         tags={TAG_OWNER: "ga-test", TAG_JOB: "job-1"},
                         agent_env={"GA_API_URL": "http://10.0.0.5:8740", "GA_AGENT_TOKEN": SECRET},
                         max_price_usd_per_hour=max_price)


def test_a_spot_launch_bids_the_minimum_plus_the_margin(fake_vast_factory, make_provider) -> None:
    fake = fake_vast_factory([ask()])
    provider = make_provider(fake, bid={"margin_fraction": 0.1})
    instance = provider.launch(_request(_offers(provider)))
    [create] = fake.calls("PUT", "/api/v0/asks/")
    assert create.path == "/api/v0/asks/11684738/"
    body = create.body
    assert body["price"] == pytest.approx(0.22) and body["client_id"] == "me"
    assert body["label"] == "gpu-arbiter:job-1-1" and body["cancel_unavail"] is True
    assert body["env"]["GA_OFFER"] == "vastai/cn/cn-guangxi/m22990.1xRTX4090/spot"
    assert SECRET not in str(body["env"]) and SECRET not in body["onstart"]
    assert fake.instances[int(instance.id)].row["is_bid"] is True  # rented interruptible
    assert instance.client_token == "job-1-1" and instance.tags[TAG_JOB] == "job-1"
    assert instance.state is InstanceState.PENDING and instance.offer.market is Market.SPOT


def test_an_on_demand_launch_sends_no_bid(fake_vast_factory, make_provider) -> None:
    fake = fake_vast_factory([ask()])
    provider = make_provider(fake)
    offer = _offers(provider, Market.ON_DEMAND)
    with pytest.raises(ProviderError, match="on-demand price 0.2467") as refused:
        provider.launch(_request(offer, max_price=0.24))  # the job's cap is below dph_total
    assert refused.value.code == "InvalidLaunchRequest"
    provider.launch(_request(offer))
    [create] = fake.calls("PUT", "/api/v0/asks/")
    assert create.body["price"] is None


def test_a_bid_is_never_omitted_nor_above_the_jobs_max(fake_vast_factory, make_provider) -> None:
    fake = fake_vast_factory([ask()])
    provider = make_provider(fake)
    offer = _offers(provider)
    with pytest.raises(ProviderError, match="job's max_price_usd_per_hour") as refused:
        provider.launch(_request(offer, max_price=0.15))  # min_bid is 0.2
    assert refused.value.code == "InvalidLaunchRequest"
    assert fake.calls("PUT", "/api/v0/asks/") == []  # refused before any create
    capped = provider.launch(_request(offer, token="job-1-2", max_price=0.21))
    assert capped.client_token == "job-1-2"
    assert [c.body["price"] for c in fake.calls("PUT", "/api/v0/asks/")] == [0.21]
    cfg = VastLaunchSettings(image="pytorch/pytorch")
    with pytest.raises(ValueError, match="needs a bid"):
        create_arguments(offer=offer, ask_id=1, client_token="t", tags={},
                         agent_env={}, cfg=cfg, bid=None)


def test_the_current_min_bid_decides_and_a_gone_ask_is_no_capacity(fake_vast_factory,
                                                                  make_provider) -> None:
    fake = fake_vast_factory([ask()])
    provider = make_provider(fake)
    offer = _offers(provider)
    fake.asks[11684738]["min_bid"] = 0.22  # the market rose since the poll
    provider.launch(_request(offer))
    assert fake.calls("PUT", "/api/v0/asks/")[0].body["price"] == pytest.approx(0.242)
    with pytest.raises(CapacityError, match="no such spot ask"):
        provider.launch(_request(offer, token="job-1-2"))  # rented now: not listed


@pytest.mark.parametrize(("status", "error"), [(410, "no_longer_available"),
                                               (404, "no_such_ask")])
def test_a_taken_or_unknown_ask_at_create_is_no_capacity(fake_vast_factory, make_provider,
                                                        status: int, error: str) -> None:
    fake = fake_vast_factory([ask()])
    provider = make_provider(fake)
    offer = _offers(provider)
    fake.fail("/api/v0/asks/", status, {"success": False, "error": error,
                                        "msg": "Offer no longer available", "ask_id": 11684738})
    with pytest.raises(CapacityError, match=f"HTTP {status} {error}"):
        provider.launch(_request(offer))


def test_a_repeated_token_returns_the_first_instance(fake_vast_factory, make_provider) -> None:
    fake = fake_vast_factory([ask()])
    provider = make_provider(fake)
    offer = _offers(provider)
    first = provider.launch(_request(offer))
    restarted = make_provider(fake)  # another replica, or the daemon after a restart
    again = restarted.launch(_request(offer))
    assert again.id == first.id and len(fake.calls("PUT", "/api/v0/asks/")) == 1
    lookup = fake.calls("GET", "/api/v1/instances/")[0].query
    assert json.loads(lookup["select_filters"]) == {"label": {"in": ["gpu-arbiter:job-1-1"]}}
    assert int(lookup["limit"]) == 25  # the SDK's page
    [found] = make_provider(fake).describe({TAG_OWNER: "ga-test"})
    assert (found.id, found.client_token, found.offer) == (first.id, "job-1-1", offer.key)


def test_a_duplicate_made_by_a_race_is_destroyed(fake_vast_factory, make_provider) -> None:
    fake = fake_vast_factory([ask(), ask(id=5, machine_id=22990)])
    provider = make_provider(fake)
    offer = _offers(provider)
    first = provider.launch(_request(offer))
    # The other replica passed its look-up before ours created: it makes a second instance.
    free = next(i for i, a in fake.asks.items() if not a.get("rented"))
    args = create_arguments(offer=offer, ask_id=free, client_token="job-1-1", tags={},
                            agent_env={}, cfg=provider.settings.launch, bid=0.22)
    duplicate = provider.client.create_instance(args)
    assert provider.launch(_request(offer)).id == first.id
    assert duplicate not in fake.instances and int(first.id) in fake.instances


def test_outbid_is_a_preemption_without_notice(fake_vast_factory, make_provider) -> None:
    fake = fake_vast_factory([ask()])
    provider = make_provider(fake)
    instance = provider.launch(_request(_offers(provider)))
    assert instance.state is InstanceState.PENDING  # loading
    [seen] = provider.describe({TAG_JOB: "job-1"})
    assert seen.state is InstanceState.RUNNING
    fake.outbid(int(instance.id), still_running=True)
    [stopping] = provider.describe({TAG_JOB: "job-1"})
    assert (stopping.state, stopping.terminated_reason) == (InstanceState.SHUTTING_DOWN,
                                                            "preempted: outbid")
    fake.outbid(int(instance.id))
    [gone] = provider.describe()
    assert (gone.state, gone.terminated_reason, gone.notice) == (
        InstanceState.TERMINATED, "preempted: outbid", None)
    assert provider.describe({TAG_JOB: "job-2"}) == []


def test_terminate_destroys_and_is_quiet_when_gone(fake_vast_factory, make_provider) -> None:
    fake = fake_vast_factory([ask()])
    provider = make_provider(fake)
    instance = provider.launch(_request(_offers(provider)))
    provider.terminate(instance.id)
    assert int(instance.id) not in fake.instances
    provider.terminate(instance.id)   # already gone: 400 "no such instance" → quiet
    provider.terminate("i-0123")      # never a Vast id
    [remembered] = provider.describe()
    assert (remembered.state, remembered.terminated_reason) == (InstanceState.TERMINATED,
                                                                "terminated on request")


def test_other_instances_of_the_account_are_not_ours(fake_vast_factory, make_provider) -> None:
    fake = fake_vast_factory([ask()])
    provider = make_provider(fake)
    args = create_arguments(offer=_offers(provider), ask_id=11684738, client_token="x",
                            tags={}, agent_env={}, cfg=provider.settings.launch, bid=0.3)
    provider.client.create_instance(args | {"label": "my notebook"})
    assert provider.describe() == []


def test_the_onstart_script_starts_the_agent_with_the_container_id(tmp_path) -> None:
    cfg = VastLaunchSettings(image="pytorch/pytorch", agent_venv=None)
    offer = Offer(provider="vastai", region="cn", zone="cn-guangxi",
                  instance_type="m22990.1xRTX4090", market=Market.SPOT, gpu_model="RTX4090",
                  gpu_count=1, vram_gib=24, vcpus=24, memory_gib=62.9, price_usd_per_hour=0.2,
                  observed_at="2026-12-01T12:00:00Z")
    script = create_arguments(offer=offer, ask_id=1, client_token="t", tags={},
                              agent_env={"GA_AGENT_TOKEN": SECRET}, cfg=cfg,
                              bid=0.22)["onstart_cmd"]
    subprocess.run(["bash", "-n"], input=script.encode(), check=True)
    assert "SUPERVISOR=nohup" in script and 'CONTAINER_ID' in script
    encoded = re.search(r"<<'GA_AGENT_ENV'\n(.*?)\nGA_AGENT_ENV", script, re.DOTALL).group(1)
    env = base64.b64decode(encoded.replace("\n", "")).decode()
    assert f"GA_AGENT_TOKEN={SECRET}" in env and "GA_METADATA_FLAVOR=none" in env


@pytest.mark.parametrize(("env", "out"), [
    ({"CONTAINER_ID": "48738927"}, "48738927"),
    ({"VAST_CONTAINERLABEL": "C.48738927"}, "48738927"),
])
def test_the_instance_id_comes_from_the_container(env: dict[str, str], out: str) -> None:
    from providers.vastai.launch import _INSTANCE_ID_STEP

    script = f"set -euo pipefail\n{_INSTANCE_ID_STEP}\necho \"$INSTANCE_ID\"\n"
    done = subprocess.run(["bash", "-c", script], check=False, env=env, capture_output=True, text=True)
    assert (done.returncode, done.stdout.strip()) == (0, out)
    missing = subprocess.run(["bash", "-c", script], check=False, env={}, capture_output=True, text=True)
    assert missing.returncode == 1 and "no instance id" in missing.stdout


def test_an_instance_outbid_for_long_is_destroyed(fake_vast_factory, make_provider) -> None:
    """Nothing re-bids a stopped instance and it bills its disk: one no job destroyed within
    OUTBID_DESTROY_AFTER_S (its job ended before the preemption was seen) is destroyed."""
    from datetime import timedelta

    from core.models import utcnow
    from providers.vastai.provider import OUTBID_DESTROY_AFTER_S

    fake = fake_vast_factory([ask()])
    now = [utcnow()]
    provider = make_provider(fake, clock=lambda: now[0])
    instance = provider.launch(_request(_offers(provider)))
    fake.outbid(int(instance.id))
    assert provider.describe()[0].terminated_reason == "preempted: outbid"
    now[0] += timedelta(seconds=OUTBID_DESTROY_AFTER_S - 1)
    provider.describe()
    assert int(instance.id) in fake.instances  # not yet
    now[0] += timedelta(seconds=2)
    [gone] = provider.describe()
    assert int(instance.id) not in fake.instances
    assert (gone.state, gone.terminated_reason) == (InstanceState.TERMINATED, "preempted: outbid")


def test_describe_follows_the_instance_pages(fake_vast_factory, make_provider) -> None:
    fake = fake_vast_factory([ask(id=i, machine_id=i) for i in range(1, 31)])
    provider = make_provider(fake)
    offer = _offers(provider)
    for ask_id in range(1, 31):
        provider.client.create_instance(create_arguments(
            offer=offer, ask_id=ask_id, client_token=f"job-{ask_id}-1", tags={TAG_JOB: "j"},
            agent_env={}, cfg=provider.settings.launch, bid=0.3))
    assert len(provider.describe({TAG_JOB: "j"})) == 30
    pages = fake.calls("GET", "/api/v1/instances/")
    assert len(pages) == 2 and "after_token" in pages[1].query
