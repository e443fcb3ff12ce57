"""Work: what a job must do in its own units, and what its agent observes of it doing so.

A training script reports its progress by appending JSON lines to the file the agent exports
as ``SCHED_PROGRESS_FILE`` (:mod:`scheduler.progress` is an optional Python helper); the agent
forwards the latest point with its reports as a :class:`ProgressPoint`, and where a GPU exists
the GPU utilisation and memory it sampled through NVML as a :class:`GpuSample`. The daemon
turns consecutive points into a measured throughput per GPU model.
"""

from __future__ import annotations

from datetime import datetime
from enum import Enum

from pydantic import Field, field_validator, model_validator

from core.models.base import Count, Number, StrictModel, ensure_utc

WORK_MAX_UNITS = 1e18
"""Largest work count accepted (a trillion tokens × a million epochs is still below it)."""


class WorkUnit(str, Enum):
    """What a job counts its work in."""

    SAMPLES = "samples"
    TOKENS = "tokens"
    STEPS = "steps"


class Workload(str, Enum):
    """Which family of public training benchmarks a job's throughput prior follows.

    ``transformer``: attention models (BERT, GPT, Transformer-XL), sensitive to memory
    bandwidth; ``cnn``: convolutional models (ResNet, SSD, Mask R-CNN), compute-bound;
    ``generic``: both families together (the default).
    """

    TRANSFORMER = "transformer"
    CNN = "cnn"
    GENERIC = "generic"


class ProgressPoint(StrictModel):
    """One progress report of a job: ``done`` units of ``unit`` finished in all (cumulative
    over the whole job, not per attempt), ``total`` when the job knows it (``done`` is at
    most ``total``), ``at`` when the job wrote it (the instance's clock, aware UTC)."""

    unit: WorkUnit
    done: Number = Field(ge=0, le=WORK_MAX_UNITS)
    total: Number | None = Field(default=None, gt=0, le=WORK_MAX_UNITS)
    at: datetime

    _utc = field_validator("at")(lambda v: ensure_utc(v))

    @model_validator(mode="after")
    def _done_within_total(self) -> ProgressPoint:
        if self.total is not None and self.done > self.total:
            raise ValueError("done: more than total")
        return self


class GpuSample(StrictModel):
    """GPU use over the window before ``at`` (NVML, sampled by the agent).

    - **gpus**: GPUs seen. **util_pct**: mean GPU utilisation over GPUs and window, 0–100.
    - **max_util_pct**: the highest single reading in the window (0 means every GPU idle).
    - **memory_used_gib** / **memory_total_gib**: the most used in the window, and the
      capacity, summed over GPUs (GiB).
    - **window_s**: seconds the readings cover; **readings**: how many there were.

    The mean is at most the highest reading, the memory used at most the capacity.
    """

    gpus: Count = Field(ge=1, le=64)
    util_pct: Number = Field(ge=0, le=100)
    max_util_pct: Number = Field(ge=0, le=100)
    memory_used_gib: Number = Field(ge=0, le=65536)
    memory_total_gib: Number = Field(gt=0, le=65536)
    window_s: Number = Field(ge=0, le=86400)
    readings: Count = Field(ge=1, le=100_000)
    at: datetime

    _utc = field_validator("at")(lambda v: ensure_utc(v))

    @model_validator(mode="after")
    def _consistent(self) -> GpuSample:
        # a mean of readings may exceed their maximum by a rounding error, never more
        if self.util_pct > self.max_util_pct + 1e-6:
            raise ValueError("max_util_pct: below util_pct (the mean of the readings)")
        if self.memory_used_gib > self.memory_total_gib * (1 + 1e-9):
            raise ValueError("memory_used_gib: more than memory_total_gib")
        return self
