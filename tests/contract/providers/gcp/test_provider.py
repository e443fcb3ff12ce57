"""The GCP adapter through the real SDKs (google-cloud-compute, google-cloud-billing, REST)
against the local fake: offers and prices with paging, the Authorization header, launch
(body, idempotency by name and requestId, operation errors), describe (labels, preemption),
terminate and checks."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from core.models import TAG_JOB, TAG_OWNER, InstanceState, Market, Offer
from providers.base import LaunchRequest
from providers.errors import (
    AuthError,
    CapacityError,
    ProviderError,
    QuotaError,
    TransientError,
)
from providers.gcp import GcpProvider
from providers.gcp.launch import instance_name
from tests.contract.providers.gcp.data import example
from tests.contract.providers.gcp.fake_gcp import FakeGcp

MakeProvider = Callable[..., GcpProvider]
SECRET = "agent-token-0123456789abcdef"


def _offer(provider: GcpProvider, itype: str = "g2-standard-4",
           market: Market = Market.SPOT, zone: str = "us-central1-a") -> Offer:
    return next(o for o in provider.list_offers()
                if (o.instance_type, o.market, o.zone) == (itype, market, zone))


def _request(offer: Offer, token: str = "job-1-1", owner: str = "ga-test") -> LaunchRequest:
    return LaunchRequest(offer=offer, client_token=token,
                         tags={TAG_OWNER: owner, TAG_JOB: token.rsplit("-", 1)[0]},
                         agent_env={"GA_AGENT_TOKEN": SECRET, "GA_API_URL": "http://10.0.0.2"})


def test_spot_and_on_demand_offers_through_the_sdks(fake: FakeGcp,
                                                    make_provider: MakeProvider) -> None:
    provider = make_provider(fake, regions=["us-central1", "europe-west4"])
    offers = provider.list_offers()
    keys = {(o.zone, o.instance_type, o.market) for o in offers}
    assert ("us-central1-b", "n1-standard-8+nvidia-tesla-t4:1", Market.SPOT) in keys
    assert {o.region for o in offers} == {"us-central1"}  # europe-west4 has no G2 core SKUs
    g2 = _offer(provider)
    assert g2.price_usd_per_hour == pytest.approx(0.29598, rel=1e-4)
    assert g2.on_demand_price_usd_per_hour == pytest.approx(0.70683, rel=1e-4)
    assert (g2.gpu_model, g2.vram_gib, g2.interruption_notice_s) == ("L4", 24.0, 30.0)
    assert provider.requests["skus.list"] == 1 and provider.requests["regions.get"] == 2


def test_paging_follows_next_page_tokens(fake: FakeGcp, make_provider: MakeProvider) -> None:
    whole = {o.key for o in make_provider(fake).list_offers()}
    fake.page_cap = 2
    paged = make_provider(fake)
    assert {o.key for o in paged.list_offers()} == whole
    skus = len(fake.skus)
    assert paged.requests["skus.list"] == (skus + 1) // 2
    assert paged.requests["machineTypes.list"] == 2 * 6  # 12 types per zone, 2 per page


def test_price_poll_reports_each_catalog_fetch_once(fake: FakeGcp,
                                                    make_provider: MakeProvider) -> None:
    now = [datetime(2026, 12, 1, 12, tzinfo=UTC)]
    provider = make_provider(fake, clock=lambda: now[0])
    first = provider.poll_prices()
    assert {p.series for p in first} == {o.key.series() for o in provider.list_offers()}
    assert {p.observed_at for p in first} == {now[0]}
    now[0] += timedelta(minutes=5)
    assert provider.poll_prices(since=now[0] - timedelta(minutes=5)) == []


def test_a_wrong_token_is_an_auth_error_and_a_failed_check(fake: FakeGcp,
                                                           make_provider: MakeProvider,
                                                           caplog) -> None:
    provider = make_provider(fake, token="stolen-token-abc")
    with pytest.raises(AuthError, match="credentials .*refused"):
        provider.list_offers()
    rows = provider.check()
    assert [r.ok for r in rows if r.check != "credentials"] == [False, False]
    assert "AuthError" in rows[1].detail
    assert "stolen-token-abc" not in caplog.text + "".join(r.detail for r in rows)


def test_check_rows_per_region(fake: FakeGcp, make_provider: MakeProvider) -> None:
    rows = make_provider(fake, regions=["us-central1", "europe-west4"]).check()
    assert [(r.region, r.check, r.ok) for r in rows] == [
        ("-", "credentials", True),
        ("us-central1", "regions.get", True), ("us-central1", "machineTypes.list", True),
        ("us-central1", "instances.list", True),
        ("europe-west4", "regions.get", True), ("europe-west4", "machineTypes.list", True),
        ("europe-west4", "instances.list", True), ("-", "billing skus.list", True)]


def test_spot_launch_is_idempotent_by_name(fake: FakeGcp, make_provider: MakeProvider) -> None:
    provider = make_provider(fake, launch={})
    request = _request(_offer(provider))
    instance = provider.launch(request)
    assert instance.id == instance_name("job-1-1") and instance.state is InstanceState.RUNNING
    assert (instance.client_token, instance.tags) == ("job-1-1", request.tags)
    assert instance.offer == request.offer.key
    again = provider.launch(request)
    assert again.id == instance.id and len(fake.inserts) == 1
    body = fake.inserts[0]
    assert body["scheduling"]["provisioningModel"] == "SPOT"
    assert body["scheduling"]["instanceTerminationAction"] == "DELETE"
    assert body["labels"] == {"gpu_arbiter_owner": "ga-test", "gpu_arbiter_job": "job-1"}
    # Another replica (a fresh adapter) asking again finds the VM instead of making one.
    assert make_provider(fake, launch={}).launch(request).id == instance.id
    assert len(fake.inserts) == 1


def test_a_taken_name_is_answered_with_the_existing_vm(fake: FakeGcp,
                                                       make_provider: MakeProvider) -> None:
    provider = make_provider(fake, launch={})
    request = _request(_offer(provider, "n1-standard-8+nvidia-tesla-t4:1"))
    first = provider.launch(request)
    assert fake.inserts[0]["guestAccelerators"][0]["acceleratorCount"] == 1
    fake.hide_from_next_list(first.id)  # the listing lags: the lookup misses the VM
    fake.forget_request_ids()  # past the hour Compute Engine remembers a requestId
    second = make_provider(fake, launch={}).launch(request)
    assert second.id == first.id and fake.requests[("POST", "instances")] == 2
    assert len(fake.inserts) == 1  # the second insert was refused: 409 alreadyExists


def test_a_slow_insert_answers_pending(fake: FakeGcp, make_provider: MakeProvider,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("providers.gcp.provider.OPERATION_WAIT_S", 0.0)
    fake.operation_polls = 1000
    provider = make_provider(fake, launch={})
    instance = provider.launch(_request(_offer(provider)))
    assert instance.state is InstanceState.PENDING and instance.id == instance_name("job-1-1")
    described = provider.describe({TAG_OWNER: "ga-test"})
    assert [(i.id, i.state) for i in described] == [(instance.id, InstanceState.PENDING)]


@pytest.mark.parametrize(("name", "cls"), [
    ("operation_zone_resource_pool_exhausted_assembled.json", CapacityError),
    ("operation_quota_exceeded_assembled.json", QuotaError),
    ("operation_error_resource_not_ready_libcloud.json", TransientError),
])
def test_failed_insert_operations_are_mapped(fake: FakeGcp, make_provider: MakeProvider,
                                             name: str, cls: type) -> None:
    provider = make_provider(fake, launch={})
    fake.fail_next_insert(example(name))
    with pytest.raises(cls):
        provider.launch(_request(_offer(provider)))
    assert fake.instances == {}


def test_a_stockout_answer_is_a_capacity_error_not_retried(fake: FakeGcp,
                                                           make_provider: MakeProvider) -> None:
    provider = make_provider(fake, launch={})
    offer = _offer(provider)
    fake.fail_next("POST", "/instances", 429, example("error_stockout_aip193_docs.json"))
    with pytest.raises(CapacityError, match="RESOURCE_AVAILABILITY"):
        provider.launch(_request(offer))
    assert fake.requests[("POST", "injected")] == 1 and fake.inserts == []


def test_the_fake_refuses_what_compute_engine_refuses(fake: FakeGcp,
                                                      make_provider: MakeProvider) -> None:
    provider = make_provider(fake, launch={})
    body = example("instances_insert_gpu_console_rest_observed.json")
    body["machineType"] = "zones/us-central1-a/machineTypes/n1-standard-8"
    body["scheduling"]["onHostMaintenance"] = "MIGRATE"
    with pytest.raises(ProviderError, match="live migration"):
        provider.client.insert_instance("us-central1-a", body, str(uuid.uuid4()))
    body["scheduling"]["onHostMaintenance"] = "TERMINATE"
    del body["networkInterfaces"]
    with pytest.raises(ProviderError, match="networkInterfaces"):
        provider.client.insert_instance("us-central1-a", body, str(uuid.uuid4()))
    with pytest.raises(ProviderError, match="UUID"):
        provider.client.insert_instance("us-central1-a", body, "r-3")


def test_describe_by_labels_and_preemption_with_stop(fake: FakeGcp,
                                                     make_provider: MakeProvider) -> None:
    provider = make_provider(fake, launch={"termination_action": "STOP"})
    mine = provider.launch(_request(_offer(provider)))
    other = provider.launch(_request(_offer(provider, zone="us-central1-b"), "job-2-1",
                                     owner="someone-else"))
    assert [i.id for i in provider.describe({TAG_OWNER: "ga-test"})] == [mine.id]
    assert {i.id for i in provider.describe()} == {mine.id, other.id}
    fake.set_status("us-central1-a", mine.id, "STOPPING")
    noticed = provider.describe({TAG_OWNER: "ga-test"})[0]
    assert noticed.state is InstanceState.SHUTTING_DOWN and noticed.notice.action == "stop"
    assert noticed.notice.action_at == noticed.notice.received_at + timedelta(seconds=30)
    fake.set_status("us-central1-a", mine.id, "RUNNING")
    fake.preempt("us-central1-a", mine.id)
    gone = provider.describe({TAG_OWNER: "ga-test"})[0]
    assert (gone.state, gone.terminated_reason) == (InstanceState.TERMINATED, "preempted")


def test_a_spot_vm_deleted_by_preemption_is_preempted(fake: FakeGcp,
                                                      make_provider: MakeProvider) -> None:
    provider = make_provider(fake, launch={})
    mine = provider.launch(_request(_offer(provider)))
    provider.launch(_request(_offer(provider), "job-2-1"))
    assert {i.state for i in provider.describe({TAG_OWNER: "ga-test"})} == {InstanceState.RUNNING}
    assert len(provider.describe({TAG_JOB: "job-2"})) == 1  # job-1's VM is not missing there
    fake.preempt("us-central1-a", mine.id)
    gone = provider.describe({TAG_JOB: "job-1"})
    assert [(i.id, i.state, i.terminated_reason) for i in gone] == [
        (mine.id, InstanceState.TERMINATED, "preempted")]
    assert fake.requests[("GET", "operations")] == 1  # asked only when a seen VM went missing


def test_terminate_is_idempotent(fake: FakeGcp, make_provider: MakeProvider) -> None:
    provider = make_provider(fake, launch={})
    instance = provider.launch(_request(_offer(provider, zone="us-central1-b")))
    fresh = make_provider(fake, launch={})  # knows nothing: looks in every zone
    fresh.terminate(instance.id)
    assert fake.instances == {}
    fresh.terminate(instance.id)
    provider.terminate(instance.id)
    provider.terminate("ga-never-existed")
    gone = provider.describe({TAG_OWNER: "ga-test"})
    assert [(i.state, i.terminated_reason) for i in gone] == [
        (InstanceState.TERMINATED, "terminated on request")]


def test_zone_and_pattern_settings_narrow_offers_not_describe(fake: FakeGcp,
                                                             make_provider: MakeProvider) -> None:
    everywhere = make_provider(fake, launch={})
    elsewhere = everywhere.launch(_request(_offer(everywhere, zone="us-central1-b")))
    narrow = make_provider(fake, zones=["us-central1-a"], instance_types=["n1-*"],
                           accelerators=["nvidia-tesla-t4"])
    offers = narrow.list_offers()
    assert {o.zone for o in offers} == {"us-central1-a"}
    assert {o.instance_type for o in offers} == {"n1-standard-8+nvidia-tesla-t4:1",
                                                 "n1-standard-16+nvidia-tesla-t4:2",
                                                 "n1-standard-32+nvidia-tesla-t4:4"}
    assert [i.id for i in narrow.describe({TAG_OWNER: "ga-test"})] == [elsewhere.id]


def test_instance_listings_are_paged(fake: FakeGcp, make_provider: MakeProvider) -> None:
    provider = make_provider(fake, launch={})
    offer = _offer(provider)
    launched = {provider.launch(_request(offer, f"job-{n}-1")).id for n in range(5)}
    fake.page_cap = 2
    fake.requests.clear()
    assert {i.id for i in make_provider(fake).describe({TAG_OWNER: "ga-test"})} == launched
    assert fake.requests[("GET", "instances")] == 3 + 1  # 5 VMs in zone a: 3 pages; b: 1
