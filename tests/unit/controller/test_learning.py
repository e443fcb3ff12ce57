"""Learning a job's throughput from progress points, and the policy's compute hours from it
(answers worked out by hand in each test)."""

from datetime import timedelta

import numpy as np
import pytest

from core.models import Job, Placement
from core.models.agents import AgentPhase, AgentReport
from core.models.jobs import MAX_MEASURED_RATES, JobProgress, MeasuredRate
from core.models.work import ProgressPoint
from policies.throughput import Measurement, RateEstimates
from policies.views import OfferTable
from scheduler.controller.learning import PROGRESS_RECORD_S, learn, measurements
from scheduler.controller.policy_inputs import (
    JobSpeeds,
    compute_hours,
    job_speeds,
    remaining_units,
    speed_model_on,
    work_model,
)
from tests.factories.jobs import spec
from tests.factories.offers import T0, offer


def _point(seconds: float, done: float, total: float | None = None) -> ProgressPoint:
    return ProgressPoint(unit="samples", done=done, total=total,
                         at=T0 + timedelta(seconds=seconds))


def _job(attempt: int = 1, time_scale: float = 1.0, gpu_model: str = "T4", gpu_count: int = 1,
         **spec_fields) -> Job:
    job = Job(id="j", spec=spec(**spec_fields), created_at=T0, updated_at=T0)
    job.placement = Placement(attempt=attempt, offer=offer(gpu_model=gpu_model,
                                                           gpu_count=gpu_count),
                              client_token=f"t-{attempt}", decided_at=T0,
                              time_scale=time_scale, instance_id="i-1")
    return job


def _report(job: Job, first: ProgressPoint | None, latest: ProgressPoint) -> AgentReport:
    return AgentReport(job_id=job.id, attempt=job.placement.attempt, phase=AgentPhase.RUNNING,
                       at=latest.at, first_progress=first, progress=latest)


def test_the_first_interval_is_warm_up_and_rates_are_per_market_hour():
    p = JobProgress()
    first = _point(0, 0)
    assert p.observe(1, "T4", 1, 60.0, first, first) and p.start is None  # only the first
    assert p.observe(1, "T4", 1, 60.0, first, _point(10, 500)) and p.start.done == 500
    assert not p.observe(1, "T4", 1, 60.0, first, _point(70, 1100))
    # 600 samples in 60 wall s at 60 market s per wall s: 1 market hour
    assert p.live() == MeasuredRate(gpu_model="T4", gpu_count=1, units=600, hours=1.0)


def test_attempts_on_the_same_offer_kind_add_up_by_evidence():
    p = JobProgress()
    p.observe(1, "T4", 1, 1.0, None, _point(0, 0))
    p.observe(1, "T4", 1, 1.0, None, _point(3600, 360))       # 360 per hour, 1 h
    p.observe(2, "t4", 1, 1.0, None, _point(4000, 300))       # restored from older work
    p.observe(2, "t4", 1, 1.0, None, _point(4000 + 7200, 1380))  # 1080 in 2 h
    rate = p.rate("T4", 1)
    # (360 + 1080) / (1 + 2) = 480 per hour: the evidence-weighted mean of 360 and 540
    assert (rate.units, rate.hours) == (1440, 3.0)
    assert p.rate("T4", 2) is None


def test_an_older_report_changes_nothing():
    p = JobProgress()
    p.observe(1, "T4", 1, 1.0, None, _point(0, 0))
    p.observe(1, "T4", 1, 1.0, None, _point(100, 50))
    assert not p.observe(1, "T4", 1, 1.0, None, _point(50, 20))
    assert p.latest.done == 50


def test_a_count_lower_than_the_start_restarts_the_measurement():
    p = JobProgress()
    p.observe(1, "T4", 1, 1.0, None, _point(0, 1000))
    assert p.observe(1, "T4", 1, 1.0, None, _point(60, 10))
    assert p.start.done == 10 and p.live() is None


def test_evidence_is_kept_for_at_most_eight_offer_kinds_dropping_the_thinnest():
    p = JobProgress()
    for n in range(MAX_MEASURED_RATES + 1):
        p.observe(2 * n + 1, "A10G", n + 1, 1.0, None, _point(10_000 * n, 0))
        p.observe(2 * n + 1, "A10G", n + 1, 1.0, None, _point(10_000 * n + 60 * (n + 1), 10))
    p.observe(99, "T4", 1, 1.0, None, _point(200_000, 0))  # closes the ninth
    counts = sorted(r.gpu_count for r in p.closed)
    assert len(p.closed) == MAX_MEASURED_RATES and counts == list(range(2, 10))  # 1 GPU: 60 s


def test_learn_saves_a_new_start_at_once_and_the_latest_point_every_30_seconds():
    job = _job()
    first = _point(0, 0)
    assert learn(job, _report(job, first, first))          # first point of the attempt
    assert learn(job, _report(job, first, _point(5, 50)))  # the start
    job.progress.latest = _point(5, 50)
    assert not learn(job, _report(job, first, _point(5 + PROGRESS_RECORD_S - 1, 300)))
    job.progress.latest = _point(5, 50)  # (the store still holds the recorded one)
    assert learn(job, _report(job, first, _point(5 + PROGRESS_RECORD_S, 310)))
    other = AgentReport(job_id="j", attempt=7, phase=AgentPhase.RUNNING,
                        at=T0 + timedelta(seconds=9000), progress=_point(900, 9000))
    assert not learn(job, other) and job.progress.latest.done == 310
    assert not learn(job, AgentReport(job_id="j", attempt=1, phase=AgentPhase.RUNNING, at=T0))


def test_measurements_are_units_per_market_hour():
    job = _job(time_scale=60.0)
    job.progress.observe(1, "T4", 1, 60.0, None, _point(0, 0))
    job.progress.observe(1, "T4", 1, 60.0, None, _point(120, 2400))
    assert measurements(job) == [Measurement("T4", 1, units_per_h=1200.0, hours=2.0)]
    assert speed_model_on(job) and not speed_model_on(_job())


def test_a_measured_job_that_declared_nothing_is_declared_at_its_per_gpu_rate():
    # 1,900 units/h on 2 GPUs at efficiency 0.9: 1.9 GPUs' worth, 1,000 per GPU
    model = work_model(_job(), [Measurement("A10G", 2, 1900.0, 1.0)])
    assert dict(model.declared) == {"a10g": pytest.approx(1000.0)}
    declared = _job(work={"throughput": {"T4": 1}})
    assert dict(work_model(declared, [Measurement("A10G", 2, 1900.0, 1.0)]).declared) == \
        {"t4": 3600.0}


def _speeds(ref_rate: float, unit: str | None = "samples") -> JobSpeeds:
    rates = RateEstimates(np.array([ref_rate]), ("measured",), np.array([0.1]))
    return JobSpeeds(speed=np.ones(1), rates=rates, ref_rate=ref_rate, unit=unit)


def test_compute_hours_in_reference_hours_from_units():
    job = _job(work={"total": 1000})
    job.progress.observe(1, "T4", 1, 1.0, None, _point(0, 400))
    assert remaining_units(job) == 600
    # 1,000 units ÷ 100 per reference-hour; 600 left
    assert compute_hours(job, _speeds(100.0)) == (10.0, 6.0)


def test_compute_hours_before_any_report_subtract_the_saved_reference_hours():
    job = _job(work={"total": 1000})
    job.progress_h = 2.5
    assert compute_hours(job, _speeds(100.0)) == (10.0, 7.5)


def test_compute_hours_fall_back_to_expected_hours_without_units():
    job = _job(expected_hours=8.0, reference_gpu="V100")
    job.progress_h = 3.0
    assert compute_hours(job, _speeds(1.0, unit=None)) == (8.0, 5.0)
    assert compute_hours(job, None) == (8.0, 5.0)
    hours = compute_hours(_job(), None)
    assert np.isnan(hours).all()


def test_the_reported_total_counts_when_the_spec_has_none():
    job = _job()
    job.progress.observe(1, "T4", 1, 1.0, None, _point(0, 100, total=500))
    assert remaining_units(job) == 400


def test_a_rate_measured_on_one_gpu_model_sets_the_others_in_the_jobs_units():
    # 600 samples per market hour on an A10G; the table's transformer relatives (T4 0.1506,
    # A10G 0.3429) put a T4 at 600 × 0.1506 / 0.3429 = 263.5 samples per hour
    job = _job(gpu_model="A10G", work={"workload": "transformer"})
    job.progress.observe(1, "A10G", 1, 1.0, None, _point(0, 0))
    job.progress.observe(1, "A10G", 1, 1.0, None, _point(3600, 600))
    offers = [offer(gpu_model="T4"), offer(gpu_model="A10G")]
    speeds = job_speeds(job, OfferTable.from_offers(offers))
    assert speeds.unit == "samples" and speeds.rates.source == ("prior", "measured")
    assert speeds.rates.units_per_h == pytest.approx([600 * 0.1506 / 0.3429, 600])
    assert speeds.ref_rate == pytest.approx(600 / 0.3429)


def test_a_stall_is_no_rate_yet_and_the_window_waits_for_progress():
    job = _job()
    first = _point(0, 0)
    for seconds, done in ((0, 0), (30, 500), (60, 500)):  # evaluation: no samples 30 s → 60 s
        learn(job, _report(job, first, _point(seconds, done)))
    assert job.progress.live() is None and measurements(job) == []
    assert job_speeds(job, OfferTable.from_offers([offer()])) is None  # no ValueError
    learn(job, _report(job, first, _point(90, 800)))
    # 300 samples in the 60 s since the start (the stall counts): 18,000 per hour
    assert measurements(job) == [Measurement("T4", 1, units_per_h=18_000.0, hours=60 / 3600)]
    # a new attempt after a stall closes no zero evidence
    stalled = _job()
    for seconds, done in ((0, 0), (30, 500), (60, 500)):
        learn(stalled, _report(stalled, first, _point(seconds, done)))
    stalled.progress.observe(2, "T4", 1, 1.0, None, _point(100, 500))
    assert stalled.progress.closed == []


def test_stored_evidence_that_is_no_rate_is_dropped_when_read():
    job = _job()
    job.progress.closed = [MeasuredRate(gpu_model="T4", gpu_count=1, units=360, hours=1.0)]
    data = job.model_dump(mode="json")
    data["progress"]["closed"] += [
        {"gpu_model": "V100", "gpu_count": 1, "units": 0.0, "hours": 0.5},        # a stall
        {"gpu_model": "A10G", "gpu_count": 1, "units": 1000.0, "hours": 5.5e7},   # year 8307
        {"gpu_model": "L4", "gpu_count": 1, "units": 10.0, "hours": 0.0}]
    read = Job.model_validate(data)
    assert [r.gpu_model for r in read.progress.closed] == ["T4"]
    assert measurements(read) == [Measurement("T4", 1, units_per_h=360.0, hours=1.0)]


def test_a_point_far_ahead_of_its_receipt_never_pins_the_latest():
    job = _job()
    first = _point(0, 0)
    learn(job, _report(job, first, first))
    learn(job, _report(job, first, _point(10, 1000)))
    # year 8307 in a report received at T0 + 20 s (stored before the API refused it)
    future = ProgressPoint(unit="samples", done=2000, at=T0.replace(year=8307))
    hostile = AgentReport.model_construct(
        job_id="j", attempt=1, phase=AgentPhase.RUNNING, at=future.at, first_progress=first,
        progress=future, received_at=T0 + timedelta(seconds=20))
    assert not learn(job, hostile) and job.progress.latest.done == 1000
    # one recorded earlier is forgotten: the next true point is taken
    job.progress.latest = future
    learn(job, _report(job, first, _point(3610, 1000 + 3600)))
    assert job.progress.latest.done == 4600
    learn(job, _report(job, first, _point(7210, 8200)))
    assert measurements(job) == [Measurement("T4", 1, units_per_h=3600.0, hours=1.0)]


def test_another_unit_starts_the_evidence_over_and_the_spec_unit_rules():
    p = JobProgress()
    samples = lambda s, d: ProgressPoint(unit="samples", done=d, at=T0 + timedelta(seconds=s))
    tokens = lambda s, d: ProgressPoint(unit="tokens", done=d, at=T0 + timedelta(seconds=s))
    f1 = samples(0, 0)
    for pt in (f1, samples(60, 100), samples(3660, 3700)):  # 3,600 samples/h
        p.observe(1, "T4", 1, 1.0, f1, pt)
    f2 = tokens(4000, 0)
    for pt in (f2, tokens(4060, 1e6), tokens(7660, 1e6 + 3.6e9)):  # 3.6e9 tokens/h
        p.observe(2, "T4", 1, 1.0, f2, pt)
    rate = p.rate("T4", 1)
    assert (rate.units, rate.hours) == (3.6e9, 1.0) and p.latest.unit.value == "tokens"
    # within an attempt: a switch drops the old unit's window
    q = JobProgress()
    for pt in (samples(0, 0), samples(60, 100), tokens(120, 5e9), tokens(180, 5e9 + 6e6)):
        q.observe(1, "T4", 1, 1.0, samples(0, 0), pt)
    assert (q.live().units, q.live().hours) == (6e6, 60 / 3600)
    # a job whose spec counts samples learns nothing from tokens
    job = _job(work={"unit": "samples"})
    assert not learn(job, _report(job, None, tokens(0, 5)))
    assert job.progress.latest is None


def test_an_offer_of_more_than_64_gpus_is_learned_like_any_other():
    job = _job(gpu_model="GB200", gpu_count=72)
    first = _point(0, 0)
    for seconds, done in ((0, 0), (10, 10), (70, 100)):
        learn(job, _report(job, first, _point(seconds, done)))
    assert measurements(job) == [Measurement("GB200", 72, units_per_h=5400.0, hours=60 / 3600)]


def test_a_rate_measured_against_a_wrong_declaration_is_the_measured_one():
    # Declared 500 samples/s on a T4 (1.8M/h, 30× too fast); measured 5,740 samples in 6 min
    # (57.4k/h over 0.1 h). The T4's rate is the measurement; the A10G's is the declaration's
    # T4 rate scaled by the table (0.3429 / 0.1506) and by the job's measured/declared ratio.
    job = _job(gpu_model="T4", work={"workload": "transformer", "throughput": {"T4": 500}})
    job.progress.observe(1, "T4", 1, 1.0, None, _point(0, 0))
    job.progress.observe(1, "T4", 1, 1.0, None, _point(360, 5740))
    speeds = job_speeds(job, OfferTable.from_offers([offer(gpu_model="T4"),
                                                     offer(gpu_model="A10G")]))
    assert speeds.rates.source == ("measured", "prior")
    assert speeds.rates.units_per_h[0] == pytest.approx(57_400.0, rel=1e-9)
    assert speeds.rates.rel_sd[0] == pytest.approx(0.2)
    # δ = ln(57.4k / 1.8M) = -3.4455 with variance 0.15² + 0.2² = 0.0625 against its prior
    # sd 0.15 (precision 44.444 + 16 = 60.444): δ = -3.4455 × 16 / 60.444 = -0.91205.
    a10g = 1.8e6 * 0.3429 / 0.1506 * np.exp(-0.91205)
    assert speeds.rates.units_per_h[1] == pytest.approx(a10g, rel=1e-3)


def test_work_model_skips_evidence_without_a_rate():
    """A zero or non-finite measurement handed to work_model is no declaration (no log(0))."""
    from policies.throughput import Measurement
    from scheduler.controller.policy_inputs import work_model

    job = Job(id="j", spec=spec(work={"unit": "samples"}), created_at=T0, updated_at=T0)
    model = work_model(job, [Measurement("T4", 1, 0.0, 1.0), Measurement("V100", 1, 3600.0, 1.0)])
    assert model.declared == {"v100": pytest.approx(3600.0)}
