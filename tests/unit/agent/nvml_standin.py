"""A stand-in for pynvml (no GPU on the test machines): the calls the agent makes, with
pynvml's names and return shapes, and failures raised as pynvml's own ``NVMLError``."""

from __future__ import annotations

from types import SimpleNamespace

import pynvml

from scheduler.agent.gpus import GIB


class FakeNvml:
    """pynvml's calls over scripted devices: ``devices[i]`` is a list of (util %, used GiB)
    readings returned in turn; every device has ``total_gib``."""

    NVMLError = pynvml.NVMLError

    def __init__(self, devices: list[list[tuple[int, float]]], total_gib: float = 24.0,
                 init_error: int | None = None, broken: set[int] | None = None) -> None:
        self.devices, self.total_gib = devices, total_gib
        self.init_error, self.broken = init_error, broken or set()
        self.calls = {i: 0 for i in range(len(devices))}
        self.initialised = self.shut_down = False

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise pynvml.NVMLError(self.init_error)
        self.initialised = True

    def nvmlShutdown(self) -> None:
        self.shut_down = True

    def nvmlDeviceGetCount(self) -> int:
        assert self.initialised
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> SimpleNamespace:
        if not 0 <= index < len(self.devices):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return SimpleNamespace(index=index)

    def _reading(self, handle: SimpleNamespace) -> tuple[int, float]:
        if handle.index in self.broken:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        readings = self.devices[handle.index]
        return readings[min(self.calls[handle.index], len(readings) - 1)]

    def nvmlDeviceGetUtilizationRates(self, handle: SimpleNamespace) -> SimpleNamespace:
        return SimpleNamespace(gpu=self._reading(handle)[0], memory=0)

    def nvmlDeviceGetMemoryInfo(self, handle: SimpleNamespace) -> SimpleNamespace:
        used = int(self._reading(handle)[1] * GIB)
        total = int(self.total_gib * GIB)
        self.calls[handle.index] += 1  # the memory call ends one device's reading
        return SimpleNamespace(total=total, used=used, free=total - used)
