"""Placement, price-driven migration and budgets through the controller, with policy v2,
against a real Redis, a real replay cloud process and (for the webhook) a real local HTTP
server. Agent reports are written as the API would write them; the controller's clock is
moved forward to let market time pass (the replay market runs 60x: 1 wall s = 1 market min)."""

from __future__ import annotations

import json
import threading
import time
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from core.models import Job, JobState, PlacementEnd, StopKind, utcnow
from core.models.agents import AgentAction, AgentPhase, AgentReport
from scheduler.controller.reconcile import reconcile_pass
from scheduler.notify.budget_webhook import DELIVERY_LEASE, WebhookDeliverer
from scheduler.poller.offers import OfferPoller
from scheduler.services.agent_commands import command_for
from scheduler.store import BudgetOutbox, Leases, keys
from scheduler.store.budgets import BudgetSettings
from scheduler.store.leases import LeasedTask
from tests.factories.jobs import spec
from tests.integration.controller.conftest import controller_context

MARKET = """
name: v2test
time_scale: 60
notice_seconds: 2
offers:
  - {provider: aws, region: r1, zone: r1a, instance_type: cheap, gpu_model: T4, gpu_count: 1,
     vram_gib: 16, vcpus: 4, memory_gib: 16, spot_price_usd_per_hour: 0.10}
  - {provider: aws, region: r1, zone: r1b, instance_type: dear, gpu_model: T4, gpu_count: 1,
     vram_gib: 16, vcpus: 4, memory_gib: 16, on_demand_price_usd_per_hour: 1.0,
     spot_price_usd_per_hour: 0.60}
  - {provider: aws, region: r1, zone: r1b, instance_type: small, gpu_model: T4, gpu_count: 1,
     vram_gib: 8, vcpus: 4, memory_gib: 16, spot_price_usd_per_hour: 0.05}
"""


@pytest.fixture
def provider(replay_market):
    return replay_market(MARKET)


@pytest.fixture
def ctx(redis_client, provider):
    ctx = controller_context(redis_client, provider)
    OfferPoller(ctx.store, provider)()
    return ctx


def _submit(ctx, job_id="job-1", **overrides) -> Job:
    now = utcnow()
    job = Job(id=job_id, spec=spec(**{"resources": {"min_vram_gib": 16}, **overrides}),
              created_at=now, updated_at=now)
    job.record(JobState.PENDING, "submitted")
    return ctx.store.jobs.create(job)


def _at(ctx, seconds: float):
    """Move the controller's clock ``seconds`` past the real now."""
    later = utcnow() + timedelta(seconds=seconds)
    ctx.clock = lambda: later
    return later


def _report(ctx, job, phase, at, **fields) -> None:
    ctx.store.agents.save_report(AgentReport(job_id=job.id, attempt=job.placement.attempt,
                                             phase=phase, at=at, received_at=at, **fields))


def _run(ctx, job_id="job-1", **overrides) -> Job:
    job = _submit(ctx, job_id, **overrides)
    reconcile_pass(ctx)
    job = ctx.store.jobs.get(job.id)
    _report(ctx, job, AgentPhase.RUNNING, ctx.clock())
    reconcile_pass(ctx)
    job = ctx.store.jobs.get(job.id)
    assert job.state is JobState.RUNNING
    return job


def test_places_the_cheapest_eligible_spot_and_says_why(ctx):
    job = _submit(ctx, expected_hours=2)
    reconcile_pass(ctx)
    job = ctx.store.jobs.get(job.id)
    assert job.state is JobState.PROVISIONING
    assert job.placement.offer.instance_type == "cheap"  # "small" (8 GiB) is filtered out
    message = job.events[-2].message  # the decision; then the launch
    assert "spot pays" in message and "effective $" in message
    assert "interruption risk" in message and "eligible" in message
    assert job.on_demand_reference_usd_per_hour == 1.0
    assert job.placement.progress_at_start_h == 0.0


def test_nothing_fits_keeps_the_constraint_explanation(ctx):
    job = _submit(ctx, resources={"gpu_count": 8})
    reconcile_pass(ctx)
    job = ctx.store.jobs.get(job.id)
    assert job.state is JobState.PENDING and "gpu_count rejects" in job.waiting_reason


def test_availability_samples_are_recorded_per_poll_and_bounded(ctx, provider):
    series = [o.key.series() for o in ctx.store.offers.all_offers()]
    assert all(r == "1" for r in ctx.store.offers.samples(series))
    OfferPoller(ctx.store, provider)()
    assert all(r == "11" for r in ctx.store.offers.samples(series))
    ctx.store.offers.record_samples(["aws"], [], keep=3)  # a poll listing nothing
    assert all(r == "110" for r in ctx.store.offers.samples(series))
    for _ in range(3):
        ctx.store.offers.record_samples(["aws"], [], keep=3)
    assert ctx.store.offers.samples(series) == [None] * len(series)  # absent a whole window


def _running_on_dear(ctx) -> Job:
    """A job running on the dear offer (the cheap one was briefly unavailable)."""
    cheap = next(o for o in ctx.store.offers.all_offers() if o.instance_type == "cheap")
    ctx.store.offers.mark_unavailable(cheap.key, 3600)
    job = _run(ctx, expected_hours=50)
    assert job.placement.offer.instance_type == "dear"
    ctx.store.redis.delete(keys.UNAVAILABLE_OFFERS)
    return job


def test_price_migration_checkpoints_moves_and_places_on_the_cheaper_offer(ctx):
    job = _running_on_dear(ctx)
    # Too soon after the start (hysteresis: minimum dwell of one market hour): it stays.
    reconcile_pass(ctx)
    assert ctx.store.jobs.get(job.id).stop_request is None
    at = _at(ctx, 120)  # two market hours later, with a checkpoint just committed
    _report(ctx, job, AgentPhase.RUNNING, at, checkpoint_id="c1")
    reconcile_pass(ctx)  # the new checkpoint is recorded (progress saved)
    job = ctx.store.jobs.get(job.id)
    assert job.last_checkpoint_id == "c1" and job.progress_h > 1.5
    reconcile_pass(ctx)  # now the move is decided
    job = ctx.store.jobs.get(job.id)
    assert job.state is JobState.CHECKPOINTING
    assert job.stop_request.kind is StopKind.MOVE and "cheap" in job.stop_request.target
    assert job.events[-1].kind == "migration" and "saving" in job.events[-1].message
    command = command_for(job, job.placement.attempt)
    assert command.action is AgentAction.STOP and command.reason.startswith("move:")
    reconcile_pass(ctx)  # idempotent: no second request, no second event
    assert ctx.store.jobs.get(job.id).version == job.version
    _report(ctx, job, AgentPhase.CHECKPOINTED, at, checkpoint_id="c2",
            message="daemon asked to stop (move: ...)")
    reconcile_pass(ctx)
    job = ctx.store.jobs.get(job.id)
    assert job.state is JobState.MIGRATING and job.stop_request is None
    assert job.placements[-1].end_reason is PlacementEnd.MOVED and job.lost_streak == 0
    reconcile_pass(ctx)
    job = ctx.store.jobs.get(job.id)
    assert job.state is JobState.PROVISIONING and job.placement.offer.instance_type == "cheap"
    assert job.placement.progress_at_start_h == job.progress_h > 1.5
    # The next attempt's agent is not told to stop.
    assert command_for(job, job.placement.attempt).action is AgentAction.CONTINUE


def test_a_preemption_during_a_move_counts_as_a_preemption(ctx):
    from core.models.instances import PreemptionNotice
    job = _running_on_dear(ctx)
    at = _at(ctx, 120)
    _report(ctx, job, AgentPhase.RUNNING, at, checkpoint_id="c1")
    reconcile_pass(ctx)
    reconcile_pass(ctx)
    job = ctx.store.jobs.get(job.id)
    assert job.stop_request is not None
    notice = PreemptionNotice(action_at=at + timedelta(seconds=30))
    _report(ctx, job, AgentPhase.CHECKPOINTED, at, checkpoint_id="c2", notice=notice)
    reconcile_pass(ctx)
    job = ctx.store.jobs.get(job.id)
    assert job.placements[-1].end_reason is PlacementEnd.PREEMPTED
    assert job.state is JobState.MIGRATING


def test_job_budget_alerts_once_each_then_checkpoints_and_stops(ctx, receiver):
    ctx.store.spend.publish_settings(BudgetSettings(webhook=True))
    # dear spot $0.60/h at 60x: $0.01 per wall second. Budget $1: 80 % after 80 s.
    job = _running_on_dear_with(ctx, budget_usd=1.0, owner="alice")
    for seconds, expected in ((85, ["job:80"]), (86, ["job:80"]), (95, ["job:80", "job:90"])):
        at = _at(ctx, seconds)
        _report(ctx, job, AgentPhase.RUNNING, at)
        reconcile_pass(ctx)
        job = ctx.store.jobs.get(job.id)
        assert job.budget_alerts == expected and job.state is JobState.RUNNING
    at = _at(ctx, 105)
    _report(ctx, job, AgentPhase.RUNNING, at)
    reconcile_pass(ctx)
    job = ctx.store.jobs.get(job.id)
    assert job.budget_alerts == ["job:80", "job:90", "job:100"]
    assert job.state is JobState.CHECKPOINTING and job.stop_request.kind is StopKind.BUDGET
    budget_events = [e.message for e in job.events if e.kind == "budget"]
    assert [m.split(":")[0] for m in budget_events[:3]] == [
        "job budget at 80 %", "job budget at 90 %", "job budget at 100 %"]
    assert command_for(job, job.placement.attempt).reason.startswith("budget:")
    reconcile_pass(ctx)
    assert ctx.store.jobs.get(job.id).version == job.version  # nothing new
    _report(ctx, job, AgentPhase.CHECKPOINTED, at, checkpoint_id="c9")
    reconcile_pass(ctx)
    job = ctx.store.jobs.get(job.id)
    assert job.state is JobState.STOPPED and "budget exhausted" in job.events[-1].message
    assert job.placements[-1].end_reason is PlacementEnd.STOPPED
    assert ctx.store.jobs.active_ids() == []
    payloads = [json.loads(x) for x in ctx.store.redis.lrange(keys.BUDGET_OUTBOX, 0, -1)]
    assert [(p["job_id"], p["owner"], p["scope"], p["threshold"]) for p in payloads] == [
        (job.id, "alice", "job", 0.8), (job.id, "alice", "job", 0.9),
        (job.id, "alice", "job", 1.0)]
    assert payloads[0]["budget_usd"] == 1.0 and payloads[0]["spent_usd"] >= 0.8
    # The daemon's delivery job POSTs them to the configured webhook.
    assert WebhookDeliverer(ctx.store.budget_outbox, receiver.url)() == 3
    assert receiver.bodies == payloads


def _running_on_dear_with(ctx, **overrides) -> Job:
    cheap = next(o for o in ctx.store.offers.all_offers() if o.instance_type == "cheap")
    ctx.store.offers.mark_unavailable(cheap.key, 3600)
    return _run(ctx, **overrides)


def test_user_budget_spent_by_other_jobs_stops_a_pending_job(ctx):
    spend = ctx.store.spend
    spend.publish_settings(BudgetSettings(users={"bob": 2.0}))
    spend.record("bob", "earlier-job", 1.9)  # 95 %
    job = _submit(ctx, owner="bob")
    reconcile_pass(ctx)
    job = ctx.store.jobs.get(job.id)
    assert job.budget_alerts == ["user:80", "user:90"] and job.state is JobState.PENDING
    spend.record("bob", "earlier-job", 2.5)
    reconcile_pass(ctx)
    job = ctx.store.jobs.get(job.id)
    assert job.state is JobState.STOPPED and job.budget_alerts[-1] == "user:100"
    assert "user budget at 100 %" in job.events[-1].message
    assert ctx.store.redis.llen(keys.BUDGET_OUTBOX) == 0  # no webhook configured
    # Other owners are not affected.
    other = _submit(ctx, "job-2", owner="carol")
    reconcile_pass(ctx)
    assert ctx.store.jobs.get(other.id).state is JobState.PROVISIONING


class _Receiver:
    """A real local HTTP server recording POSTed JSON; answers ``codes`` in turn, then 200.
    Alerts of a job in ``slow`` are answered after ``slow_s`` (never recorded); of a job in
    ``per_job`` with that status code (e.g. a 307 redirect to a path that would accept it).
    Every answer takes at least ``delay_s``."""

    def __init__(self, codes=()):
        self.bodies: list[dict] = []
        self.codes = list(codes)
        self.slow: set[str] = set()
        self.slow_s = 5.0
        self.per_job: dict[str, int] = {}
        self.delay_s = 0.0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["content-length"]))
                job_id = json.loads(body).get("job_id")
                time.sleep(outer.delay_s)
                if job_id in outer.slow:
                    time.sleep(outer.slow_s)
                    return
                if job_id in outer.per_job:
                    self.send_response(outer.per_job[job_id])
                    self.send_header("location", "/elsewhere")
                    self.end_headers()
                    return
                code = outer.codes.pop(0) if outer.codes else 200
                if code == 200:
                    outer.bodies.append(json.loads(body))
                self.send_response(code)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook?token=secret"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    r = _Receiver()
    yield r
    r.close()


def test_webhook_delivers_each_alert_in_order(redis_client, receiver):
    outbox = BudgetOutbox(redis_client)
    for t in (0.8, 0.9, 1.0):
        outbox.push({"job_id": "j", "owner": "alice", "threshold": t, "spent_usd": t,
                     "budget_usd": 1.0})
    assert WebhookDeliverer(outbox, receiver.url)() == 3
    assert [b["threshold"] for b in receiver.bodies] == [0.8, 0.9, 1.0]
    assert outbox.pending() == 0


def test_webhook_retries_errors_in_later_runs(redis_client, receiver):
    outbox = BudgetOutbox(redis_client)
    outbox.push({"job_id": "j", "threshold": 0.8})
    receiver.codes = [500, 503]  # two failures, then success
    deliver = WebhookDeliverer(outbox, receiver.url, backoff_s=0)
    assert deliver() == 0 and deliver() == 0 and outbox.pending() == 1
    assert deliver() == 1
    assert receiver.bodies == [{"job_id": "j", "threshold": 0.8}]  # the payload, unwrapped
    assert outbox.pending() == 0 and outbox.dead() == []


def test_webhook_backoff_defers_a_failed_alert(redis_client, receiver):
    outbox = BudgetOutbox(redis_client)
    outbox.push({"job_id": "j", "threshold": 0.8})
    receiver.codes = [500]
    deliver = WebhookDeliverer(outbox, receiver.url, backoff_s=3600)
    assert deliver() == 0
    assert deliver() == 0 and receiver.codes == [] and receiver.bodies == []  # not yet retried
    assert outbox.pending() == 1


def test_a_slow_or_redirecting_alert_does_not_hold_up_the_others(redis_client, receiver):
    outbox = BudgetOutbox(redis_client)
    receiver.slow.add("sleepy")
    receiver.per_job["moved"] = 307
    for job_id in ("sleepy", "moved", "a", "b"):
        outbox.push({"job_id": job_id, "owner": job_id, "threshold": 0.8})
    deliver = WebhookDeliverer(outbox, receiver.url, timeout_s=0.3, backoff_s=0)
    assert deliver() == 2
    assert [b["job_id"] for b in receiver.bodies] == ["a", "b"]
    # The two failures wait at the back with their try count; a redirect is not delivery.
    queued = [json.loads(x) for x in redis_client.lrange(keys.BUDGET_OUTBOX, 0, -1)]
    assert [(q["alert"]["job_id"], q["_retry"]["tries"]) for q in queued] == [
        ("sleepy", 1), ("moved", 1)]
    # An alert pushed later is delivered on the next run, though the failures are retried too.
    outbox.push({"job_id": "c", "owner": "c", "threshold": 0.9})
    assert deliver() == 1
    assert [b["job_id"] for b in receiver.bodies] == ["a", "b", "c"]
    assert outbox.pending() == 2


def test_a_run_stops_after_its_time_budget(redis_client, receiver):
    outbox = BudgetOutbox(redis_client)
    receiver.slow.update({"s1", "s2", "s3"})
    for job_id in ("s1", "s2", "s3", "a"):
        outbox.push({"job_id": job_id, "threshold": 0.8})
    deliver = WebhookDeliverer(outbox, receiver.url, timeout_s=0.3, run_s=0.5,
                               backoff_s=0)
    deliver()
    # One POST fits: the second would have less than its timeout left of the run.
    assert outbox.pending() == 4 and receiver.bodies == []
    assert redis_client.llen(keys.BUDGET_INFLIGHT) == 0


def test_a_healthy_receiver_gets_each_alert_once_at_the_end_of_a_run(redis_client, receiver):
    """Every POST gets its full timeout: one that would have less than that left of the run
    waits for the next run rather than failing (and being sent again)."""
    outbox = BudgetOutbox(redis_client)
    receiver.delay_s = 0.6  # a healthy receiver: it answers well within the timeout
    for job_id in ("a", "b", "c"):
        outbox.push({"job_id": job_id, "threshold": 0.8})
    deliver = WebhookDeliverer(outbox, receiver.url, timeout_s=1.0, run_s=1.5, backoff_s=0)
    runs = [deliver() for _ in range(4)]
    assert sum(runs) == 3 and outbox.pending() == 0
    assert sorted(b["job_id"] for b in receiver.bodies) == ["a", "b", "c"]


def test_a_run_shorter_than_one_post_is_refused(redis_client):
    with pytest.raises(ValueError, match="run_s"):
        WebhookDeliverer(BudgetOutbox(redis_client), "http://127.0.0.1:9/hook", timeout_s=2,
                         run_s=1)


def test_webhook_dead_letters_after_its_attempts(redis_client, receiver, caplog):
    outbox = BudgetOutbox(redis_client)
    receiver.per_job["bad"] = 500
    outbox.push({"job_id": "bad", "scope": "job", "threshold": 0.8})
    deliver = WebhookDeliverer(outbox, receiver.url, attempts=3, backoff_s=0)
    with caplog.at_level("WARNING", logger="scheduler.notify.budget_webhook"):
        assert [deliver() for _ in range(4)] == [0, 0, 0, 0]
    assert outbox.pending() == 0
    dead = outbox.dead()
    assert [(d["alert"]["job_id"], d["_retry"]["tries"]) for d in dead] == [("bad", 3)]
    assert any("bad/job/0.8 given up after 3 tries" in r.getMessage() for r in caplog.records)
    outbox.push({"job_id": "good", "threshold": 0.8})
    assert deliver() == 1


def test_webhook_redelivers_alerts_of_a_run_that_died(redis_client, receiver):
    # A run took an alert (in flight) and died before the POST was confirmed.
    redis_client.rpush(keys.BUDGET_INFLIGHT, json.dumps({"job_id": "j", "threshold": 1.0}))
    BudgetOutbox(redis_client).push({"job_id": "k", "threshold": 0.8})
    assert WebhookDeliverer(BudgetOutbox(redis_client), receiver.url)() == 2
    assert [b["job_id"] for b in receiver.bodies] == ["j", "k"]


def test_webhook_unreachable_keeps_the_alert(redis_client):
    outbox = BudgetOutbox(redis_client)
    outbox.push({"job_id": "j", "threshold": 0.8})
    dead = WebhookDeliverer(outbox, "http://127.0.0.1:9/hook", timeout_s=0.5)
    assert dead() == 0
    assert outbox.pending() == 1


def test_a_job_stopped_by_its_budget_before_it_ran_says_so_without_checkpointing(ctx):
    spend = ctx.store.spend
    spend.publish_settings(BudgetSettings(users={"dave": 2.0}))
    job = _submit(ctx, owner="dave")
    spend.record("dave", "earlier-job", 2.5)  # spent after the submit was accepted
    reconcile_pass(ctx)
    job = ctx.store.jobs.get(job.id)
    assert job.state is JobState.STOPPED
    messages = [e.message for e in job.events]
    assert not any("checkpoint" in m for m in messages), messages
    assert "stopping (the job never ran)" in messages[-2]
    assert messages[-1].endswith("stopped before it ever ran")


def test_a_stopped_deliverer_starts_no_post(redis_client, receiver):
    outbox = BudgetOutbox(redis_client)
    outbox.push({"job_id": "j", "threshold": 0.8})
    deliver = WebhookDeliverer(outbox, receiver.url)
    deliver.stop()  # the daemon is shutting down
    assert deliver() == 0 and receiver.bodies == []
    assert BudgetOutbox(redis_client).pending() == 1


def test_one_replica_delivers_at_a_time(redis_client, receiver):
    """The daemon runs the deliverer under the store's leased task: while one replica holds
    the delivery lease another's run is skipped, and takes over once the lease is free."""
    outbox = BudgetOutbox(redis_client)
    outbox.push({"job_id": "j", "threshold": 0.8})
    first, second = Leases(redis_client, "replica-a"), Leases(redis_client, "replica-b")
    assert first.acquire(DELIVERY_LEASE, 60) is not None
    run = LeasedTask(second, DELIVERY_LEASE, 60, WebhookDeliverer(outbox, receiver.url))
    assert run() is None and receiver.bodies == [] and outbox.pending() == 1
    assert first.release(DELIVERY_LEASE)
    assert run() == 1 and [b["job_id"] for b in receiver.bodies] == ["j"]
    assert second.holds(DELIVERY_LEASE)  # kept (and renewed each run) until shutdown
