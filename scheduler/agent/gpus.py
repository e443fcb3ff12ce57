"""GPU utilisation and memory, sampled by the agent and summed up once per report.

- :class:`GpuSampler`: the small interface, one :meth:`~GpuSampler.read` per sampling moment
  returning one :class:`GpuReading` per GPU. :class:`NvmlSampler` is the real one, on NVML
  through ``pynvml`` (package ``nvidia-ml-py``).
- :func:`open_gpu_sampler`: the real sampler, or ``None`` where there is no NVIDIA driver or no
  GPU (then the agent reports ``gpu=None``, as it always did).
- :class:`GpuWindow`: the readings since the last delivered report, as one
  :class:`~core.models.work.GpuSample`.

The agent samples every :data:`GPU_SAMPLE_S` seconds on its own thread (NVML calls take
microseconds) and once more before a report whose window holds no reading yet.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from core.models.work import GpuSample

logger = logging.getLogger(__name__)

GPU_SAMPLE_S = 2.0
GIB = 1024 ** 3
# GpuSample's own bounds: a longer window (a daemon outage) starts afresh.
MAX_READINGS = 100_000
MAX_WINDOW_S = 86_400.0


@dataclass(frozen=True)
class GpuReading:
    """One GPU at one moment: ``util_pct`` (0–100, NVML's "percent of time a kernel ran" over
    its last sample period), memory used and total in bytes."""

    index: int
    util_pct: float
    memory_used_bytes: int
    memory_total_bytes: int


class GpuSampler(Protocol):
    """Reads every GPU of the machine now; an empty list when nothing could be read."""

    def read(self) -> list[GpuReading]: ...

    def close(self) -> None: ...


class NvmlSampler:
    """:class:`GpuSampler` on NVML. ``nvml`` is the ``pynvml`` module (or a stand-in with the
    same function names and return shapes), already initialised; ``count`` GPUs.

    A GPU whose reading fails (``NVMLError``: not supported, GPU lost, ...) is left out of that
    reading; the first such failure per GPU is logged.
    """

    def __init__(self, nvml: Any, count: int) -> None:
        self._nvml = nvml
        self._handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        self._failed: set[int] = set()

    def read(self) -> list[GpuReading]:
        out = []
        for index, handle in enumerate(self._handles):
            try:
                util = self._nvml.nvmlDeviceGetUtilizationRates(handle)
                memory = self._nvml.nvmlDeviceGetMemoryInfo(handle)
            except self._nvml.NVMLError as exc:
                if index not in self._failed:
                    self._failed.add(index)
                    logger.warning("cannot read GPU %d through NVML: %s", index, exc)
                continue
            out.append(GpuReading(index, float(min(max(util.gpu, 0), 100)),
                                  int(memory.used), int(memory.total)))
        return out

    def close(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError:
            pass


def open_gpu_sampler(nvml: Any = None) -> NvmlSampler | None:
    """The NVML sampler of this machine, or ``None`` without a usable NVIDIA driver (NVML's
    library missing, ``nvmlInit`` failing) or without a GPU. ``nvml`` defaults to ``pynvml``
    (tests pass a stand-in). Never raises for a missing GPU; logs why there is none."""
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError:
            logger.info("no GPU sampling: pynvml is not installed")
            return None
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        logger.info("no GPU sampling: NVML unavailable (%s)", exc)
        return None
    try:
        count = int(nvml.nvmlDeviceGetCount())
        if count < 1:
            logger.info("no GPU sampling: NVML sees no GPU")
            nvml.nvmlShutdown()
            return None
        sampler = NvmlSampler(nvml, count)
    except nvml.NVMLError as exc:
        logger.warning("no GPU sampling: %s", exc)
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError:
            pass
        return None
    logger.info("sampling %d GPU(s) through NVML every %.0f s", count, GPU_SAMPLE_S)
    return sampler


class GpuWindow:
    """Readings of ``sampler`` since the last :meth:`clear`, summed up as a
    :class:`GpuSample`. ``clock`` (monotonic seconds) and ``now`` (aware UTC) are injectable.
    One thread only."""

    def __init__(self, sampler: GpuSampler, clock: Any = time.monotonic,
                 now: Any = None) -> None:
        self.sampler = sampler
        self._clock = clock
        self._now = now or (lambda: datetime.now(UTC))
        self._last_read: float | None = None
        self._failed_logged = False
        self.clear()

    def clear(self) -> None:
        """Start a new window (after a report carrying the current one was delivered)."""
        self._start: float | None = None
        self._end = 0.0
        self._readings = 0
        self._util_sum = 0.0
        self._util_n = 0
        self._util_max = 0.0
        self._memory_used_max = 0
        self._memory_total = 0
        self._gpus = 0

    def sample_if_due(self, every_s: float = GPU_SAMPLE_S) -> None:
        """Take a reading when ``every_s`` passed since the last one or the window is empty."""
        now = self._clock()
        if self._readings and self._last_read is not None and now - self._last_read < every_s:
            return
        self.sample()

    def sample(self) -> None:
        """Take one reading now (a sampler's failure is logged once and skipped)."""
        at = self._clock()
        self._last_read = at
        try:
            readings = self.sampler.read()
        except Exception as exc:  # noqa: BLE001 - a sampler's bug must not stop the agent
            if not self._failed_logged:
                self._failed_logged = True
                logger.warning("GPU sampling failed: %s", exc)
            return
        if not readings:
            return
        if self._readings >= MAX_READINGS or (self._start is not None
                                              and at - self._start > MAX_WINDOW_S):
            self.clear()
        if self._start is None:
            self._start = at
        self._end = at
        self._readings += 1
        self._util_sum += sum(r.util_pct for r in readings)
        self._util_n += len(readings)
        self._util_max = max(self._util_max, max(r.util_pct for r in readings))
        self._memory_used_max = max(self._memory_used_max,
                                    sum(r.memory_used_bytes for r in readings))
        self._memory_total = sum(r.memory_total_bytes for r in readings)
        self._gpus = len(readings)

    def summary(self) -> GpuSample | None:
        """The window so far (``None`` when it holds no reading): mean and highest
        utilisation over every GPU and reading, the most memory in use at one reading and the
        capacity (summed over GPUs, GiB), the seconds from the first reading to the last."""
        if not self._readings or self._memory_total <= 0:
            return None
        return GpuSample(
            gpus=min(self._gpus, 64), util_pct=self._util_sum / self._util_n,
            max_util_pct=self._util_max, memory_used_gib=self._memory_used_max / GIB,
            memory_total_gib=self._memory_total / GIB,
            window_s=min(self._end - (self._start or self._end), MAX_WINDOW_S),
            readings=self._readings, at=self._now())
