"""Azure Scheduled Events and the GCP metadata server's ``instance/preempted``: parsing the
documented shapes (shared/data/api_examples/{azure,gcp}) and reading them from local fakes."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from scheduler.agent.notices import (
    AzureScheduledEvents,
    GcpMetadataNotices,
    make_notice_source,
    parse_azure_scheduled_events,
    parse_gcp_preempted,
    parse_rfc1123,
)
from tests.integration.agent.metadata_fakes import (
    EXAMPLES,
    FakeGcpMetadata,
    FakeScheduledEvents,
    needs_examples,
)


@needs_examples
def test_documented_preempt_event_is_a_notice_for_its_vm_only() -> None:
    body = (EXAMPLES / "azure" / "scheduled_events_preempt_simulated_eviction.json").read_text()
    incarnation, found = parse_azure_scheduled_events(body, "vm-spot")
    assert incarnation == 1 and found is not None
    assert found.event_id == "C1BF8322-4CBF-4FC4-9C45-B40CF3106D0E"
    assert found.notice.action_at == datetime(2022, 8, 9, 17, 7, 32, tzinfo=UTC)
    assert parse_azure_scheduled_events(body, "another-vm") == (1, None)


@needs_examples
def test_documented_freeze_sequence_and_empty_document_are_no_notice() -> None:
    sequence = json.loads((EXAMPLES / "azure" / "scheduled_events_docs_sequence.json").read_text())
    seen = [parse_azure_scheduled_events(json.dumps(doc), "WestNO_0") for doc in sequence]
    assert seen == [(1, None), (2, None), (3, None), (4, None)]
    empty = (EXAMPLES / "azure" / "scheduled_events_empty_docs.json").read_text()
    assert parse_azure_scheduled_events(empty, "vm-spot") == (1, None)


def test_started_preempt_without_not_before_is_due_now() -> None:
    now = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    doc = {"DocumentIncarnation": 5, "Events": [
        {"EventId": "E1", "EventType": "Preempt", "EventStatus": "Started",
         "Resources": ["vm-spot"], "NotBefore": ""}]}
    _, found = parse_azure_scheduled_events(json.dumps(doc), "vm-spot", received_at=now)
    assert found is not None and found.notice.action_at == now


@pytest.mark.parametrize("body", ["", "[]", '{"Events": []}', '{"DocumentIncarnation": 1}',
                                  '{"DocumentIncarnation": 1, "Events": {}}'])
def test_odd_scheduled_events_are_rejected(body: str) -> None:
    with pytest.raises(ValueError):
        parse_azure_scheduled_events(body, "vm")


def test_rfc1123() -> None:
    assert parse_rfc1123("Mon, 11 Apr 2026 22:26:58 GMT") == datetime(2026, 4, 11, 22, 26, 58,
                                                                      tzinfo=UTC)
    with pytest.raises(ValueError):
        parse_rfc1123("2026-04-11T22:26:58Z")


@needs_examples
def test_documented_gcp_preempted_bodies() -> None:
    examples = json.loads((EXAMPLES / "gcp" / "metadata_preempted_examples.json").read_text())
    assert [parse_gcp_preempted(r["response_body"]) for r in examples["requests"]] == \
        [False, True, True]
    assert all(r["headers"] == {"Metadata-Flavor": "Google"} for r in examples["requests"])
    with pytest.raises(ValueError):
        parse_gcp_preempted("yes")


@needs_examples
def test_scheduled_events_notice_and_approval(fake_scheduled_events: FakeScheduledEvents) -> None:
    fake = fake_scheduled_events
    source = make_notice_source("azure", fake.base_url)
    assert isinstance(source, AzureScheduledEvents)
    assert source.poll() is None and source.vm_name == "vm-spot"
    assert source.acknowledge() is False  # nothing seen: nothing to approve
    fake.add_event("Freeze", in_s=900)
    fake.add_event("Preempt", in_s=30, resources=["some-other-vm"])
    assert source.poll() is None and source.incarnation == 3
    not_before = fake.add_event("Preempt", in_s=30)
    notice = source.poll()
    assert notice is not None and notice.action_at == not_before
    assert notice.action_at - datetime.now(UTC) >= timedelta(seconds=28)
    assert source.incarnation == 4 and not fake.approvals

    assert source.acknowledge() is True
    event_id = source.preemption.event_id
    assert [a[0] for a in fake.approvals] == [event_id]
    # Approved: the event is Started, due now; still this VM's notice.
    again = source.poll()
    assert again is not None and source.incarnation == 5
    assert all(method == "GET" or path == "/metadata/scheduledevents"
               for method, path in fake.requests)
    source.close()


def test_scheduled_events_fake_refuses_what_azure_refuses(
        fake_scheduled_events: FakeScheduledEvents) -> None:
    url = fake_scheduled_events.base_url + "/metadata/scheduledevents"
    assert httpx.get(url + "?api-version=2020-07-01").status_code == 400  # no Metadata header
    assert httpx.get(url, headers={"Metadata": "true"}).status_code == 400  # no api-version
    bad = httpx.post(url + "?api-version=2020-07-01", headers={"Metadata": "true"},
                     json={"StartRequests": [{"EventId": "unknown"}]})
    assert bad.status_code == 400


def test_unreachable_scheduled_events_mean_no_notice(
        fake_scheduled_events: FakeScheduledEvents) -> None:
    fake_scheduled_events.stop()
    source = AzureScheduledEvents(fake_scheduled_events.base_url, vm_name="vm-spot")
    assert [source.poll() for _ in range(2)] == [None, None]
    assert source.acknowledge() is False


def test_gcp_preempted_flip_starts_a_30_s_notice(fake_gcp_metadata: FakeGcpMetadata) -> None:
    source = make_notice_source("gcp", fake_gcp_metadata.base_url)
    assert isinstance(source, GcpMetadataNotices)
    assert source.poll() is None and fake_gcp_metadata.reads == 1  # the header was accepted
    fake_gcp_metadata.preempted = True
    before = datetime.now(UTC)
    notice = source.poll()
    assert notice is not None
    assert before + timedelta(seconds=29) <= notice.action_at <= \
        datetime.now(UTC) + timedelta(seconds=30)
    assert source.poll() == notice  # kept, not re-dated
    assert source.acknowledge() is False  # GCP has nothing to approve
    source.close()
