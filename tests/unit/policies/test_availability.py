import json

import numpy as np
import pytest

from policies.availability import (
    availability_stats,
    residual_down_h,
    residual_up_h,
    risk_to_mean_up_h,
)
from providers.replay.timeline import load_trace


def test_run_statistics_by_hand():
    x = np.array([1, 1, 0, 0, 0, 1, 1, 1], bool)
    s = availability_stats(x, gap_h=0.5, prior_up_h=2.0, prior_down_h=2.0)
    assert list(s.up_age_h) == [0, .5, 0, 0, 0, 0, .5, 1.0]
    assert list(s.down_age_h) == [0, 0, 0, .5, 1.0, 0, 0, 0]
    # at t=3: 1 h up in 1 finished run (+ a 2 h prior run) → (1 + 2)/(1 + 1) = 1.5 h
    assert s.mean_up_h[3] == pytest.approx(1.5)
    # at t=5: 1.5 h down in 1 finished outage (+ prior) → (1.5 + 2)/2 = 1.75 h
    assert s.mean_down_h[5] == pytest.approx(1.75)
    assert residual_up_h(s)[7] == pytest.approx(s.mean_up_h[7] + 1.0)
    assert residual_down_h(s)[4] == pytest.approx(s.mean_down_h[4] + 1.0)
    assert 0 < s.frac[0] < s.frac[1]


def test_no_look_ahead():
    rng = np.random.default_rng(3)
    x = rng.random(200) < 0.6
    short, full = availability_stats(x[:120], 1 / 6), availability_stats(x, 1 / 6)
    for field in ("up_age_h", "down_age_h", "mean_up_h", "mean_down_h", "frac"):
        assert np.array_equal(getattr(short, field), getattr(full, field)[:120]), field


def test_trace_polarity_one_means_available(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": [1, 1, 1, 0, 0]}))
    trace = load_trace(path)
    s = availability_stats(np.asarray(trace.data) >= 1, trace.gap_seconds / 3600)
    assert list(s.up_age_h * 6) == pytest.approx([0, 1, 2, 0, 0])
    assert list(s.down_age_h * 6) == pytest.approx([0, 0, 0, 0, 1])


def test_risk_to_mean_uptime():
    assert risk_to_mean_up_h(0.0) == np.inf
    assert risk_to_mean_up_h(1 - np.exp(-1)) == pytest.approx(730.0)   # one month, in hours
