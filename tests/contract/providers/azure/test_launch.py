"""Launch, describe and terminate through azure-mgmt-compute against the fake Resource
Manager: the Spot VM body, idempotency on the client token, long-running operations that
are not waited for, eviction → preempted, terminate of a gone VM."""

from __future__ import annotations

import base64
import time
from collections.abc import Callable

import pytest

from core.models import InstanceState, Market, Offer
from providers.azure import AzureProvider
from providers.azure.launch import max_price, vm_name
from providers.azure.settings import AzureLaunchSettings
from providers.base import LaunchRequest
from providers.errors import CapacityError, ProviderError
from tests.contract.providers.azure.conftest import launch_section
from tests.contract.providers.azure.data import RESOURCE_GROUP, SUBNET, price_of, skus
from tests.contract.providers.azure.fake_azure import FakeAzure

TAGS = {"gpu-arbiter:owner": "owner-1", "gpu-arbiter:job": "job-1", "gpu-arbiter:attempt": "1"}


def _offer(provider: AzureProvider, market: Market, zone: str = "eastus-2") -> Offer:
    return next(o for o in provider.list_offers() if o.market is market and o.zone == zone)


def _request(offer: Offer, token: str = "job-1-1") -> LaunchRequest:
    return LaunchRequest(offer=offer, client_token=token, tags=TAGS,
                         agent_env={"GA_API_URL": "https://10.0.0.5:8740",
                                    "GA_AGENT_TOKEN": "agent-secret-123"})


def _put_body(fake: FakeAzure) -> dict:
    return next(r.body for r in fake.requests if r.method == "PUT")


def test_spot_launch_body(fake_azure: FakeAzure,
                          make_provider: Callable[..., AzureProvider]) -> None:
    provider = make_provider(fake_azure)
    instance = provider.launch(_request(_offer(provider, Market.SPOT)))
    assert instance.state is InstanceState.PENDING and instance.client_token == "job-1-1"
    assert instance.id == vm_name("job-1-1") and instance.offer.zone == "eastus-2"
    body = _put_body(fake_azure)
    props = body["properties"]
    assert (body["location"], body["zones"]) == ("eastus", ["2"])
    assert (props["priority"], props["evictionPolicy"], props["billingProfile"]) == (
        "Spot", "Delete", {"maxPrice": -1.0})
    assert body["tags"] == {**TAGS, "gpu-arbiter:client-token": "job-1-1"}
    assert props["hardwareProfile"] == {"vmSize": "Standard_NC4as_T4_v3"}
    nic = props["networkProfile"]["networkInterfaceConfigurations"][0]
    assert nic["properties"]["deleteOption"] == "Delete"
    assert nic["properties"]["ipConfigurations"][0]["properties"]["subnet"] == {"id": SUBNET}
    assert props["storageProfile"]["osDisk"]["deleteOption"] == "Delete"
    assert props["storageProfile"]["imageReference"] == {
        "publisher": "microsoft-dsvm", "offer": "ubuntu-hpc", "sku": "2204", "version": "latest"}
    script = base64.b64decode(props["osProfile"]["customData"]).decode()
    encoded_env = script.split("<<'GA_AGENT_ENV'\n")[1].split("\nGA_AGENT_ENV")[0]
    env = base64.b64decode(encoded_env.replace("\n", "")).decode()
    assert "GA_METADATA_FLAVOR=azure" in env and "GA_METADATA_URL=http://169.254.169.254" in env
    assert "GA_AGENT_TOKEN=agent-secret-123" in env
    assert "/metadata/instance/compute/name" in script
    assert props["osProfile"]["linuxConfiguration"]["disablePasswordAuthentication"] is True
    # the Resource Manager never returns customData; neither does describe
    assert "customData" not in str(fake_azure.vms[instance.id].view("s", "g", True))


def test_on_demand_launch_has_no_spot_fields(fake_azure: FakeAzure,
                                             make_provider: Callable[..., AzureProvider]) -> None:
    provider = make_provider(fake_azure, launch=launch_section(public_ip=True))
    instance = provider.launch(_request(_offer(provider, Market.ON_DEMAND, "eastus-1")))
    props = _put_body(fake_azure)["properties"]
    assert props["priority"] == "Regular" and "evictionPolicy" not in props
    assert "billingProfile" not in props and instance.offer.market is Market.ON_DEMAND
    ip = props["networkProfile"]["networkInterfaceConfigurations"][0]["properties"][
        "ipConfigurations"][0]["properties"]["publicIPAddressConfiguration"]
    assert ip["properties"]["deleteOption"] == "Delete"


def test_max_price_policy_offer() -> None:
    cfg = AzureLaunchSettings(**launch_section(max_price="offer", max_price_margin=0.5))
    offer = Offer(provider="azure", region="eastus", zone="eastus-1",
                  instance_type="Standard_NC4as_T4_v3", market=Market.SPOT, gpu_model="T4",
                  gpu_count=1, vram_gib=16, vcpus=4, memory_gib=28, price_usd_per_hour=0.204246,
                  on_demand_price_usd_per_hour=0.526, observed_at="2026-12-01T12:00:00Z")
    assert max_price(offer, cfg) == 0.30637  # 0.204246 × 1.5 rounded up to 5 decimals
    capped = AzureLaunchSettings(**launch_section(max_price="offer", max_price_margin=5))
    assert max_price(offer, capped) == 0.526
    assert max_price(offer, AzureLaunchSettings(**launch_section())) == -1


def test_max_price_below_the_spot_price_is_a_capacity_error(
        fake_azure_factory: Callable[..., FakeAzure],
        make_provider: Callable[..., AzureProvider]) -> None:
    spot = price_of("NC4as T4 v3 Spot")
    fake = fake_azure_factory(spot_prices={"Standard_NC4as_T4_v3": spot + 0.1})
    provider = make_provider(fake, launch=launch_section(max_price="offer", max_price_margin=0))
    with pytest.raises(ProviderError) as info:
        provider.launch(_request(_offer(provider, Market.SPOT)))
    assert type(info.value).__name__ == "CapacityError"
    assert info.value.code == "SpotPriceGreaterThanProvidedMaxPrice"


def test_launch_is_idempotent_on_the_client_token(
        fake_azure: FakeAzure, make_provider: Callable[..., AzureProvider]) -> None:
    provider = make_provider(fake_azure)
    offer = _offer(provider, Market.SPOT)
    first = provider.launch(_request(offer))
    again = provider.launch(_request(offer))
    assert again.id == first.id and len(fake_azure.vms) == 1
    assert fake_azure.counts[f"PUT {first.id}"] == 1
    # another adapter (a restarted daemon) finds it by name, and a create racing another
    # one (If-None-Match: * → 412) answers with the VM that won
    other = make_provider(fake_azure)
    assert other.launch(_request(offer)).id == first.id
    fake_azure.fail("GET", "ResourceNotFound", status=404)
    raced = make_provider(fake_azure).launch(_request(offer))
    assert raced.id == first.id and fake_azure.counts[f"PUT {first.id}"] == 2
    assert provider.launch(_request(offer, "job-1-2")).id != first.id


def test_launch_does_not_wait_for_the_operation(
        fake_azure: FakeAzure, make_provider: Callable[..., AzureProvider]) -> None:
    provider = make_provider(fake_azure)
    offer = _offer(provider, Market.SPOT)
    started = time.monotonic()
    instance = provider.launch(_request(offer))  # the operation stays InProgress forever
    assert time.monotonic() - started < 5 and instance.state is InstanceState.PENDING
    assert not any("/operations/" in r.path for r in fake_azure.requests)
    provider.terminate(instance.id)  # a delete is not waited for either
    assert time.monotonic() - started < 5


def test_a_create_answered_succeeded_is_running_once_listed(
        fake_azure_factory: Callable[..., FakeAzure],
        make_provider: Callable[..., AzureProvider]) -> None:
    fake = fake_azure_factory(sync_create=True)
    provider = make_provider(fake)
    instance = provider.launch(_request(_offer(provider, Market.SPOT)))
    assert instance.state is InstanceState.PENDING  # the PUT answer has no power state
    assert [i.state for i in provider.describe()] == [InstanceState.RUNNING]


def test_allocation_failure_after_the_put_shows_in_describe(
        fake_azure: FakeAzure, make_provider: Callable[..., AzureProvider]) -> None:
    provider = make_provider(fake_azure)
    fake_azure.fail_allocation("AllocationFailed")
    instance = provider.launch(_request(_offer(provider, Market.SPOT)))
    fake_azure.finish()
    (seen,) = provider.describe()
    assert seen.id == instance.id and seen.state is InstanceState.TERMINATED
    assert seen.terminated_reason == "no capacity at launch (AllocationFailed)"


def test_eviction_is_a_preemption(fake_azure: FakeAzure,
                                  make_provider: Callable[..., AzureProvider]) -> None:
    provider = make_provider(fake_azure)
    instance = provider.launch(_request(_offer(provider, Market.SPOT)))
    fake_azure.finish()
    assert provider.describe(TAGS)[0].state is InstanceState.RUNNING
    provider.client.compute.virtual_machines.simulate_eviction(RESOURCE_GROUP, instance.id)
    (evicting,) = provider.describe(TAGS)
    assert evicting.state is InstanceState.SHUTTING_DOWN
    assert evicting.terminated_reason == "preempted" and evicting.notice is not None
    fake_azure.finish()  # Azure deleted it (evictionPolicy Delete)
    (gone,) = provider.describe(TAGS)
    assert (gone.state, gone.terminated_reason) == (InstanceState.TERMINATED, "preempted")


def test_a_spot_vm_that_vanished_unseen_was_evicted(
        fake_azure: FakeAzure, make_provider: Callable[..., AzureProvider]) -> None:
    provider = make_provider(fake_azure)
    spot = provider.launch(_request(_offer(provider, Market.SPOT)))
    on_demand = provider.launch(_request(_offer(provider, Market.ON_DEMAND), "job-2-1"))
    fake_azure.finish()
    provider.describe()
    fake_azure.vms.clear()  # both deleted between two listings
    reasons = {i.id: i.terminated_reason for i in provider.describe()}
    assert reasons == {spot.id: "preempted", on_demand.id: "released"}


def test_terminate_is_idempotent_and_not_a_preemption(
        fake_azure_factory: Callable[..., FakeAzure],
        make_provider: Callable[..., AzureProvider]) -> None:
    for missing in (204, 404):
        fake = fake_azure_factory(missing_delete=missing)
        provider = make_provider(fake)
        instance = provider.launch(_request(_offer(provider, Market.SPOT)))
        fake.finish()
        provider.describe()
        provider.terminate(instance.id)
        (deleting,) = provider.describe()
        assert deleting.state is InstanceState.SHUTTING_DOWN and deleting.notice is None
        fake.finish()
        provider.terminate(instance.id)  # gone: 204 or 404, both done
        provider.terminate("ga-never-existed")
        (gone,) = provider.describe()
        assert gone.terminated_reason == "terminated on request"


def test_describe_filters_by_tags_and_location(
        fake_azure_factory: Callable[..., FakeAzure],
        make_provider: Callable[..., AzureProvider]) -> None:
    fake_azure = fake_azure_factory(vm_page_size=1)  # every VM on its own page
    provider = make_provider(fake_azure)
    instance = provider.launch(_request(_offer(provider, Market.SPOT)))
    fake_azure.finish()
    fake_azure.vms["someone-elses-vm"] = fake_azure.vms[instance.id].__class__(
        "someone-elses-vm", {"location": "eastus", "properties": {
            "hardwareProfile": {"vmSize": "Standard_D2_v2"}}}, "2026-12-01T12:00:00+00:00")
    fake_azure.vms["elsewhere"] = fake_azure.vms[instance.id].__class__(
        "elsewhere", {**fake_azure.vms[instance.id].body, "location": "westus"},
        "2026-12-01T12:00:00+00:00")
    assert [i.id for i in provider.describe()] == [instance.id]
    assert provider.describe({"gpu-arbiter:job": "job-9"}) == []
    assert provider.requests["VirtualMachines_List"] == 6  # 3 pages per listing
    two = make_provider(fake_azure, locations=["eastus", "westus"], launch=None)
    assert sorted(i.id for i in two.describe()) == ["elsewhere", instance.id]
    assert two.requests["VirtualMachines_List"] == 3  # one listing serves both locations


def _without(body: dict, path: str) -> dict:
    *parents, leaf = path.split(".")
    node = body
    for key in parents:
        node = node[key]
    node.pop(leaf)
    return body


@pytest.mark.parametrize("path", [
    "location", "properties.hardwareProfile", "properties.osProfile.adminUsername",
    "properties.osProfile.linuxConfiguration", "properties.networkProfile",
    "properties.storageProfile.imageReference", "properties.evictionPolicy"])
def test_the_fake_refuses_a_body_azure_would(path: str, fake_azure: FakeAzure,
                                             make_provider: Callable[..., AzureProvider]) -> None:
    provider = make_provider(fake_azure)
    request = _request(_offer(provider, Market.SPOT))
    params = provider._run_params(request, "eastus")
    with pytest.raises(ProviderError) as info:
        provider.client.create_vm(params["name"], _without(params["body"], path))
    assert info.value.code == "InvalidLaunchRequest" and not fake_azure.vms


def test_the_fake_refuses_spot_fields_on_a_regular_vm(
        fake_azure: FakeAzure, make_provider: Callable[..., AzureProvider]) -> None:
    provider = make_provider(fake_azure)
    params = provider._run_params(_request(_offer(provider, Market.ON_DEMAND)), "eastus")
    params["body"]["properties"]["evictionPolicy"] = "Delete"
    with pytest.raises(ProviderError, match="EvictionPolicyCanBeSetOnlyOnAzureSpot"):
        provider.client.create_vm(params["name"], params["body"])


def test_a_zone_restricted_size_is_offered_and_launched_elsewhere_only(
        fake_azure_factory: Callable[..., FakeAzure],
        make_provider: Callable[..., AzureProvider]) -> None:
    catalog = skus()
    a100 = next(s for s in catalog if s["name"] == "Standard_NC24ads_A100_v4")
    a100["restrictions"][0]["restrictionInfo"]["zones"] = ["2"]
    fake = fake_azure_factory(skus=catalog)
    provider = make_provider(fake)
    zones = {o.zone for o in provider.list_offers()
             if o.instance_type == "Standard_NC24ads_A100_v4"}
    assert zones == {"eastus-1", "eastus-3"}
    offer = _offer(provider, Market.SPOT, "eastus-1")
    restricted = offer.model_copy(update={"zone": "eastus-2",
                                          "instance_type": "Standard_NC24ads_A100_v4"})
    with pytest.raises(CapacityError, match="SkuNotAvailable"):
        provider.launch(_request(restricted))
    assert provider.launch(_request(offer.model_copy(update={
        "instance_type": "Standard_NC24ads_A100_v4"}), "job-2-1")).offer.zone == "eastus-1"
