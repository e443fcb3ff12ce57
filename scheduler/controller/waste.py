"""Step for a running job: is it wasting the GPUs it pays for (:mod:`policies.waste`)?

Source: the agents' reports. Each report's GPU sample (NVML use since the agent's previous
report) and progress point is taken once (:func:`track`, from the observing step, every pass)
into a bounded window per running attempt, kept in this process
(:attr:`~scheduler.controller.state.ControllerState.waste`): losing it (a restart, another
replica taking the job) only restarts the conditions' timers. Samples are timed by the
controller's clock when it first sees them (the instance's clock is not trusted for
durations the daemon acts on); progress rates use the job's own point times.

:func:`check_waste` (also from the observing step, for a job running on) then raises, once
per episode of each condition (an episode ends when its
condition stops holding, or with the attempt): a job event of kind ``waste``, a webhook alert
(the budget webhook's outbox, when a webhook is configured; payload below), and the
``ga_waste_alerts_total{alert}`` counter (``Job.waste.raised``, counted with the job write).
A job whose spec has ``stop_when_idle`` is checkpointed and stopped (state ``stopped``) when
its GPUs were idle for :data:`~policies.waste.IDLE_S`, through the path a budget stop takes.

The thresholds (10 min under 65 %, 300 s idle, the 5 min recent window) are **wall
seconds**: they describe a GPU's behaviour, so a replayed market (``time_scale`` > 1) does not
scale them.

Webhook payload (``application/json``), de-duplicate on ``(job_id, alert, attempt)``::

    {"kind": "waste", "alert": "low-utilisation", "job_id": "...", "owner": "alice",
     "attempt": 2, "offer": "aws/us-east-1/us-east-1a/g5.xlarge/spot",
     "at": "2026-12-01T19:00:00+00:00", "message": "GPU utilisation 41 % ..."}
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from datetime import timedelta

import numpy as np

from core.models import Job, JobEvent, JobState, Offer, StopKind, StopRequest
from core.models.agents import AgentReport
from core.models.jobs import MAX_POINT_AHEAD_S, WasteAlerts
from policies import waste
from policies.eligibility import eligible_matrix
from policies.views import NO_OFFER
from scheduler.controller.context import Context
from scheduler.controller.explain import gpu_name
from scheduler.controller.policy_inputs import (
    MarketSnapshot,
    compute_hours,
    job_speeds,
    snapshot,
)

# Bounds of one attempt's window: samples older than this (wall s) are dropped, and at most
# this many are kept. Consecutive samples are merged into bins of at least BIN_S (an agent
# reports every ~2 s): a bin's utilisation is their time-weighted mean, its highest reading
# and memory used their maxima, so idle and memory are judged as strictly as per sample;
# progress points are kept BIN_S apart. A window is then ~60 entries instead of ~450
# (judging one took ~350 us, now ~60 us).
WINDOW_S = 900.0
WINDOW_MAX = 1024
BIN_S = 15.0
# Running attempts tracked at most; past it the memory starts afresh.
TRACKED_MAX = 100_000


@dataclass
class Tracker:
    """One attempt's recent GPU samples and progress points (see the module docstring)."""

    attempt: int
    last_at: float = -math.inf  # when the latest report taken was received (epoch s)
    fresh: bool = False  # a report was taken since the conditions were last judged
    gpu: deque = field(default_factory=lambda: deque(maxlen=WINDOW_MAX))
    points: deque = field(default_factory=lambda: deque(maxlen=WINDOW_MAX))
    unit: str | None = None  # the unit the points count

    def window(self) -> waste.GpuWindow:
        cols = np.array(self.gpu, dtype=float).reshape(-1, 6).T
        return waste.GpuWindow(*cols)

    def progress(self) -> tuple[np.ndarray, np.ndarray]:
        cols = np.array(self.points, dtype=float).reshape(-1, 2).T
        return cols[0], cols[1]


def track(ctx: Context, job: Job, report: AgentReport | None) -> None:
    """Take ``report``'s GPU sample and progress point into the current attempt's window,
    once per report (in this process's memory only)."""
    placement = job.placement
    if report is None or placement is None or report.attempt != placement.attempt:
        return
    trackers = ctx.state.waste
    tracker = trackers.get(job.id)
    if tracker is None or tracker.attempt != placement.attempt:
        if len(trackers) >= TRACKED_MAX:
            trackers.clear()
        tracker = trackers[job.id] = Tracker(placement.attempt)
    # the daemon's receipt time: an agent's wrong clock must not pin the window
    at = (report.received_at or report.at).timestamp()
    if at <= tracker.last_at:
        return  # the same report as the last pass's (or an older one)
    tracker.last_at = at
    tracker.fresh = True
    now = ctx.clock().timestamp()
    if report.gpu is not None:
        _add_sample(tracker.gpu, now, report.gpu)
        while tracker.gpu and tracker.gpu[0][0] < now - WINDOW_S:
            tracker.gpu.popleft()
    if _usable_point(job, report):
        p = report.progress
        t = p.at.timestamp()
        if p.unit.value != tracker.unit:
            tracker.points.clear()  # another unit: the old points do not compare
            tracker.unit = p.unit.value
        if tracker.points and (t <= tracker.points[-1][0] or p.done < tracker.points[-1][1]):
            if p.done < tracker.points[-1][1]:
                tracker.points.clear()  # counting from lower again: a new baseline
            else:
                return
        points = tracker.points
        if len(points) >= 2 and points[-1][0] - points[-2][0] < BIN_S:
            points[-1] = (t, p.done)  # points kept BIN_S apart, the latest always last
        else:
            points.append((t, p.done))
        while tracker.points and tracker.points[0][0] < t - WINDOW_S:
            tracker.points.popleft()


def _usable_point(job: Job, report: AgentReport) -> bool:
    """Whether ``report``'s progress point is one the learning takes too
    (:mod:`scheduler.controller.learning`): in the spec's work unit, and not far ahead of
    the report's receipt (a wrong clock must not pin the window's latest point)."""
    p = report.progress
    if p is None:
        return False
    work = job.spec.work
    received = report.received_at or report.at
    return (work is None or p.unit is work.unit) and \
        p.at <= received + timedelta(seconds=MAX_POINT_AHEAD_S)


def _add_sample(bins: deque, now: float, g) -> None:
    """Append GPU sample ``g`` (seen at ``now``) to ``bins``, merged into the latest bin
    while that bin spans less than :data:`BIN_S` and ``g`` follows it without a gap."""
    if bins:
        end, window, util, top, used, _ = bins[-1]
        if window < BIN_S and now - g.window_s - end <= waste.MAX_GAP_S and now > end:
            span = window + (now - end)
            merged_util = (util * window + g.util_pct * (now - end)) / span
            bins[-1] = (now, span, merged_util, max(top, g.max_util_pct),
                        max(used, g.memory_used_gib), g.memory_total_gib)
            return
    bins.append((now, float(g.window_s), g.util_pct, g.max_util_pct, g.memory_used_gib,
                 g.memory_total_gib))


@dataclass(frozen=True)
class Finding:
    """A condition holding now: its alert name and the event's message."""

    alert: str
    message: str


def _baseline_per_s(job: Job, start_s: float, start_done: float) -> float:
    """The job's own rate on this kind of offer (units per wall second of its clock): the
    evidence of earlier attempts on it, plus this attempt's from its measurement start to
    ``start_s`` (the recent window's start) when that spans at least the recent window;
    ``nan`` with less than :data:`~policies.waste.RECENT_S` of evidence."""
    placement = job.placement
    assert placement is not None
    progress = job.progress
    units, seconds = 0.0, 0.0
    for r in progress.closed:
        if r.same_offer_kind(placement.offer.gpu_model, placement.offer.gpu_count):
            # evidence hours are market hours: wall s = hours × 3600 / time_scale
            units += r.units
            seconds += r.hours * 3600.0 / placement.time_scale
    start = progress.start if progress.attempt == placement.attempt else None
    if start is not None and start_s - start.at.timestamp() >= waste.RECENT_S:
        units += start_done - start.done
        seconds += start_s - start.at.timestamp()
    return units / seconds if seconds >= waste.RECENT_S else math.nan


def _slow(job: Job, tracker: Tracker, already: bool) -> Finding | None:
    at_s, done = tracker.progress()
    recent, start_s = waste.recent_rate(at_s, done)
    if not math.isfinite(start_s):
        return None
    start_done = float(done[np.searchsorted(at_s, start_s)])
    baseline = _baseline_per_s(job, start_s, start_done)
    ratio = waste.step_time_ratio(recent, baseline)
    limit = waste.SLOW_CLEAR_FACTOR if already else waste.SLOW_FACTOR
    if not ratio > limit:
        return None
    unit = job.progress.latest.unit.value if job.progress.latest else "units"
    slower = "no progress" if math.isinf(ratio) else f"{(ratio - 1) * 100:.0f} % above"
    return Finding("slow-steps", f"step time {slower} the job's baseline on "
                                 f"{gpu_name(job.placement.offer)}: {recent * 3600:,.0f} "
                                 f"{unit}/h over the last {waste.RECENT_S / 60:.0f} min vs "
                                 f"{baseline * 3600:,.0f} {unit}/h")


def _hint(job: Job, snap: MarketSnapshot, need_gib: float) -> str:
    """The right-sizing hint: the offer with enough memory (``need_gib`` over its GPUs) and
    the lowest cost to finish, if cheaper than the current one; ``""`` when none is."""
    placement = job.placement
    assert placement is not None
    if not snap.offers:
        return ""
    resources = job.spec.resources.model_copy(update={"min_vram_gib": 0})
    spec = job.spec.model_copy(update={"resources": resources})
    eligible = eligible_matrix([spec], snap.table, snap.prices, snap.unavailable)[0]
    speeds = job_speeds(job, snap.table)
    speed = speeds.speed if speeds is not None else np.ones(len(snap.offers))
    _, remaining_h = compute_hours(job, speeds)
    hours = remaining_h / speed if math.isfinite(remaining_h) else 1.0 / speed
    cost = snap.prices * hours
    vram = snap.table.vram_gib * np.maximum(snap.table.gpu_count, 1)
    current = next((i for i, o in enumerate(snap.offers)
                    if o.key.series() == placement.offer.key.series()), NO_OFFER)
    best = waste.right_size(need_gib, vram, cost, eligible, current)
    if best == NO_OFFER:
        return ""
    offer: Offer = snap.offers[best]
    what = "to finish" if math.isfinite(remaining_h) else "per reference-hour of work"
    here = f" vs ${cost[current]:,.2f} here" if current != NO_OFFER else ""
    return (f"; {offer.instance_type} ({gpu_name(offer)}, {vram[best]:.0f} GiB) at "
            f"{offer.provider}/{offer.zone} {offer.market.value} "
            f"${offer.price_usd_per_hour:.4f}/h would fit ({need_gib:.1f} GiB needed): "
            f"${cost[best]:,.2f} {what}{here}")


def findings(ctx: Context, job: Job, tracker: Tracker, open_alerts: list[str]) -> list[Finding]:
    """The conditions holding now for ``job``'s current attempt (``open_alerts``: the ones
    already raised in their episode, for the slow-steps hysteresis)."""
    out: list[Finding] = []
    gpu = gpu_name(job.placement.offer)
    if tracker.gpu:
        w = tracker.window()
        held, first = waste.held_s(w.end_s, w.window_s, w.util_pct < waste.LOW_UTIL_PCT)
        if held >= waste.LOW_UTIL_S:
            mean = float(np.average(w.util_pct[first:], weights=np.maximum(
                w.window_s[first:], 1e-9)))
            out.append(Finding("low-utilisation",
                               f"GPU utilisation {mean:.0f} % (under "
                               f"{waste.LOW_UTIL_PCT:.0f} %) for {held / 60:.0f} min on {gpu}"))
        idle = waste.idle_s(w)
        if idle >= waste.IDLE_S:
            out.append(Finding("idle", f"GPUs idle (0 % utilisation) for {idle:.0f} s on "
                                       f"{gpu}"))
        held, used, total = waste.vram_underused(w)
        if held >= waste.LOW_UTIL_S:
            need = waste.vram_needed_gib(used)
            out.append(Finding("vram-oversized",
                               f"GPU memory used at most {used:.1f} of {total:.0f} GiB "
                               f"(under half) for {held / 60:.0f} min on {gpu}"
                               f"{_hint(job, snapshot(ctx), need)}"))
    slow = _slow(job, tracker, "slow-steps" in open_alerts)
    if slow is not None:
        out.append(slow)
    return out


def _payload(job: Job, finding: Finding, ctx: Context) -> dict:
    placement = job.placement
    assert placement is not None
    return {"kind": "waste", "alert": finding.alert, "job_id": job.id,
            "owner": job.spec.owner, "attempt": placement.attempt,
            "offer": placement.offer.key.series(), "at": ctx.clock().isoformat(),
            "message": finding.message}


def check_waste(ctx: Context, job: Job) -> bool:
    """Raise the waste alerts due for ``job`` (and ask an idle job that wants it to stop),
    in place; whether the job changed and must be saved (the webhook alerts are queued
    already: at least once)."""
    placement = job.placement
    if job.state is not JobState.RUNNING or placement is None or placement.instance_id is None:
        return False
    tracker = ctx.state.waste.get(job.id)
    # Conditions change only with new samples: judged once per report, not once per pass.
    if tracker is None or tracker.attempt != placement.attempt or not tracker.fresh:
        return False
    tracker.fresh = False
    alerts = job.waste
    stale = False
    if alerts.attempt != placement.attempt:  # episodes end with their attempt
        stale = bool(alerts.open)
        alerts = job.waste = WasteAlerts(attempt=placement.attempt, raised=dict(alerts.raised))
    found = findings(ctx, job, tracker, alerts.open)
    holding = {f.alert for f in found}
    ended = [a for a in alerts.open if a not in holding]
    if ended:
        alerts.open = [a for a in alerts.open if a in holding]
    new = [f for f in found if f.alert not in alerts.open]
    if new and snapshot(ctx).budgets.webhook:
        for finding in new:  # queued before the job is saved: at least once
            ctx.store.budget_outbox.push(_payload(job, finding, ctx))
    idle_stop = None
    for finding in new:
        alerts.open.append(finding.alert)
        alerts.raised[finding.alert] = alerts.raised.get(finding.alert, 0) + 1
        if finding.alert == "idle" and job.spec.stop_when_idle and not job.cancel_requested \
                and job.stop_request is None:
            idle_stop = finding
            continue
        job.events.append(JobEvent(at=ctx.clock(), state=job.state, message=finding.message,
                                   offer=placement.offer.key.series(), kind="waste"))
    if idle_stop is not None:
        why = f"{idle_stop.message} (stop_when_idle)"
        job.stop_request = StopRequest(kind=StopKind.IDLE, reason=why[:500],
                                       attempt=placement.attempt)
        job.record(JobState.CHECKPOINTING, f"{why}; agent checkpointing before the job stops",
                   offer=placement.offer, at=ctx.clock(), kind="waste")
    return bool(new or ended or stale)
