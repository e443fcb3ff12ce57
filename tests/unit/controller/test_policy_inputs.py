"""Plain-data parts of the controller's policy-v2 wiring."""

import numpy as np

from scheduler.controller.policy_inputs import sample_matrix


def test_sample_matrix_pads_short_rings_with_their_oldest_sample():
    m = sample_matrix(["0101", "11", None])
    assert m.shape == (3, 4) and m.dtype == bool
    assert m[0].tolist() == [False, True, False, True]
    assert m[1].tolist() == [True, True, True, True]
    assert m[2].tolist() == [True] * 4  # never sampled: listed now, so available


def test_sample_matrix_without_any_samples_is_none():
    assert sample_matrix([None, None]) is None
    assert sample_matrix([]) is None


def test_sample_matrix_zero_padding_keeps_an_outage():
    assert np.array_equal(sample_matrix(["0", "101"]), [[False] * 3, [True, False, True]])
