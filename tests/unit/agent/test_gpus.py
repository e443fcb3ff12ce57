"""GPU sampling (scheduler.agent.gpus) against a stand-in for NVML: the same function names and
return shapes as pynvml, failures raised as pynvml's own NVMLError; and the real factory on this
machine, which has no NVIDIA driver."""

from __future__ import annotations

from datetime import UTC, datetime

import pynvml
import pytest

from scheduler.agent.gpus import GpuWindow, NvmlSampler, open_gpu_sampler
from tests.unit.agent.nvml_standin import FakeNvml

AT = datetime(2026, 12, 1, 19, 30, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_no_driver_here_means_no_sampler() -> None:
    # This machine has no NVIDIA driver: the real factory must say "no GPU", not fail.
    assert open_gpu_sampler() is None


@pytest.mark.parametrize("error", [pynvml.NVML_ERROR_LIBRARY_NOT_FOUND,
                                   pynvml.NVML_ERROR_DRIVER_NOT_LOADED])
def test_nvml_init_failures_mean_no_sampler(error: int) -> None:
    assert open_gpu_sampler(FakeNvml([[(50, 1.0)]], init_error=error)) is None


def test_zero_gpus_means_no_sampler_and_nvml_is_shut_down() -> None:
    nvml = FakeNvml([])
    assert open_gpu_sampler(nvml) is None and nvml.shut_down


def test_a_window_of_two_gpus_by_hand() -> None:
    # GPU 0 reads 80 % then 40 %, 10 then 12 GiB; GPU 1 reads 20 % then 0 %, 4 then 2 GiB.
    nvml = FakeNvml([[(80, 10.0), (40, 12.0)], [(20, 4.0), (0, 2.0)]], total_gib=24.0)
    sampler = open_gpu_sampler(nvml)
    assert isinstance(sampler, NvmlSampler)
    clock = Clock()
    window = GpuWindow(sampler, clock=clock, now=lambda: AT)
    assert window.summary() is None
    window.sample()
    clock.t += 2.0
    window.sample()
    sample = window.summary()
    assert sample is not None
    assert sample.gpus == 2 and sample.readings == 2
    assert sample.util_pct == pytest.approx((80 + 20 + 40 + 0) / 4)   # 35 %
    assert sample.max_util_pct == 80
    assert sample.memory_used_gib == pytest.approx(14.0)   # max(10 + 4, 12 + 2)
    assert sample.memory_total_gib == pytest.approx(48.0)
    assert sample.window_s == pytest.approx(2.0) and sample.at == AT
    window.clear()
    assert window.summary() is None
    sampler.close()
    assert nvml.shut_down


def test_sampling_is_paced_but_never_leaves_a_report_empty() -> None:
    nvml = FakeNvml([[(10, 1.0), (30, 1.0), (50, 1.0), (70, 1.0)]])
    clock = Clock()
    window = GpuWindow(open_gpu_sampler(nvml), clock=clock, now=lambda: AT)
    window.sample_if_due(2.0)           # empty window: read now
    clock.t += 1.0
    window.sample_if_due(2.0)           # 1 s after: not due
    assert window.summary().readings == 1
    clock.t += 1.0
    window.sample_if_due(2.0)           # 2 s after: due
    assert window.summary().util_pct == pytest.approx(20.0)
    window.clear()
    clock.t += 0.5
    window.sample_if_due(2.0)           # not due by time, but the new window is empty
    assert window.summary().util_pct == pytest.approx(50.0) and window.summary().readings == 1


def test_a_gpu_that_fails_is_left_out_and_one_that_all_fail_reports_nothing() -> None:
    nvml = FakeNvml([[(90, 8.0)], [(10, 1.0)]], total_gib=16.0, broken={1})
    window = GpuWindow(open_gpu_sampler(nvml), clock=Clock(), now=lambda: AT)
    window.sample()
    sample = window.summary()
    assert sample.gpus == 1 and sample.util_pct == 90 and sample.memory_total_gib == 16.0
    nvml.broken = {0, 1}
    window.clear()
    window.sample()
    assert window.summary() is None
