"""Jobs: a submitted spec and everything the controller recorded about it (state, placements,
the event timeline, stop requests, the latest command failure)."""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from enum import Enum

from pydantic import Field, field_validator

from core.models.base import StrictModel, utcnow
from core.models.offers import Offer
from core.models.placements import Placement
from core.models.specs import JobSpec
from core.models.work import ProgressPoint


class JobState(str, Enum):
    """Lifecycle: pending → provisioning → running → (checkpointing → migrating →
    provisioning …) → succeeded | failed | cancelled | stopped (``stopped``: checkpointed and
    stopped by the scheduler because its budget or its owner's is exhausted, or its GPUs sat
    idle and its spec has ``stop_when_idle``; the committed checkpoint is kept)."""

    PENDING = "pending"
    PROVISIONING = "provisioning"
    RUNNING = "running"
    CHECKPOINTING = "checkpointing"
    MIGRATING = "migrating"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    STOPPED = "stopped"

    def is_terminal(self) -> bool:
        return self in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED,
                        JobState.STOPPED)


class JobEvent(StrictModel):
    """One line of a job's timeline. ``state`` is the state after the event."""

    at: datetime
    state: JobState
    message: str
    offer: str | None = Field(default=None, description="series key of the offer involved")
    price_usd_per_hour: float | None = None
    kind: str | None = Field(default=None, description="e.g. 'budget' for a budget alert, "
                                                       "'migration' for a price-driven move, "
                                                       "'max-price' when the held price rose "
                                                       "above max_price_usd_per_hour, "
                                                       "'waste' for a GPU waste alert")


class StopKind(str, Enum):
    """Why the scheduler asks a running job's agent to checkpoint and stop."""

    MOVE = "move"
    BUDGET = "budget"
    MAX_PRICE = "max-price"  # the held offer's price rose above max_price_usd_per_hour
    IDLE = "idle"  # the GPUs were idle and the spec has stop_when_idle
    PREEMPTION = "preemption"  # a notice on one node of a gang: every node checkpoints


class StopRequest(StrictModel):
    """A checkpoint-and-stop the scheduler asked of the current attempt's agent (the API
    answers the agent's next report with ``stop``). ``target`` is the series key of the offer
    a move aims at (the next placement decides again)."""

    kind: StopKind
    reason: str = Field(max_length=500)
    attempt: int = Field(ge=1)
    target: str | None = None


# Offers (GPU model × GPU count) a job's learned throughput is kept for: past it the one with
# the least evidence is dropped (a job record is read every pass; it stays small).
MAX_MEASURED_RATES = 8


# Evidence longer than this (market hours, a century) comes from a wrong clock, not a job.
MAX_EVIDENCE_H = 1e6

# How far a progress point may be ahead of the time its report was received (clocks of
# instances and daemon differ by seconds; a point further ahead is a wrong clock).
MAX_POINT_AHEAD_S = 3600.0


class MeasuredRate(StrictModel):
    """Evidence of a job's throughput on one kind of offer: ``units`` of work done in
    ``hours`` market hours on ``gpu_count`` × ``gpu_model`` (the whole offer; any count an
    offer may have). Its rate is ``units / hours``; evidence of several attempts adds up (an
    evidence-weighted mean). Only :meth:`usable` evidence is ever kept."""

    gpu_model: str = Field(min_length=1, max_length=128)
    gpu_count: int = Field(ge=0)
    units: float = Field(ge=0)
    hours: float = Field(ge=0)

    def usable(self) -> bool:
        """Whether this is a rate: some units in some hours (at most :data:`MAX_EVIDENCE_H`),
        a finite positive ratio. A stall (no units) is no rate yet."""
        return self.units > 0 and 0 < self.hours <= MAX_EVIDENCE_H \
            and math.isfinite(self.units) and math.isfinite(self.units / self.hours)

    def same_offer_kind(self, gpu_model: str, gpu_count: int) -> bool:
        return self.gpu_count == gpu_count and self.gpu_model.lower() == gpu_model.lower()


class JobProgress(StrictModel):
    """What the daemon learned from the job's own progress reports.

    - **latest**: the latest progress point recorded (cumulative over the job).
    - **attempt**, **gpu_model**, **gpu_count**, **time_scale**: the attempt the live points
      belong to and its offer (``time_scale``: market s per wall s of its placement).
    - **start**: where that attempt's measurement starts: the first point the daemon saw
      after the attempt's first one (the first interval is warm-up: start-up, compilation,
      data loading); ``None`` until then.
    - **closed**: evidence of earlier attempts, one entry per GPU model and count (at most
      :data:`MAX_MEASURED_RATES`), all :meth:`MeasuredRate.usable` (a stored entry that is
      not, e.g. a stall's zero, is dropped when the record is read).

    All evidence is in the unit of ``latest``: when the job reports another unit, what was
    learned in the old one is dropped and the measurement starts over (never summed).
    Point times are the instance's clock: only their differences are used.
    """

    latest: ProgressPoint | None = None
    attempt: int = Field(default=0, ge=0)
    gpu_model: str = ""
    gpu_count: int = Field(default=0, ge=0)
    time_scale: float = Field(default=1.0, gt=0)
    start: ProgressPoint | None = None
    closed: list[MeasuredRate] = Field(default_factory=list, max_length=MAX_MEASURED_RATES)

    _usable = field_validator("closed")(lambda v: [r for r in v if r.usable()])

    def live(self) -> MeasuredRate | None:
        """The current attempt's evidence, ``start`` → ``latest`` (``None`` before two
        points with some progress between them: a stall waits for progress)."""
        if self.start is None or self.latest is None or not self.gpu_model \
                or self.latest.unit is not self.start.unit:
            return None
        seconds = (self.latest.at - self.start.at).total_seconds()
        rate = MeasuredRate(gpu_model=self.gpu_model, gpu_count=self.gpu_count,
                            units=max(0.0, self.latest.done - self.start.done),
                            hours=max(0.0, seconds * self.time_scale / 3600.0))
        return rate if rate.usable() else None

    def measured(self) -> list[MeasuredRate]:
        """Every offer kind's evidence (each :meth:`MeasuredRate.usable`): the closed
        attempts' with the live attempt's added."""
        out = [r.model_copy() for r in self.closed if r.usable()]
        live = self.live()
        if live is not None:
            _add(out, live)
        return out

    def rate(self, gpu_model: str, gpu_count: int) -> MeasuredRate | None:
        """The evidence for one offer kind (GPU models compared case-insensitively)."""
        return next((r for r in self.measured() if r.same_offer_kind(gpu_model, gpu_count)),
                    None)

    def observe(self, attempt: int, gpu_model: str, gpu_count: int, time_scale: float,
                first: ProgressPoint | None, point: ProgressPoint,
                received_at: datetime | None = None) -> bool:
        """Take the progress ``point`` an agent of ``attempt`` reported (``first``: the
        attempt's first point) on an offer of ``gpu_count`` × ``gpu_model``, its report
        received at ``received_at`` (the daemon's clock). A new attempt closes the previous
        one's evidence; a point in another unit than ``latest`` drops the evidence learned
        (it starts over in the new unit). A point more than :data:`MAX_POINT_AHEAD_S` ahead
        of ``received_at`` is ignored, and a stored ``latest`` that far ahead (a wrong clock
        recorded earlier) is forgotten, so that no point pins ``latest``. Returns whether
        the measurement changed shape (a new attempt, a start point set or reset, evidence
        dropped): a caller throttling its writes should save such a change at once."""
        shaped = False
        if received_at is not None:
            ahead = received_at + timedelta(seconds=MAX_POINT_AHEAD_S)
            if point.at > ahead:
                return False
            if self.latest is not None and self.latest.at > ahead:
                self.latest, self.start, shaped = None, None, True
        if first is not None and (first.unit is not point.unit or first.at > point.at):
            first = None  # not this point's attempt start: no warm-up to skip
        if attempt < self.attempt or (self.latest is not None and attempt == self.attempt
                                      and point.at < self.latest.at):
            return shaped  # an older report than one already taken
        if self.latest is not None and point.unit is not self.latest.unit:
            # another unit: nothing learned in the old one compares with the new
            self.closed, self.start, self.latest, shaped = [], None, None, True
        if attempt != self.attempt:
            live = self.live()
            if live is not None:
                _add(self.closed, live)
            self.attempt, self.gpu_model, self.gpu_count = attempt, gpu_model, gpu_count
            self.time_scale, self.start = time_scale, None
            shaped = True
        if self.start is not None and point.done < self.start.done:
            self.start = None  # the job counts from lower again (restored from older work)
            shaped = True
        if self.start is None and (first is None or point.at > first.at):
            self.start = point
            shaped = True
        self.latest = point
        return shaped


def _add(rates: list[MeasuredRate], extra: MeasuredRate) -> None:
    """Add ``extra``'s evidence to its offer kind's entry of ``rates`` (in place) when it is
    :meth:`~MeasuredRate.usable`; past :data:`MAX_MEASURED_RATES` entries the one with the
    least evidence is dropped."""
    if not extra.usable():
        return
    for r in rates:
        if r.same_offer_kind(extra.gpu_model, extra.gpu_count):
            r.units += extra.units
            r.hours += extra.hours
            return
    rates.append(extra.model_copy())
    if len(rates) > MAX_MEASURED_RATES:
        rates.remove(min(rates, key=lambda r: r.hours))


# GPU behaviours the daemon watches a running job for (:mod:`policies.waste`).
WASTE_ALERTS = ("low-utilisation", "idle", "slow-steps", "vram-oversized")


class WasteAlerts(StrictModel):
    """Waste alerts of a job: ``open``, the alerts raised in the current episode of their
    condition for ``attempt`` (one alert per episode; an episode ends when its condition
    stops holding or the attempt ends), and ``raised``, how many alerts of each kind were
    ever raised (the ``/metrics`` counter follows it)."""

    attempt: int = Field(default=0, ge=0)
    open: list[str] = Field(default_factory=list, max_length=len(WASTE_ALERTS))
    raised: dict[str, int] = Field(default_factory=dict, max_length=len(WASTE_ALERTS))


# The tail of a failed command's output kept in the job record, so `status` shows the error
# without `schedctl logs`: bounded (20 lines of at most 300 characters, ~6 KB per job).
FAILURE_LOG_LINES = 20
FAILURE_LOG_LINE_CHARS = 300


class CommandFailure(StrictModel):
    """The latest non-zero exit of the job's command, as its agent reported it:
    ``exit_code`` (shell convention: 128 + N after signal N), the ``attempt`` and when the
    daemon saw it (``at``), and ``log_tail``, the job's last output lines then (at most
    :data:`FAILURE_LOG_LINES`, each cut to :data:`FAILURE_LOG_LINE_CHARS` characters)."""

    attempt: int = Field(ge=1)
    exit_code: int
    at: datetime
    log_tail: list[str] = Field(default_factory=list, max_length=FAILURE_LOG_LINES)

    @classmethod
    def of(cls, attempt: int, exit_code: int, at: datetime, lines: list[str]) -> CommandFailure:
        """From the job's log lines (oldest first; only the last ones are kept)."""
        cut = FAILURE_LOG_LINE_CHARS
        tail = [ln if len(ln) <= cut else ln[:cut - 1] + "…" for ln in lines[-FAILURE_LOG_LINES:]]
        return cls(attempt=attempt, exit_code=exit_code, at=at, log_tail=tail)


class Job(StrictModel):
    """A submitted job and everything the controller recorded about it.

    ``version`` increases on every write; the store refuses a write based on a stale version.
    """

    id: str
    spec: JobSpec
    state: JobState = JobState.PENDING
    created_at: datetime
    updated_at: datetime
    version: int = 0
    attempt: int = 0
    failures: int = 0
    lost_streak: int = Field(default=0, description="attempts lost in a row without a new checkpoint")
    placement: Placement | None = None
    placements: list[Placement] = Field(default_factory=list)
    events: list[JobEvent] = Field(default_factory=list)
    cancel_requested: bool = False
    waiting_reason: str | None = None
    last_checkpoint_id: str | None = None
    on_demand_reference_usd_per_hour: float | None = Field(
        default=None,
        description="cheapest eligible on-demand price when first placed: the all-on-demand baseline",
    )
    progress_h: float = Field(
        default=0.0, ge=0,
        description="compute hours saved in the latest committed checkpoint (estimated: hours "
                    "the attempts ran up to the moment their last checkpoint was seen)")
    stop_request: StopRequest | None = None
    budget_alerts: list[str] = Field(
        default_factory=list, description="budget alerts already recorded, e.g. 'job:80'")
    command_failure: CommandFailure | None = Field(
        default=None, description="the latest non-zero exit of the command: exit code and the "
                                  "last lines of the log")
    progress: JobProgress = Field(
        default_factory=JobProgress,
        description="the job's reported progress and the throughput learned from it")
    waste: WasteAlerts = Field(default_factory=WasteAlerts,
                               description="GPU waste alerts raised (policies.waste)")

    def remaining_hours(self) -> float | None:
        """``expected_hours`` minus the saved progress (≥ 0), or ``None`` when unknown."""
        if self.spec.expected_hours is None:
            return None
        return max(0.0, self.spec.expected_hours - self.progress_h)

    def record(self, state: JobState, message: str, *, offer: Offer | None = None,
               at: datetime | None = None, kind: str | None = None,
               price_usd_per_hour: float | None = None) -> None:
        """Set ``state`` and append a timeline event (with the offer and its price, if any:
        ``price_usd_per_hour`` when given, e.g. a held offer's price now, else the offer's)."""
        self.state = state
        if state.is_terminal():
            self.waiting_reason = None
        if price_usd_per_hour is None and offer is not None:
            price_usd_per_hour = offer.price_usd_per_hour
        self.events.append(
            JobEvent(
                at=at or utcnow(), state=state, message=message,
                offer=offer.key.series() if offer else None,
                price_usd_per_hour=price_usd_per_hour, kind=kind,
            )
        )

    def all_placements(self) -> list[Placement]:
        """Past placements followed by the current one, if any."""
        return self.placements + ([self.placement] if self.placement else [])

    def cost_usd(self, now: datetime | None = None, since: datetime | None = None) -> float:
        """USD billed so far (or in all, once finished): Σ :meth:`Placement.cost_usd`, the
        price series of each held offer integrated over its running time; with ``since``,
        only what was billed from that wall-clock time on."""
        return sum(p.cost_usd(now, since) for p in self.all_placements())

    def billed_hours(self, now: datetime | None = None, since: datetime | None = None) -> float:
        return sum(p.billed_hours(now, since) for p in self.all_placements())

    def on_demand_cost_usd(self, now: datetime | None = None,
                           since: datetime | None = None) -> float | None:
        """What the same running time (from ``since`` on, if given) would have cost on the
        cheapest eligible on-demand offer."""
        if self.on_demand_reference_usd_per_hour is None:
            return None
        return self.on_demand_reference_usd_per_hour * self.billed_hours(now, since)
