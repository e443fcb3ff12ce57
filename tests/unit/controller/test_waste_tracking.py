"""The waste step's per-attempt window: reports taken once, GPU samples merged into bins
without hiding a busy reading, progress points kept apart (answers worked out by hand)."""

from datetime import timedelta

from core.models import Job, Placement
from core.models.agents import AgentPhase, AgentReport
from core.models.work import GpuSample, ProgressPoint
from policies import waste
from scheduler.controller.state import ControllerState
from scheduler.controller.waste import BIN_S, track
from tests.factories.jobs import spec
from tests.factories.offers import T0, offer


class _Ctx:
    """What :func:`track` reads of a context: its state and its clock."""

    def __init__(self) -> None:
        self.state = ControllerState()
        self.now = T0

    def clock(self):
        return self.now


def _job(attempt: int = 1) -> Job:
    job = Job(id="j", spec=spec(), created_at=T0, updated_at=T0)
    job.placement = Placement(attempt=attempt, offer=offer(), client_token="t", decided_at=T0,
                              instance_id="i-1")
    return job


def _take(ctx: _Ctx, job: Job, seconds: float, util: float, top: float | None = None,
          used: float = 4.0, done: float | None = None) -> None:
    ctx.now = T0 + timedelta(seconds=seconds)
    gpu = GpuSample(gpus=1, util_pct=util, max_util_pct=util if top is None else top,
                    memory_used_gib=used, memory_total_gib=16.0, window_s=2.0, readings=2,
                    at=ctx.now)
    progress = None if done is None else ProgressPoint(unit="steps", done=done, at=ctx.now)
    track(ctx, job, AgentReport(job_id="j", attempt=job.placement.attempt,
                                phase=AgentPhase.RUNNING, at=ctx.now, gpu=gpu,
                                progress=progress))


def test_samples_merge_into_bins_of_fifteen_seconds():
    ctx, job = _Ctx(), _job()
    for i in range(1, 16):  # 2-s samples ending at 2, 4, ..., 30 s
        _take(ctx, job, 2 * i, util=30.0)
    w = ctx.state.waste["j"].window()
    # bin 1: the sample ending at 2 s (2 s) + 7 more → 16 s at 16 s; bin 2: 18 … 30 s (14 s)
    assert w.end_s.tolist() == [(T0 + timedelta(seconds=s)).timestamp() for s in (16, 30)]
    assert w.window_s.tolist() == [16.0, 14.0] and w.util_pct.tolist() == [30.0, 30.0]
    assert BIN_S == 15.0


def test_a_busy_reading_inside_a_bin_still_breaks_idleness():
    ctx, job = _Ctx(), _job()
    for i in range(1, 200):
        _take(ctx, job, 2 * i, util=0.0, top=7.0 if i == 150 else 0.0)
    # bins of 8 samples (16 s: a bin closes once it spans 15 s): (0, 16], (16, 32], …; the
    # one holding 300 s (sample 150), (288, 304], saw 7 %: idle only from 304 s to 398 s
    idle = waste.idle_s(ctx.state.waste["j"].window())
    assert idle == 398 - 304


def test_the_same_report_is_taken_once_and_a_new_attempt_starts_afresh():
    ctx, job = _Ctx(), _job()
    _take(ctx, job, 2, util=10.0)
    tracker = ctx.state.waste["j"]
    report = AgentReport(job_id="j", attempt=1, phase=AgentPhase.RUNNING, at=ctx.now,
                         gpu=None)
    track(ctx, job, report)  # the same agent time as the last one: ignored
    assert len(tracker.gpu) == 1 and tracker.fresh
    job2 = _job(attempt=2)
    _take(ctx, job2, 4, util=10.0)
    assert ctx.state.waste["j"].attempt == 2 and len(ctx.state.waste["j"].gpu) == 1


def test_progress_points_are_kept_fifteen_seconds_apart_the_latest_last():
    ctx, job = _Ctx(), _job()
    for i in range(1, 21):  # a point every 2 s, 10 steps/s
        _take(ctx, job, 2 * i, util=90.0, done=20.0 * i)
    at_s, done = ctx.state.waste["j"].progress()
    seconds = [round(t - T0.timestamp()) for t in at_s]
    assert seconds == [2, 18, 34, 40] and done.tolist() == [20.0, 180.0, 340.0, 400.0]


def test_a_point_far_ahead_or_in_another_unit_never_pins_the_progress_window():
    ctx, job = _Ctx(), _job()
    _take(ctx, job, 15, util=90.0, done=100)
    # year 8307 in a report received now (stored before the API refused it): not taken
    future = ProgressPoint(unit="steps", done=200, at=T0.replace(year=8307))
    track(ctx, job, AgentReport.model_construct(
        job_id="j", attempt=1, phase=AgentPhase.RUNNING, at=future.at, progress=future,
        gpu=None, received_at=T0 + timedelta(seconds=20)))
    _take(ctx, job, 30, util=90.0, done=300)
    done = ctx.state.waste["j"].progress()[1]
    assert done.tolist() == [100.0, 300.0]
    # another unit: the window starts over in it
    ctx.now = T0 + timedelta(seconds=45)
    track(ctx, job, AgentReport(job_id="j", attempt=1, phase=AgentPhase.RUNNING, at=ctx.now,
                                progress=ProgressPoint(unit="tokens", done=5e6, at=ctx.now)))
    assert ctx.state.waste["j"].progress()[1].tolist() == [5e6]
