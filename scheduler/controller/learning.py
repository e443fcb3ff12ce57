"""Learn a job's throughput from its own progress reports.

Source: the agent's latest report of the current attempt (``AgentReport.progress``, the
latest point the job wrote, and ``first_progress``, the attempt's first). The job record keeps
the latest point and, per GPU model and count, the evidence of every attempt
(:class:`core.models.jobs.JobProgress`): units done and market hours (wall seconds ×
the placement's ``time_scale``), from the first point the daemon sees after the attempt's
first (the first interval is warm-up) to the latest. Attempts on the same kind of offer add
up, so their rates combine by evidence weight. A job that reports nothing keeps an empty
record and is decided on as before.

Only rates are evidence: some units done in some market hours (a stall between two points
is no rate yet: the window waits for progress). A point far ahead of its report's receipt
(a wrong clock) is ignored, and a point in another unit than the spec's ``work.unit`` too
(the API refuses both; older stored reports may carry them).

Writes: the latest point is saved with any other write of the job, and by itself at most
every :data:`PROGRESS_RECORD_S` wall seconds of the job's clock (agents report every few
seconds; a write per report of every running job would be most of a pass's Redis time), at
once when the measurement changes shape (a new attempt, its start point).
"""

from __future__ import annotations

from core.models import Job
from core.models.agents import AgentReport
from policies.throughput import Measurement

PROGRESS_RECORD_S = 30.0


def learn(job: Job, report: AgentReport | None) -> bool:
    """Take ``report``'s progress into ``job.progress`` (in place). Returns whether the job
    should be saved now for it. Reports of another attempt than the current placement's, and
    reports without progress, change nothing."""
    placement = job.placement
    if report is None or report.progress is None or placement is None \
            or report.attempt != placement.attempt:
        return False
    work = job.spec.work
    if work is not None and report.progress.unit is not work.unit:
        return False
    before = job.progress.latest
    shaped = job.progress.observe(report.attempt, placement.offer.gpu_model,
                                  placement.offer.gpu_count, placement.time_scale,
                                  report.first_progress, report.progress,
                                  received_at=report.received_at or report.at)
    latest = job.progress.latest
    if shaped or before is None:
        return True
    return latest is not before and \
        (latest.at - before.at).total_seconds() >= PROGRESS_RECORD_S


def measurements(job: Job) -> list[Measurement]:
    """The job's measured rates (units per market hour for the whole offer, and the market
    hours behind each), one per GPU model and count it ran on with usable points: every
    rate finite and positive (:meth:`~core.models.jobs.MeasuredRate.usable`)."""
    return [Measurement(gpu_model=r.gpu_model, gpu_count=r.gpu_count,
                        units_per_h=r.units / r.hours, hours=r.hours)
            for r in job.progress.measured() if r.usable()]
