"""Job spec (what users submit), jobs, placements and the event timeline.

The job spec is read from YAML (``schedctl submit job.yaml``) or the API; it is strict: unknown
fields, wrong types and out-of-range values are refused with the field's path, the bad value and
what is allowed (see :func:`core.models.errors.describe_validation_error`). Numbers are
strict and finite: ``true``, ``"2"``, ``.nan`` and ``.inf`` are refused (ints are fine for floats).
"""

from __future__ import annotations

import re
import signal
from datetime import datetime
from enum import Enum

from pydantic import Field, ValidationInfo, field_validator, model_validator

from core.models import limits
from core.models.base import Count, Number, StrictModel, ensure_utc, limits_apply, utcnow
from core.models.offers import Market, Offer

_NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$")


class MarketChoice(str, Enum):
    """Which markets a job accepts: only spot, only on-demand, or ``auto`` (either, cheapest)."""

    SPOT = "spot"
    ON_DEMAND = "on-demand"
    AUTO = "auto"

    def allows(self, market: Market) -> bool:
        return self is MarketChoice.AUTO or self.value == market.value


def _cap_text(value: str | None, most: int, info: ValidationInfo, hint: str = "") -> str | None:
    """``value`` when at most ``most`` characters (or read back from the store: limits apply
    to user input only); else ``ValueError`` saying the length and the limit."""
    if value is not None and len(value) > most and limits_apply(info):
        raise ValueError(f"at most {most} characters, got {len(value)}{hint}")
    return value


def _cap_names(value: list[str] | None, info: ValidationInfo) -> list[str] | None:
    """A name list within :data:`~core.models.limits.LIST_MAX_ITEMS` items of at most
    :data:`~core.models.limits.LIST_ITEM_MAX_CHARS` characters each."""
    if value is None or not limits_apply(info):
        return value
    if len(value) > limits.LIST_MAX_ITEMS:
        raise ValueError(f"at most {limits.LIST_MAX_ITEMS} names, got {len(value)}")
    for index, item in enumerate(value):
        if len(item) > limits.LIST_ITEM_MAX_CHARS:
            raise ValueError(f"item {index}: at most {limits.LIST_ITEM_MAX_CHARS} characters, "
                             f"got {len(item)}")
    return value


class Resources(StrictModel):
    """What one instance must have. VRAM and memory are GiB; ``gpu_models`` matches
    case-insensitively (``V100`` matches ``v100``); empty or absent means any model (at most
    256 names of at most 128 characters, :mod:`core.models.limits`)."""

    gpu_count: Count = Field(default=1, ge=0, le=64)
    min_vram_gib: Number = Field(default=0, ge=0, le=1024, description="per GPU, GiB")
    gpu_models: list[str] | None = None
    min_vcpus: Count = Field(default=0, ge=0, le=4096)
    min_memory_gib: Number = Field(default=0, ge=0, le=65536)

    _names = field_validator("gpu_models")(_cap_names)


class AllowDeny(StrictModel):
    """An allow list (empty means all) and a deny list (always wins); each at most 256 names
    of at most 128 characters (:mod:`core.models.limits`)."""

    allow: list[str] = Field(default_factory=list)
    deny: list[str] = Field(default_factory=list)

    _names = field_validator("allow", "deny")(_cap_names)

    def permits(self, value: str) -> bool:
        if value in self.deny:
            return False
        return not self.allow or value in self.allow


class CheckpointSpec(StrictModel):
    """Where the job writes checkpoints and how they are synced.

    - **dir**: path relative to the job's working directory, exported as ``SCHED_CHECKPOINT_DIR``
      (at most 1,024 characters).
    - **sync_interval_s**: seconds between periodic syncs to the checkpoint store.
    - **grace_s**: seconds the job gets, after the signal, to save and exit before it is killed.
    - **signal**: the signal sent on a preemption notice or a migration (default ``SIGTERM``).
    """

    dir: str = Field(default="checkpoints", min_length=1)
    sync_interval_s: Number = Field(default=60, ge=1, le=86400)
    grace_s: Number = Field(default=30, ge=0, le=3600)
    signal: str = "SIGTERM"

    @field_validator("dir")
    @classmethod
    def _relative_dir(cls, value: str, info: ValidationInfo) -> str:
        _cap_text(value, limits.CHECKPOINT_DIR_MAX_CHARS, info)
        parts = [p for p in value.split("/") if p not in ("", ".")]
        if value.startswith("/") or ".." in parts or not parts or "\0" in value:
            # Restore replaces the folder's contents: it must be a subfolder of its own.
            raise ValueError("must be a subfolder relative to the working directory "
                             "(not '.', absolute, or containing '..')")
        return "/".join(parts)

    @field_validator("signal")
    @classmethod
    def _known_signal(cls, value: str) -> str:
        allowed = ("SIGTERM", "SIGINT", "SIGUSR1", "SIGUSR2", "SIGHUP")
        if value not in allowed:
            raise ValueError(f"must be one of {', '.join(allowed)}")
        return value

    def signal_number(self) -> int:
        return int(getattr(signal, self.signal))


class JobSpec(StrictModel):
    """What a user submits. See ``examples/charlm-job.yaml`` for a complete example.

    - **name**: lowercase letters, digits, ``.``, ``_``, ``-``; 1–63 characters.
    - **command**: shell command run in the working directory on the instance (at most
      16,384 characters).
    - **workdir**: local directory whose files are shipped with the job (optional; a path of
      at most 4,096 characters).
    - **env**: extra environment variables for the command (at most 128; names of at most
      128 characters, values of at most 16,384).
    - **resources**: see :class:`Resources`.
    - **market**: ``spot`` | ``on-demand`` | ``auto`` (default ``auto``).
    - **providers**, **regions**, **zones**: allow/deny lists.
    - **max_price_usd_per_hour**: refuse offers above this price.
    - **max_interruption_risk**: refuse spot offers riskier than this (monthly frequency, 0–1).
    - **checkpoint**: see :class:`CheckpointSpec`.
    - **deadline**: optional aware time by which the job should finish.
    - **max_failures**: times the command may exit non-zero (not from a preemption) before the
      job fails; default 0.
    - **expected_hours**: compute hours the job needs when it runs uninterrupted (> 0; market
      hours on a replayed market). Optional; with it the scheduler knows the remaining work
      (expected hours minus the progress saved in committed checkpoints), so deadlines and
      price-driven migrations are judged on the real remainder instead of a default.
    - **budget_usd**: spending limit of this job in USD (> 0). Alerts at 80 %, 90 % and 100 %;
      at 100 % the job checkpoints and stops (state ``stopped``).
    - **owner**: the user the job belongs to (same characters as ``name``; default
      ``default``): per-user budgets of the daemon config apply to all jobs of an owner.

    Every free-text field is bounded, and the whole spec is at most 64 KiB as JSON: the
    limits are :mod:`core.models.limits`; over one, validation fails naming the field.
    A spec read back from the store (validation context ``stored``) is not held to them.
    """

    name: str
    command: str = Field(min_length=1)
    workdir: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    resources: Resources = Field(default_factory=Resources)
    market: MarketChoice = MarketChoice.AUTO
    providers: AllowDeny = Field(default_factory=AllowDeny)
    regions: AllowDeny = Field(default_factory=AllowDeny)
    zones: AllowDeny = Field(default_factory=AllowDeny)
    max_price_usd_per_hour: Number | None = Field(default=None, gt=0)
    max_interruption_risk: Number | None = Field(default=None, ge=0, le=1)
    checkpoint: CheckpointSpec = Field(default_factory=CheckpointSpec)
    deadline: datetime | None = None
    max_failures: Count = Field(default=0, ge=0, le=100)
    expected_hours: Number | None = Field(default=None, gt=0, le=100_000,
                                         description="compute hours needed uninterrupted")
    budget_usd: Number | None = Field(default=None, gt=0, le=10_000_000)
    owner: str = "default"

    @field_validator("name", "owner")
    @classmethod
    def _name_shape(cls, value: str) -> str:
        if not _NAME_RE.match(value):
            raise ValueError(
                "must be 1-63 lowercase letters, digits, '.', '_' or '-', "
                "starting and ending with a letter or digit"
            )
        return value

    @field_validator("deadline")
    @classmethod
    def _deadline_aware(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("must include a timezone, e.g. 2026-12-01T18:00:00Z")
        return None if value is None else ensure_utc(value)

    @field_validator("command", "workdir")
    @classmethod
    def _no_nul(cls, value: str | None, info: ValidationInfo) -> str | None:
        if info.field_name == "command":
            _cap_text(value, limits.COMMAND_MAX_CHARS, info,
                      "; ship longer scripts in the workdir")
        else:
            _cap_text(value, limits.WORKDIR_MAX_CHARS, info)
        if value is not None and "\0" in value:
            raise ValueError("must not contain a NUL character")
        return value

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        if limits_apply(info):
            _cap_env(value)
        for key, item in value.items():
            if "\0" in item:
                raise ValueError(f"{key!r}: values must not contain a NUL character")
            if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key):
                raise ValueError(f"environment variable name {key!r} is not a valid identifier")
            if key.startswith("SCHED_"):
                raise ValueError(f"{key!r}: names starting with SCHED_ are set by the scheduler")
        return value

    @model_validator(mode="after")
    def _resources_consistent(self) -> JobSpec:
        if self.resources.gpu_count == 0 and (
            self.resources.min_vram_gib > 0 or self.resources.gpu_models
        ):
            raise ValueError(
                "resources: min_vram_gib and gpu_models need gpu_count >= 1"
            )
        return self

    @model_validator(mode="after")
    def _whole_size(self, info: ValidationInfo) -> JobSpec:
        if limits_apply(info):
            size = len(self.model_dump_json().encode())
            if size > limits.SPEC_MAX_BYTES:
                raise ValueError(f"the spec is {size} bytes as JSON; at most "
                                 f"{limits.SPEC_MAX_BYTES} (the fields are each within their "
                                 "limits, but not all of them can be at once)")
        return self


def _cap_env(value: dict[str, str]) -> None:
    """Raises ``ValueError`` when ``env`` is over a limit of :mod:`core.models.limits`
    (long names are cut in the message)."""
    if len(value) > limits.ENV_MAX_VARS:
        raise ValueError(f"at most {limits.ENV_MAX_VARS} variables, got {len(value)}")
    for key, item in value.items():
        shown = repr(key if len(key) <= 40 else key[:40] + "…")
        if len(key) > limits.ENV_NAME_MAX_CHARS:
            raise ValueError(f"variable name {shown}: at most {limits.ENV_NAME_MAX_CHARS} "
                             f"characters, got {len(key)}")
        if len(item) > limits.ENV_VALUE_MAX_CHARS:
            raise ValueError(f"{shown}: value of at most {limits.ENV_VALUE_MAX_CHARS} "
                             f"characters, got {len(item)}")


class JobState(str, Enum):
    """Lifecycle: pending → provisioning → running → (checkpointing → migrating →
    provisioning …) → succeeded | failed | cancelled | stopped (``stopped``: checkpointed and
    stopped by the scheduler because its budget or its owner's is exhausted; the committed
    checkpoint is kept)."""

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


class PlacementEnd(str, Enum):
    """Why a placement ended. ``moved``: the scheduler chose to leave the offer (a
    price-driven migration, or its price rose above the job's ``max_price_usd_per_hour``;
    after a committed checkpoint); ``stopped``: a budget stop."""

    PREEMPTED = "preempted"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    LOST = "lost"
    LAUNCH_FAILED = "launch-failed"
    MOVED = "moved"
    STOPPED = "stopped"


# Price changes kept per placement. A spot price changes a few times a day on real clouds, so
# this covers days of one placement; past it the two oldest segments are merged into one at
# their time-weighted mean price, which keeps the bill exact (see ``Placement.add_price_change``;
# the detail stays in price history). Small because every pass reads and parses every active
# job: 200 changes made a job ~5x slower to parse (455 vs 90 us) and its cost ~50x slower.
MAX_PRICE_CHANGES = 16


class PriceChange(StrictModel):
    """From ``at`` (aware UTC, wall time) on, the held offer's price is ``price_usd_per_hour``
    (USD per market hour), as the poller recorded it in price history."""

    at: datetime
    price_usd_per_hour: float = Field(ge=0)


class Placement(StrictModel):
    """One attempt of a job on one offer.

    ``client_token`` makes the launch idempotent (``{job_id}-{attempt}``). ``time_scale`` is
    market seconds per wall second (1 on real clouds; >1 on a replayed market): an hour billed
    is a market hour, ``wall seconds × time_scale / 3600``.

    ``price_changes`` is the held offer's price series while it runs, oldest first: the
    offer's price at the decision (``offer.price_usd_per_hour``) holds until the first change.
    The controller appends the changes the poller recorded in price history (AWS and Alibaba
    stamp each spot price with the time it took effect; a replayed market with the wall time
    its clock reached the step). Placements stored before it existed have none: their price
    is the decision's, as before. At most :data:`MAX_PRICE_CHANGES` entries.
    """

    attempt: int = Field(ge=1)
    offer: Offer
    client_token: str
    decided_at: datetime
    instance_id: str | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    end_reason: PlacementEnd | None = None
    time_scale: float = Field(default=1.0, gt=0)
    progress_at_start_h: float = Field(
        default=0.0, ge=0,
        description="compute hours saved in the checkpoint this attempt resumes from")
    price_changes: list[PriceChange] = Field(
        default_factory=list,
        description="the held offer's price changes while it ran (from price history)")

    def billed_hours(self, now: datetime | None = None) -> float:
        """Market hours this placement has been billed so far (0 before the instance started)."""
        if self.started_at is None:
            return 0.0
        end = self.ended_at or now or utcnow()
        return max(0.0, (end - self.started_at).total_seconds()) * self.time_scale / 3600.0

    def cost_usd(self, now: datetime | None = None) -> float:
        """USD billed from the start to the end (or ``now``, default the wall clock): the
        integral of the held offer's price series over that window, in market hours, i.e.
        Σ price × (segment wall seconds × ``time_scale`` / 3600) over the piecewise-constant
        segments of ``price_changes``. A change before the start sets the price at the start;
        changes at or after the end are not billed. 0 before the instance started.

        This is the one computation of a placement's cost: status, cost reports, budgets and
        the money-saved metric all call it."""
        if self.started_at is None:
            return 0.0
        end = self.ended_at or now or utcnow()
        start = self.started_at
        if end <= start:
            return 0.0
        price = self.offer.price_usd_per_hour
        usd_seconds = 0.0  # USD/hour × wall seconds
        mark = start
        for change in self.price_changes:
            if change.at >= end:
                break
            if change.at > mark:
                usd_seconds += price * (change.at - mark).total_seconds()
                mark = change.at
            price = change.price_usd_per_hour
        usd_seconds += price * (end - mark).total_seconds()
        return usd_seconds * self.time_scale / 3600.0

    def price_usd_per_hour(self) -> float:
        """The held offer's latest recorded price (USD/hour)."""
        if self.price_changes:
            return self.price_changes[-1].price_usd_per_hour
        return self.offer.price_usd_per_hour

    def priced_until(self) -> datetime:
        """Time of the latest recorded price: its change, else the offer's observation."""
        if self.price_changes:
            return self.price_changes[-1].at
        return self.offer.observed_at

    def add_price_change(self, at: datetime, price_usd_per_hour: float) -> bool:
        """Record that the held price is ``price_usd_per_hour`` from ``at`` on; ``False`` (and
        nothing recorded) when it is the latest price already or ``at`` is before the latest
        change (changes arrive in order). A change before the start is recorded at the start
        (it is the price the start was billed at). Past :data:`MAX_PRICE_CHANGES`, the two
        oldest segments become one at their time-weighted mean price: the integral over any
        window that starts at the start and ends after the third-oldest change is unchanged.
        """
        if price_usd_per_hour == self.price_usd_per_hour():
            return False
        if self.started_at is not None and at < self.started_at:
            at = self.started_at
        if self.price_changes and at < self.price_changes[-1].at:
            return False
        if self.price_changes and at == self.price_changes[-1].at:
            self.price_changes.pop()  # superseded at the same instant
            if price_usd_per_hour == self.price_usd_per_hour():
                return True
        self.price_changes.append(PriceChange(at=at, price_usd_per_hour=price_usd_per_hour))
        if len(self.price_changes) > MAX_PRICE_CHANGES:
            self._merge_oldest()
        return True

    def _merge_oldest(self) -> None:
        first, second, third = self.price_changes[:3]
        span_s = (third.at - first.at).total_seconds()
        mean = ((first.price_usd_per_hour * (second.at - first.at).total_seconds()
                 + second.price_usd_per_hour * (third.at - second.at).total_seconds()) / span_s
                if span_s > 0 else second.price_usd_per_hour)
        self.price_changes[:2] = [PriceChange(at=first.at, price_usd_per_hour=mean)]


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
                                                       "above max_price_usd_per_hour")


class StopKind(str, Enum):
    """Why the scheduler asks a running job's agent to checkpoint and stop."""

    MOVE = "move"
    BUDGET = "budget"
    MAX_PRICE = "max-price"  # the held offer's price rose above max_price_usd_per_hour


class StopRequest(StrictModel):
    """A checkpoint-and-stop the scheduler asked of the current attempt's agent (the API
    answers the agent's next report with ``stop``). ``target`` is the series key of the offer
    a move aims at (the next placement decides again)."""

    kind: StopKind
    reason: str = Field(max_length=500)
    attempt: int = Field(ge=1)
    target: str | None = None


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

    def cost_usd(self, now: datetime | None = None) -> float:
        """USD billed so far (or in all, once finished): Σ :meth:`Placement.cost_usd`, the
        price series of each held offer integrated over its running time."""
        return sum(p.cost_usd(now) for p in self.all_placements())

    def billed_hours(self, now: datetime | None = None) -> float:
        return sum(p.billed_hours(now) for p in self.all_placements())

    def on_demand_cost_usd(self, now: datetime | None = None) -> float | None:
        """What the same running time would have cost on the cheapest eligible on-demand offer."""
        if self.on_demand_reference_usd_per_hour is None:
            return None
        return self.on_demand_reference_usd_per_hour * self.billed_hours(now)
