"""The REAL node agent on Azure- and GCP-flavoured metadata: a notice from Scheduled Events or
``instance/preempted`` stops the job with its final checkpoint in a real S3 store (SeaweedFS),
and on Azure the Preempt event is approved only once that checkpoint is committed, before the
final report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scheduler.checkpoints import (
    latest_checkpoint_id,
    open_store,
    restore_latest,
)
from tests.fixtures.waiting import wait_until
from tests.integration.agent.fakes import FakeDaemon, job_spec, with_job_bundles
from tests.integration.agent.metadata_fakes import FakeGcpMetadata, FakeScheduledEvents


@pytest.fixture
def store_url(s3_store_url: str) -> str:
    return with_job_bundles(s3_store_url, "job-azure", "job-gcp")


def test_azure_preempt_is_approved_after_the_final_checkpoint_is_committed(
        store_url: str, launch_agent, fake_daemon: FakeDaemon,
        fake_scheduled_events: FakeScheduledEvents, tmp_path: Path) -> None:
    store = open_store(store_url)
    events = fake_scheduled_events
    # What had happened when the approval arrived: the store's newest checkpoint, the reports.
    events.on_approve = lambda: (latest_checkpoint_id(store, "job-azure"), fake_daemon.phases())
    # A slow save: an early approval (before the commit) would show an older checkpoint.
    agent = launch_agent(store_url, "job-azure", 1, job_spec(JOB_TERM_SAVE_S="1"),
                         flavor="azure", metadata_url=events.base_url)
    agent.wait_for_output("step 10\n")
    events.add_event("Preempt", in_s=30, resources=["another-vm"])
    events.add_event("Freeze", in_s=900)
    agent.wait_for_output("step 20\n")
    assert fake_daemon.phases()[-1] == "running"  # neither event is this VM's preemption
    not_before = events.add_event("Preempt", in_s=30)

    assert agent.wait(30) == 0, agent.log()
    final = fake_daemon.last("checkpointed")
    checkpointing = fake_daemon.last("checkpointing")
    assert checkpointing["notice"]["action_at"].startswith(not_before.strftime("%Y-%m-%dT%H:%M:%S"))
    assert len(events.approvals) == 1, events.approvals
    event_id, _, (committed_then, phases_then) = events.approvals[0]
    assert event_id == events.events[-1]["EventId"] and events.events[-1]["EventStatus"] == "Started"
    assert committed_then == final["checkpoint_id"] == latest_checkpoint_id(store, "job-azure")
    assert "checkpointing" in phases_then and "checkpointed" not in phases_then
    saved = [line for line in fake_daemon.log_lines() if line.startswith("SIGTERM at step")]
    assert restore_latest(store, "job-azure", tmp_path / "check") is not None
    step = int(saved[0].split("step ")[1].split(",")[0])
    assert json.loads((tmp_path / "check" / "state.json").read_text()) == {"step": step}


def test_gcp_preempted_stops_the_job_with_its_checkpoint(
        store_url: str, launch_agent, fake_daemon: FakeDaemon,
        fake_gcp_metadata: FakeGcpMetadata) -> None:
    store = open_store(store_url)
    agent = launch_agent(store_url, "job-gcp", 1, job_spec(), flavor="gcp",
                         metadata_url=fake_gcp_metadata.base_url)
    agent.wait_for_output("step 10\n")
    wait_until(lambda: fake_gcp_metadata.reads >= 1, 10, "the agent to read instance/preempted")
    fake_gcp_metadata.preempted = True
    assert agent.wait(30) == 0, agent.log()
    assert fake_daemon.phases()[-2:] == ["checkpointing", "checkpointed"]
    assert fake_daemon.last("checkpointing")["notice"]["action"] == "terminate"
    assert fake_daemon.last("checkpointed")["checkpoint_id"] == latest_checkpoint_id(store, "job-gcp")
