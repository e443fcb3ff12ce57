"""Waste rules on hand-made sample windows (answers worked out in each test)."""

import math

import numpy as np

from policies import waste
from policies.views import NO_OFFER


def _window(util, max_util=None, used=None, total=16.0, every_s=60.0, first_end_s=60.0):
    """Samples of ``every_s`` seconds each, back to back, the first ending at ``first_end_s``."""
    k = len(util)
    end = first_end_s + every_s * np.arange(k)
    return waste.GpuWindow(
        end_s=end, window_s=np.full(k, every_s), util_pct=np.asarray(util, float),
        max_util_pct=np.asarray(util if max_util is None else max_util, float),
        memory_used_gib=np.asarray(used if used is not None else [12.0] * k, float),
        memory_total_gib=np.full(k, total))


def test_held_counts_from_the_start_of_the_runs_first_sample_to_the_latest_end():
    # samples end at 60, 120, 180, 240 (60 s each): the run is the last three, from 60 to 240
    held, first = waste.held_s(np.array([60., 120., 180., 240.]), np.full(4, 60.),
                               np.array([False, True, True, True]))
    assert (held, first) == (180.0, 1)


def test_held_is_zero_when_the_latest_sample_breaks_the_condition():
    assert waste.held_s(np.array([60., 120.]), np.full(2, 60.), np.array([True, False])) == \
        (0.0, 2)
    assert waste.held_s(np.zeros(0), np.zeros(0), np.zeros(0, bool)) == (0.0, 0)


def test_a_gap_longer_than_max_gap_breaks_the_run():
    # second sample starts at 300 - 60 = 240, 180 s after the first one's end at 60: broken
    held, first = waste.held_s(np.array([60., 300.]), np.full(2, 60.), np.array([True, True]),
                               max_gap_s=120.0)
    assert (held, first) == (60.0, 1)
    # the same with a 200 s allowance: one run from 0 to 300
    assert waste.held_s(np.array([60., 300.]), np.full(2, 60.), np.array([True, True]),
                        max_gap_s=200.0) == (300.0, 0)


def test_low_utilisation_needs_ten_minutes_under_65_percent():
    # 9 samples of 60 s at 50 %: 540 s, not yet; a tenth: 600 s
    assert waste.low_utilisation_s(_window([50.0] * 9)) == 540.0
    assert waste.low_utilisation_s(_window([50.0] * 10)) >= waste.LOW_UTIL_S
    # one sample at 70 % in the middle restarts the count: 4 samples after it, 240 s
    assert waste.low_utilisation_s(_window([50.0] * 5 + [70.0] + [50.0] * 4)) == 240.0
    # 65 % itself is not under 65 %
    assert waste.low_utilisation_s(_window([65.0] * 12)) == 0.0


def test_idle_needs_every_reading_at_zero():
    # mean 0 for 6 samples (360 s) but one GPU spiked to 3 % in the fourth: last 2 = 120 s
    w = _window([0.0] * 6, max_util=[0, 0, 0, 3, 0, 0])
    assert waste.idle_s(w) == 120.0
    assert waste.idle_s(_window([0.0] * 5)) == 300.0


def test_vram_underused_reports_the_most_used_over_the_run():
    # 16 GiB offer; used 9 (over half), then 5, 7, 6 GiB for 3 × 60 s
    seconds, used, total = waste.vram_underused(_window([90.0] * 4, used=[9., 5., 7., 6.]))
    assert (seconds, used, total) == (180.0, 7.0, 16.0)
    # exactly half is not under half
    assert waste.vram_underused(_window([90.0], used=[8.0]))[0] == 0.0


def test_vram_needed_adds_a_fifth_and_one_gib():
    assert waste.vram_needed_gib(10.0) == 13.0


def test_recent_rate_over_the_last_five_minutes():
    # points every 100 s; 10 units/s until 600 s, then 5 units/s
    at = np.arange(0.0, 1000.0, 100.0)
    done = np.where(at <= 600, at * 10, 6000 + (at - 600) * 5)
    # latest at 900; the last point at or before 600 is 600 (6000 units): 1500 units / 300 s
    assert waste.recent_rate(at, done) == (5.0, 600.0)
    # less than recent_s of points: unknown
    rate, start = waste.recent_rate(at[:3], done[:3])
    assert math.isnan(rate) and math.isnan(start)


def test_step_time_ratio_is_baseline_over_recent_rate():
    assert waste.step_time_ratio(5.0, 6.5) == 1.3       # 30 % slower: above 1.2
    assert waste.step_time_ratio(10.0, 11.0) == 1.1     # within
    assert waste.step_time_ratio(0.0, 10.0) == math.inf
    assert math.isnan(waste.step_time_ratio(5.0, float("nan")))
    assert math.isnan(waste.step_time_ratio(float("nan"), 5.0))


def test_right_size_picks_the_cheapest_to_finish_offer_with_enough_memory():
    vram = np.array([80.0, 24.0, 16.0, 48.0])
    cost = np.array([30.0, 12.0, 8.0, 15.0])   # the 16 GiB offer is cheapest but too small
    eligible = np.array([True, True, True, True])
    assert waste.right_size(20.0, vram, cost, eligible, current=0) == 1
    # the 24 GiB offer is not eligible: the 48 GiB one at $15 beats the current $30
    assert waste.right_size(20.0, vram, cost, np.array([True, False, True, True]), 0) == 3


def test_right_size_suggests_nothing_not_cheaper_than_the_current_offer():
    vram = np.array([24.0, 48.0])
    cost = np.array([10.0, 12.0])
    assert waste.right_size(20.0, vram, cost, np.array([True, True]), current=0) == NO_OFFER
    # unknown costs are never suggested
    assert waste.right_size(20.0, vram, np.array([10.0, np.nan]), np.array([True, True]),
                            current=NO_OFFER) == 0
    assert waste.right_size(20.0, vram[:0], cost[:0], np.zeros(0, bool), NO_OFFER) == NO_OFFER
