"""Job spec: what users submit (``schedctl submit job.yaml`` or the API).

The spec is strict: unknown fields, wrong types and out-of-range values are refused with the
field's path, the bad value and what is allowed (see
:func:`core.models.errors.describe_validation_error`). Numbers are strict and finite: ``true``,
``"2"``, ``.nan`` and ``.inf`` are refused (ints are fine for floats).
"""

from __future__ import annotations

import re
import signal
from datetime import datetime
from enum import Enum

from pydantic import Field, ValidationInfo, field_validator, model_validator

from core.models import limits
from core.models.base import Count, Number, StrictModel, ensure_utc, limits_apply
from core.models.offers import Market
from core.models.work import WORK_MAX_UNITS, Workload, WorkUnit

_NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?\Z")


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


MAX_NODES = 64
"""The largest gang a spec may ask for (nodes of one job)."""


class Resources(StrictModel):
    """What one instance must have. VRAM and memory are GiB; ``gpu_models`` matches
    case-insensitively (``V100`` matches ``v100``); empty or absent means any model (at most
    256 names of at most 128 characters, :mod:`core.models.limits`).

    ``nodes`` (1-64, default 1) is how many instances the job runs on at once, each meeting
    every other constraint here (a **gang**): all N are instances of one offer, so in one
    zone, where the nodes talk to each other; they are launched all-or-nothing, given a
    torchrun-compatible rank environment (``NODE_RANK``, ``NNODES``, ``MASTER_ADDR``,
    ``MASTER_PORT``), checkpointed by rank 0 and moved together. Prices, budgets and costs
    count N instances.
    """

    nodes: Count = Field(default=1, ge=1, le=MAX_NODES,
                         description="instances of the gang, each meeting these constraints")

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


class CompressionChoice(str, Enum):
    """How checkpoint files are stored: ``auto`` (zstd where it pays) or ``none``."""

    AUTO = "auto"
    NONE = "none"


def _cap_throughput(value: dict[str, float], info: ValidationInfo) -> dict[str, float]:
    """Declared throughputs: at most :data:`~core.models.limits.LIST_MAX_ITEMS` GPU models of
    at most :data:`~core.models.limits.LIST_ITEM_MAX_CHARS` characters, each rate > 0."""
    if limits_apply(info):
        if len(value) > limits.LIST_MAX_ITEMS:
            raise ValueError(f"at most {limits.LIST_MAX_ITEMS} GPU models, got {len(value)}")
        for key in value:
            if not key.strip() or len(key) > limits.LIST_ITEM_MAX_CHARS:
                raise ValueError(f"GPU model names are 1-{limits.LIST_ITEM_MAX_CHARS} "
                                 f"characters, got {len(key)}")
    for key, rate in value.items():
        if not rate > 0 or rate > WORK_MAX_UNITS:
            shown = key if len(key) <= 40 else key[:40] + "…"
            raise ValueError(f"{shown!r}: throughput must be > 0 and at most "
                             f"{WORK_MAX_UNITS:g} units/s")
    return value


class WorkSpec(StrictModel):
    """The job's work in its own units, for ranking offers by cost to finish.

    - **unit**: ``samples`` | ``tokens`` | ``steps`` (default ``samples``): what the job's
      progress reports count.
    - **total**: units the whole job does (dataset size × epochs); optional when the job
      reports a total with its progress (at most 1e18).
    - **workload**: ``transformer`` | ``cnn`` | ``generic`` (default): which family of public
      training benchmarks the throughput prior of each GPU model follows.
    - **throughput**: optional declared rates, units per second on ONE GPU of each named model
      (e.g. ``{A100-80GB: 2400}``; GPU models match case-insensitively): they replace the prior
      for that model until the job's own progress measures it.
    - **scaling_efficiency**: each GPU beyond the first adds this fraction of one GPU's rate
      (0 < e ≤ 1, default 0.9): an ``n``-GPU offer runs at ``1 + (n - 1) × e`` single GPUs.
    """

    unit: WorkUnit = WorkUnit.SAMPLES
    total: Number | None = Field(default=None, gt=0, le=WORK_MAX_UNITS)
    workload: Workload = Workload.GENERIC
    throughput: dict[str, Number] = Field(default_factory=dict)
    scaling_efficiency: Number = Field(default=0.9, gt=0, le=1)

    _rates = field_validator("throughput")(_cap_throughput)


class CheckpointSpec(StrictModel):
    """Where the job writes checkpoints and how they are synced.

    - **dir**: path relative to the job's working directory, exported as ``SCHED_CHECKPOINT_DIR``
      (at most 1,024 characters).
    - **sync_interval_s**: seconds between periodic syncs to the checkpoint store.
    - **grace_s**: seconds the job gets, after the signal, to save and exit before it is killed.
    - **signal**: the signal sent on a preemption notice or a migration (default ``SIGTERM``).
    - **keep_last**: committed checkpoints kept in the store, newest first (1–100, default 3).
    - **keep_every**: also keep every K-th checkpoint (by commit order: the 1st, the
      (K+1)-th, ...) beyond the last ones; 0 (default) keeps none extra. A stopped job's
      checkpoint is always kept.
    - **compression**: ``auto`` (default) stores each file zstd-compressed when that makes it
      at least 10 % smaller, else as is; ``none`` never compresses.
    """

    dir: str = Field(default="checkpoints", min_length=1)
    sync_interval_s: Number = Field(default=60, ge=1, le=86400)
    grace_s: Number = Field(default=30, ge=0, le=3600)
    signal: str = "SIGTERM"
    keep_last: Count = Field(default=3, ge=1, le=100)
    keep_every: Count = Field(default=0, ge=0, le=1_000_000)
    compression: CompressionChoice = CompressionChoice.AUTO

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
    - **work**: optional :class:`WorkSpec`: the total work in samples, tokens or steps and
      what is known of its throughput; with it (or with ``reference_gpu``, or once the job
      reports progress) offers are ranked by expected cost to finish, not price per hour.
    - **reference_gpu**: the GPU model ``expected_hours`` was measured on (one GPU of it;
      at most 128 characters). Without it and without ``work``, ``expected_hours`` holds on
      every offer alike.
    - **stop_when_idle**: checkpoint and stop the job (state ``stopped``) when its GPUs have
      been idle for 300 s (default false: an event and an alert only).
    - **owner**: the user the job belongs to (same characters as ``name``). The API sets it
      to the user whose token submitted the job; only an admin may name another (existing)
      user. Per-user budgets (the user record's, else the daemon config's) apply to all
      jobs of an owner.

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
    work: WorkSpec | None = None
    reference_gpu: str | None = Field(default=None, min_length=1)
    stop_when_idle: bool = False
    owner: str = "default"

    @field_validator("reference_gpu")
    @classmethod
    def _gpu_name(cls, value: str | None, info: ValidationInfo) -> str | None:
        return _cap_text(value, limits.LIST_ITEM_MAX_CHARS, info)

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
            if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*\Z", key):
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
