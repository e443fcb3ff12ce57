"""Progress points, GPU samples and agent reports refuse what cannot be true."""

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from core.models.agents import POINT_AHEAD_S, AgentReport
from core.models.work import GpuSample, ProgressPoint

AT = datetime(2026, 12, 1, 20, tzinfo=UTC)


def _point(done: float, seconds: float = 0.0, unit: str = "samples",
           total: float | None = None) -> ProgressPoint:
    return ProgressPoint(unit=unit, done=done, total=total, at=AT + timedelta(seconds=seconds))


def test_done_is_at_most_total():
    assert _point(10, total=10).done == 10
    with pytest.raises(ValidationError, match="done: more than total"):
        _point(10.5, total=10)


def test_a_gpu_sample_mean_is_at_most_its_max_and_memory_at_most_capacity():
    fields = {"gpus": 2, "util_pct": 50.0, "max_util_pct": 50.0, "memory_used_gib": 16.0,
              "memory_total_gib": 16.0, "window_s": 5, "readings": 3, "at": AT}
    GpuSample(**fields)
    GpuSample(**fields | {"util_pct": 50.0 + 1e-9})  # a mean's rounding error
    with pytest.raises(ValidationError, match="max_util_pct"):
        GpuSample(**fields | {"max_util_pct": 49.0})
    with pytest.raises(ValidationError, match="memory_used_gib"):
        GpuSample(**fields | {"memory_used_gib": 16.5})


def _report(**fields) -> AgentReport:
    return AgentReport(job_id="j", attempt=1, phase="running", at=AT, **fields)


def test_a_report_s_points_agree():
    _report(first_progress=_point(0, -60), progress=_point(5, POINT_AHEAD_S))
    with pytest.raises(ValidationError, match="at: more than 60 s after"):
        _report(progress=_point(5, POINT_AHEAD_S + 1))
    with pytest.raises(ValidationError, match="unit: not progress.unit"):
        _report(first_progress=_point(0, -60, "tokens"), progress=_point(5))
    with pytest.raises(ValidationError, match="at: after progress.at"):
        _report(first_progress=_point(0, 1), progress=_point(5))
