"""GPU waste alerts through the controller, against a real Redis and a real replay cloud
process: each alert raised once per episode (a job event, a webhook payload in the outbox, the
/metrics counter), and an idle job with ``stop_when_idle`` checkpointed and stopped. Agent
reports (GPU samples, progress points) are written as the API would write them, one a minute
of the controller's clock, which the tests move forward."""

from __future__ import annotations

import json
import logging
import threading
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from prometheus_client import generate_latest

from core.models import Job, JobState, PlacementEnd, StopKind, utcnow
from core.models.agents import AgentAction, AgentPhase, AgentReport
from core.models.work import GpuSample, ProgressPoint
from scheduler.controller.reconcile import reconcile_pass
from scheduler.notify.budget_webhook import WebhookDeliverer
from scheduler.observability.metrics import registry_for
from scheduler.poller.offers import OfferPoller
from scheduler.services.agent_commands import command_for
from scheduler.store import keys
from scheduler.store.budgets import BudgetSettings
from scheduler.store.job_stats import JobStats
from tests.factories.jobs import spec
from tests.integration.controller.conftest import controller_context

MARKET = """
name: waste
time_scale: 60
notice_seconds: 2
offers:
  - {provider: aws, region: r1, zone: r1a, instance_type: big, gpu_model: A100-80GB,
     gpu_count: 1, vram_gib: 80, vcpus: 8, memory_gib: 64, spot_price_usd_per_hour: 1.50}
  - {provider: aws, region: r1, zone: r1b, instance_type: small, gpu_model: RTX4090,
     gpu_count: 1, vram_gib: 24, vcpus: 8, memory_gib: 64, spot_price_usd_per_hour: 0.40}
"""


@pytest.fixture
def ctx(redis_client, replay_market):
    provider = replay_market(MARKET)
    ctx = controller_context(redis_client, provider)
    OfferPoller(ctx.store, provider)()
    ctx.store.spend.publish_settings(BudgetSettings(webhook=True))
    return ctx


def _at(ctx, t0, seconds: float):
    later = t0 + timedelta(seconds=seconds)
    ctx.clock = lambda: later
    return later


def _report(ctx, job, at, phase=AgentPhase.RUNNING, **fields) -> None:
    ctx.store.agents.save_report(AgentReport(job_id=job.id, attempt=job.placement.attempt,
                                             phase=phase, at=at, received_at=at, **fields))


def _gpu(at, util, max_util=None, used=50.0) -> GpuSample:
    return GpuSample(gpus=1, util_pct=util, max_util_pct=util if max_util is None else max_util,
                     memory_used_gib=used, memory_total_gib=80.0, window_s=60.0, readings=60,
                     at=at)


def _running(ctx, t0, **overrides) -> Job:
    """A job on the big offer (it needs 40 GiB per GPU, so the small one is not eligible)."""
    job = Job(id="job-1", spec=spec(resources={"min_vram_gib": 40}, expected_hours=10.0,
                                    reference_gpu="A100-80GB", **overrides),
              created_at=t0, updated_at=t0)
    job.record(JobState.PENDING, "submitted")
    ctx.store.jobs.create(job)
    _at(ctx, t0, 0)
    reconcile_pass(ctx)
    job = ctx.store.jobs.get(job.id)
    _report(ctx, job, t0)
    reconcile_pass(ctx)
    job = ctx.store.jobs.get(job.id)
    assert job.state is JobState.RUNNING and job.placement.offer.instance_type == "big"
    return job


def _waste_events(job):
    return [e.message for e in job.events if e.kind == "waste"]


def _outbox(ctx):
    return [json.loads(x) for x in ctx.store.redis.lrange(keys.BUDGET_OUTBOX, 0, -1)]


def test_low_utilisation_and_oversized_vram_are_each_raised_once_per_episode(ctx):
    t0 = utcnow()
    job = _running(ctx, t0)
    # One sample a minute, each covering its minute: 41 % busy, 10 of 80 GiB used.
    for minute in range(1, 10):
        at = _at(ctx, t0, 60 * minute)
        _report(ctx, job, at, gpu=_gpu(at, 41.0, 70.0, used=10.0))
        reconcile_pass(ctx)
    assert _waste_events(ctx.store.jobs.get(job.id)) == []  # 9 minutes: not yet
    for minute in (10, 11, 12):
        at = _at(ctx, t0, 60 * minute)
        _report(ctx, job, at, gpu=_gpu(at, 41.0, 70.0, used=10.0))
        reconcile_pass(ctx)
    job = ctx.store.jobs.get(job.id)
    events = _waste_events(job)
    assert len(events) == 2, events
    assert events[0] == "GPU utilisation 41 % (under 65 %) for 10 min on A100-80GB"
    # Needs 10 × 1.2 + 1 = 13 GiB: the RTX4090 (24 GiB) fits; 10 reference-hours left cost
    # $0.40 × 10 / 0.7813 (its generic relative) = $5.12 there, $1.50 × 10 = $15.00 here.
    assert events[1] == ("GPU memory used at most 10.0 of 80 GiB (under half) for 10 min on "
                         "A100-80GB; small (RTX4090, 24 GiB) at aws/r1b spot $0.4000/h would "
                         "fit (13.0 GiB needed): $5.12 to finish vs $15.00 here")
    assert job.waste.open == ["low-utilisation", "vram-oversized"]
    sent = _outbox(ctx)
    assert [(a["kind"], a["alert"], a["attempt"]) for a in sent] == [
        ("waste", "low-utilisation", 1), ("waste", "vram-oversized", 1)]
    assert sent[0]["message"] == events[0] and sent[0]["owner"] == "default"
    # Busy again: both episodes end (saved), and nothing is raised.
    at = _at(ctx, t0, 60 * 13)
    _report(ctx, job, at, gpu=_gpu(at, 95.0, used=60.0))
    reconcile_pass(ctx)
    job = ctx.store.jobs.get(job.id)
    assert job.waste.open == [] and len(_waste_events(job)) == 2
    assert JobStats(ctx.store.redis).counters()["waste"] == {"low-utilisation": 1,
                                                             "vram-oversized": 1}
    scraped = generate_latest(registry_for(ctx.store.redis)).decode()
    assert 'ga_waste_alerts_total{alert="low-utilisation"} 1.0' in scraped


def test_idle_gpus_with_stop_when_idle_checkpoint_and_stop_the_job(ctx):
    t0 = utcnow()
    job = _running(ctx, t0, stop_when_idle=True)
    for minute in range(1, 5):
        at = _at(ctx, t0, 60 * minute)
        _report(ctx, job, at, gpu=_gpu(at, 0.0))
        reconcile_pass(ctx)
    assert ctx.store.jobs.get(job.id).stop_request is None  # 240 s idle
    at = _at(ctx, t0, 300)
    _report(ctx, job, at, gpu=_gpu(at, 0.0))
    reconcile_pass(ctx)
    job = ctx.store.jobs.get(job.id)
    assert job.state is JobState.CHECKPOINTING and job.stop_request.kind is StopKind.IDLE
    assert _waste_events(job) == [("GPUs idle (0 % utilisation) for 300 s on A100-80GB "
                                   "(stop_when_idle); agent checkpointing before the job stops")]
    command = command_for(job, job.placement.attempt)
    assert command.action is AgentAction.STOP and command.reason.startswith("idle:")
    assert [a["alert"] for a in _outbox(ctx)] == ["idle"]
    reconcile_pass(ctx)
    assert ctx.store.jobs.get(job.id).version == job.version  # no second request or event
    _report(ctx, job, at, AgentPhase.CHECKPOINTED, checkpoint_id="c1")
    reconcile_pass(ctx)
    job = ctx.store.jobs.get(job.id)
    assert job.state is JobState.STOPPED
    assert job.placements[-1].end_reason is PlacementEnd.STOPPED
    assert job.last_checkpoint_id == "c1" and "checkpoint c1 committed; stopped" in \
        job.events[-1].message


def test_idle_without_stop_when_idle_only_alerts(ctx):
    t0 = utcnow()
    job = _running(ctx, t0)
    for minute in range(1, 7):
        at = _at(ctx, t0, 60 * minute)
        _report(ctx, job, at, gpu=_gpu(at, 0.0))
        reconcile_pass(ctx)
    job = ctx.store.jobs.get(job.id)
    assert job.state is JobState.RUNNING and job.stop_request is None
    assert _waste_events(job) == ["GPUs idle (0 % utilisation) for 300 s on A100-80GB"]


def test_step_time_above_the_jobs_own_baseline_is_raised_once(ctx):
    t0 = utcnow()
    job = _running(ctx, t0)
    first = ProgressPoint(unit="steps", done=0, at=t0)

    def done(t):  # 100 steps/s until 420 s, then 70 steps/s (step time × 1.43)
        return 100.0 * min(t, 420) + 70.0 * max(0, t - 420)

    raised_at = []
    for t in range(30, 931, 30):
        at = _at(ctx, t0, t)
        _report(ctx, job, at, first_progress=first,
                progress=ProgressPoint(unit="steps", done=done(t), at=t0 + timedelta(seconds=t)))
        reconcile_pass(ctx)
        job = ctx.store.jobs.get(job.id)
        if _waste_events(job) and not raised_at:
            raised_at.append(t)
    # Baseline from 30 s (past the warm-up) to the recent window's start needs 300 s: first
    # judged at 630 s, window 330 → 630: 9,000 + 14,700 = 23,700 steps = 79/s vs 100/s.
    assert raised_at == [630]
    assert _waste_events(job) == [("step time 27 % above the job's baseline on A100-80GB: "
                                   "284,400 steps/h over the last 5 min vs 360,000 steps/h")]


@pytest.fixture
def hook():
    """A local webhook receiver answering each POST with the next of ``codes`` (200 after)."""
    got: dict = {"bodies": [], "codes": []}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            code = got["codes"].pop(0) if got["codes"] else 200
            if code == 200:
                got["bodies"].append(body)
            self.send_response(code)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    got["url"] = f"http://127.0.0.1:{server.server_port}/hook"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield got
    server.shutdown()
    server.server_close()


def test_a_waste_alert_reaches_the_webhook_and_a_failed_one_is_named(ctx, hook, caplog):
    t0 = utcnow()
    job = _running(ctx, t0)
    for minute in range(1, 6):
        at = _at(ctx, t0, 60 * minute)
        _report(ctx, job, at, gpu=_gpu(at, 0.0))
        reconcile_pass(ctx)
    hook["codes"] = [500]
    deliver = WebhookDeliverer(ctx.store.budget_outbox, hook["url"], backoff_s=0, attempts=3)
    with caplog.at_level(logging.INFO, logger="scheduler.notify.budget_webhook"):
        assert deliver() == 0
    assert any("job-1/waste/idle/1 failed (try 1)" in r.getMessage() for r in caplog.records)
    assert deliver() == 1
    [body] = hook["bodies"]
    assert (body["kind"], body["alert"], body["job_id"], body["attempt"]) == \
        ("waste", "idle", "job-1", 1)
    assert body["message"] == "GPUs idle (0 % utilisation) for 300 s on A100-80GB"
