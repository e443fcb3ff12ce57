"""Nothing the daemon writes per launched instance stays in Redis: instances are described by
their providers each pass, so a per-instance record (with no expiry) would only pile up."""

from __future__ import annotations

import sys

import pytest

from core.models import Job, JobState, utcnow
from core.models.agents import AgentPhase, AgentReport
from providers.replay import ReplayProvider, shutdown_cloud
from scheduler.controller.reconcile import reconcile_pass
from scheduler.daemon import Daemon, DaemonSettings
from tests.factories.jobs import spec
from tests.integration.controller.conftest import controller_context

MARKET = """
name: records
time_scale: 60
offers:
  - {provider: aws, region: r1, zone: r1b, instance_type: steady, gpu_model: T4, gpu_count: 1,
     vram_gib: 16, vcpus: 4, memory_gib: 16, on_demand_price_usd_per_hour: 0.5,
     spot_price_usd_per_hour: 0.2}
"""
SLEEPER = [sys.executable, "-c", "import time; time.sleep(300)"]


@pytest.fixture
def provider(tmp_path):
    (tmp_path / "market.yaml").write_text(MARKET)
    made = ReplayProvider(tmp_path / "market.yaml", tmp_path / "cloud", SLEEPER)
    yield made
    made.close()
    shutdown_cloud(tmp_path / "cloud")


def _instance_keys(client) -> list[str]:
    return sorted(client.scan_iter(match="ga:instance*", count=1000))


def test_a_job_run_leaves_no_instance_record(redis_client, provider):
    ctx = controller_context(redis_client, provider)
    ctx.store.offers.replace_offers("aws", provider.list_offers())
    now = utcnow()
    job = Job(id="job-1", spec=spec(), created_at=now, updated_at=now)
    job.record(JobState.PENDING, "submitted")
    ctx.store.jobs.create(job)
    reconcile_pass(ctx)
    job = ctx.store.jobs.get(job.id)
    assert job.state is JobState.PROVISIONING and job.placement.instance_id
    report = AgentReport(job_id=job.id, attempt=1, phase=AgentPhase.RUNNING, at=utcnow())
    ctx.store.agents.save_report(report)
    reconcile_pass(ctx)
    assert ctx.store.jobs.get(job.id).state is JobState.RUNNING
    ctx.store.agents.save_report(report.model_copy(update={
        "phase": AgentPhase.SUCCEEDED, "exit_code": 0, "checkpoint_id": "c1", "at": utcnow()}))
    reconcile_pass(ctx)
    assert ctx.store.jobs.get(job.id).state is JobState.SUCCEEDED
    assert _instance_keys(redis_client) == []


def test_a_daemon_start_drops_the_records_older_versions_left(tmp_path, redis_server,
                                                              redis_client):
    redis_client.set("ga:instance:i-old", '{"id": "i-old"}')
    redis_client.sadd("ga:instances", "i-old")
    redis_client.set("ga:instanceless-looking-key", "kept")  # not one of them
    daemon = Daemon(DaemonSettings(home=tmp_path / "home", providers=[],
                                   redis_url=redis_server.url,
                                   store_url=(tmp_path / "ckpt").as_uri()))
    try:
        assert _instance_keys(redis_client) == ["ga:instanceless-looking-key"]
    finally:
        daemon.replicas.leave()
        daemon._lock.close()
