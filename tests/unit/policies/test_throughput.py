"""The per-job throughput model, with answers worked out by hand from the module's formulas:
prior ε sd 0.25 (benchmark row), δ prior sd 0.25 (0.15 with declarations), measurement noise
0.2 × √(0.1 h / hours)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from core.models.specs import JobSpec
from policies.gpu_table import gpu_spec
from policies.throughput import (
    REFERENCE_GPU,
    Measurement,
    WorkModel,
    compare_text,
    cost_per_1k,
    estimate_rates,
    measurement_rel_sd,
    reference_hours,
    reference_rate,
    scaling,
    spec_reference_hours,
    unknown_gpu_warnings,
)

V100_T = gpu_spec("V100").transformer        # 0.4008
RTX4090_T = gpu_spec("RTX4090").transformer  # 0.7400


def test_scaling():
    assert scaling(1, 0.9) == 1.0
    assert scaling(2, 0.9) == pytest.approx(1.9)
    assert scaling(8, 0.5) == pytest.approx(4.5)      # 1 + 7 × 0.5
    assert scaling(0, 0.9) == 1.0                     # a CPU offer
    assert np.allclose(scaling(np.array([1, 2, 4]), 0.8), [1.0, 1.8, 3.4])


def test_two_gpu_offer_scales_with_the_efficiency():
    model = WorkModel(declared={"rtx4090": 1000.0 * 3600}, scaling_efficiency=0.8)
    est = estimate_rates(model, ["RTX4090", "RTX4090"], [1, 2], [])
    # 3.6e6 units/h per GPU; two GPUs at e = 0.8: 3.6e6 × 1.8 = 6.48e6.
    assert est.units_per_h == pytest.approx([3.6e6, 6.48e6])
    assert est.source == ("declared", "declared")


def test_a_two_gpu_measurement_is_converted_to_one_gpu():
    # 2 × V100 measured at 1,900 units/h for 1,000 h; e = 0.9: 1,900 / 1.9 = 1,000 per GPU,
    # so 1 × V100 ≈ 1,000 and 4 × V100 ≈ 1,000 × 3.7 = 3,700.
    est = estimate_rates(WorkModel(), ["V100", "V100"], [1, 4],
                         [Measurement("V100", 2, 1900.0, 1000.0)])
    assert est.units_per_h == pytest.approx([1000.0, 3700.0], rel=1e-3)
    assert est.source == ("measured", "measured")


def test_without_evidence_rates_are_reference_hours_per_hour():
    est = estimate_rates(WorkModel(workload="transformer"),
                         [REFERENCE_GPU, "V100", "RTX 4090"], [1, 1, 1], [])
    assert est.units_per_h == pytest.approx([1.0, V100_T, RTX4090_T])
    assert est.source == ("prior",) * 3
    # √(0.25² + 0.25²) = 0.3536 for benchmark rows.
    assert est.rel_sd == pytest.approx([0.3536] * 3, abs=1e-4)


def test_measured_throughput_overrides_a_wrong_prior_and_recalibrates_the_others():
    # V100 measured at half its prior for 10 h (noise sd 0.2 × √0.01 = 0.02, var 0.0004).
    measured = 0.5 * V100_T
    est = estimate_rates(WorkModel(workload="transformer"),
                         ["V100", "RTX4090", REFERENCE_GPU], [1, 1, 1],
                         [Measurement("V100", 1, measured, 10.0)])
    # δ: r = ln 0.5 = -0.69315 with variance 0.0625 + 0.0004 = 0.0629; precision
    # 1/0.0625 + 1/0.0629 = 16 + 15.898 = 31.898; δ = -0.69315 × 15.898 / 31.898 = -0.34547,
    # e^δ = 0.70794: the 4090 and the reference move by that factor.
    assert est.units_per_h[1] == pytest.approx(RTX4090_T * 0.70794, rel=1e-3)
    assert est.units_per_h[2] == pytest.approx(0.70794, rel=1e-3)
    # V100: its measurement, not pulled toward its prior.
    assert est.units_per_h[0] == pytest.approx(measured, rel=1e-12)
    assert est.source == ("measured", "prior", "prior")
    # sd: V100 the measurement's 0.02; the others √(0.0625 + 1/31.898) = 0.30635.
    assert est.rel_sd == pytest.approx([0.02, 0.30635, 0.30635], abs=1e-4)
    # Ranking changes: the V100's speed per reference GPU falls from 0.40 to 0.28, while the
    # 4090's (not measured) stays at its prior.
    speed = est.units_per_h / est.units_per_h[2]
    assert speed[0] == pytest.approx(measured / 0.70794, rel=1e-3)
    assert speed[1] == pytest.approx(RTX4090_T, rel=1e-6)


def test_declared_beats_the_prior_and_sets_the_units():
    model = WorkModel(workload="transformer", declared={"a100-80gb": 1000.0 * 3600})
    est = estimate_rates(model, ["A100-80GB", "RTX4090"], [1, 1], [])
    # The declaration holds for its model; the 4090 gets its relative in the job's units.
    assert est.units_per_h == pytest.approx([3.6e6, RTX4090_T * 3.6e6])
    assert est.source == ("declared", "prior")
    # Declared 0.15; the others √(0.25² + 0.15²) = 0.29155 (the declaration pins the scale).
    assert est.rel_sd == pytest.approx([0.15, 0.29155], abs=1e-4)


def test_declarations_of_two_models_and_of_one_the_table_lacks():
    # A100-80GB 3,600/h (c = ln 3600) and V100 2 × 0.4008 × 3,600/h (c = ln 7200): the others
    # take the geometric mean, 3600 × √2 = 5091.2 per reference-hour; the RTX3060 declaration
    # holds for the RTX3060 but does not set the scale.
    model = WorkModel(workload="transformer",
                      declared={"a100-80gb": 3600.0, "v100": 2 * V100_T * 3600, "rtx3060": 1e9})
    est = estimate_rates(model, ["RTX4090", "RTX3060", "V100"], [1, 1, 1], [])
    assert est.units_per_h == pytest.approx([RTX4090_T * 5091.17, 1e9, 2 * V100_T * 3600],
                                            rel=1e-5)
    assert est.source == ("prior", "declared", "declared")


def test_measurement_beats_a_declaration():
    model = WorkModel(declared={"v100": 2000.0})
    # Measured 1,000 over 10 h: the measurement replaces the declaration (sd 0.2 × √0.01).
    est = estimate_rates(model, ["V100"], [1], [Measurement("v100", 1, 1000.0, 10.0)])
    assert est.units_per_h[0] == pytest.approx(1000.0, rel=1e-12)
    assert est.source == ("measured",)
    assert est.rel_sd[0] == pytest.approx(0.02)


def test_a_declaration_30x_too_fast_shows_the_measured_rate():
    # Declared 500 samples/s on a T4 (1.8M/h); measured 57.4k/h over 0.1 h, then 1 h.
    model = WorkModel(workload="transformer", declared={"t4": 500.0 * 3600})
    for hours in (0.1, 1.0):
        est = estimate_rates(model, ["T4"], [1], [Measurement("T4", 1, 57_400.0, hours)])
        assert est.units_per_h[0] == pytest.approx(57_400.0, rel=1e-12)
        assert est.source == ("measured",)
        assert est.rel_sd[0] == pytest.approx(measurement_rel_sd(hours))


def test_attempts_on_one_model_are_weighted_by_their_hours():
    # 1 h at 100/h and 3 h at 200/h on 1 GPU, 1 h at 360/h on 2 GPUs (e 0.8: 1.8 GPUs, 200/h
    # each): geometric, hours-weighted per GPU: exp((ln 100 + 4 ln 200) / 5) = 174.11;
    # evidence 5 h: sd 0.2 × √(0.1 / 5) = 0.028284.
    model = WorkModel(scaling_efficiency=0.8)
    est = estimate_rates(model, ["V100", "V100"], [1, 2],
                         [Measurement("V100", 1, 100.0, 1.0), Measurement("V100", 1, 200.0, 3.0),
                          Measurement("V100", 2, 360.0, 1.0)])
    per_gpu = math.exp((math.log(100) + 4 * math.log(200)) / 5)
    assert per_gpu == pytest.approx(174.11, rel=1e-4)
    assert est.units_per_h == pytest.approx([per_gpu, per_gpu * 1.8], rel=1e-12)
    assert est.rel_sd == pytest.approx([0.028284, 0.028284], abs=1e-6)


def test_from_spec():
    spec = JobSpec.model_validate({
        "name": "bert", "command": "python train.py", "reference_gpu": "V100",
        "work": {"unit": "samples", "total": 1e8, "workload": "transformer",
                 "throughput": {"A100-80GB": 1000}, "scaling_efficiency": 0.8}})
    model = WorkModel.from_spec(spec)
    assert model == WorkModel(workload="transformer", declared={"a100-80gb": 3.6e6},
                              scaling_efficiency=0.8, reference_gpu="V100")
    bare = WorkModel.from_spec(JobSpec.model_validate({"name": "x", "command": "true"}))
    assert bare == WorkModel()


def test_rel_sd_shrinks_as_evidence_grows():
    assert measurement_rel_sd(0.1) == pytest.approx(0.2)
    assert measurement_rel_sd(10.0) == pytest.approx(0.02)
    sds = []
    for hours in (0.1, 1.0, 10.0):
        est = estimate_rates(WorkModel(workload="transformer"), ["V100", "RTX4090"], [1, 1],
                             [Measurement("V100", 1, V100_T, hours)])
        assert est.units_per_h[0] == pytest.approx(V100_T)      # measured = prior: no change
        sds.append(est.rel_sd)
    # V100: the measurement's noise: 0.2, 0.063246, 0.02.
    assert [s[0] for s in sds] == pytest.approx([0.2, 0.063246, 0.02], abs=1e-5)
    # 4090: √(0.0625 + 1/(16 + 1/(0.0625 + noise²))) → 0.31832, ..., 0.30635.
    assert sds[0][1] == pytest.approx(0.31832, abs=1e-4)
    assert sds[2][1] == pytest.approx(0.30635, abs=1e-4)
    assert sds[0][1] > sds[1][1] > sds[2][1]


def test_unknown_gpu_model_gets_the_lowest_relative_and_a_large_sd():
    est = estimate_rates(WorkModel(workload="transformer"), ["RTX3060", ""], [1, 0], [])
    lowest = gpu_spec("M60").transformer
    assert est.units_per_h == pytest.approx([lowest, lowest])
    assert est.source == ("prior", "prior")
    assert est.rel_sd == pytest.approx([math.hypot(0.25, 0.97)] * 2)
    # Once measured, it is known like any other.
    est = estimate_rates(WorkModel(), ["RTX3060"], [1], [Measurement("RTX 3060", 1, 0.3, 100)])
    assert est.units_per_h[0] == pytest.approx(0.3, rel=1e-3) and est.source == ("measured",)


def test_the_issue_arithmetic():
    # Lambda BERT-large relatives: a 4090 at $0.30/h does an A100-hour of work for
    # 0.30 / 0.6118 = $0.49, a V100 at $0.92/h for 0.92 / 0.375 = $2.45, the A100 $1.50.
    est = estimate_rates(WorkModel(workload="bert_large"),
                         ["RTX 4090", "V100", "A100-80GB"], [1, 1, 1], [])
    prices = np.array([0.30, 0.92, 1.50])
    assert prices / est.units_per_h == pytest.approx([0.4904, 2.4533, 1.50], abs=1e-4)
    # A job declaring 0.5 samples/s on the A100: 1,800/h; the 4090 1,101.24/h and the V100
    # 675/h: $0.30 / 1.10124 = $0.27 and $0.92 / 0.675 = $1.36 per 1k samples.
    est = estimate_rates(WorkModel(workload="bert_large", declared={"a100-80gb": 1800.0}),
                         ["RTX4090", "V100"], [1, 1], [])
    assert est.units_per_h == pytest.approx([1101.24, 675.0])
    costs = cost_per_1k(prices[:2], est.units_per_h)
    assert costs == pytest.approx([0.27242, 1.36296], abs=1e-4)
    text = compare_text("RTX4090", costs[0], est.units_per_h[0], 0.30,
                        "V100", costs[1], est.units_per_h[1], 0.92, "samples")
    # 1101.24 / 675 = 1.63× the speed; 0.30 / 0.92 = 0.326× the price.
    assert text == "RTX4090: $0.27 per 1k samples vs V100 $1.36: 1.6× faster at 0.33× the price"


def test_compare_text_and_cost_per_1k_edges():
    assert compare_text("V100", 1.36, 675, 0.92, "RTX4090", 0.27, 1101.24, 0.30, "tokens") == (
        "V100: $1.36 per 1k tokens vs RTX4090 $0.27: 0.61× the speed at 3.1× the price")
    assert compare_text("A", 0.004, 100, 1, "B", 0.0041, 101, 1, "steps") == (
        "A: $0.0040 per 1k steps vs B $0.0041: as fast at 1× the price")
    assert compare_text("A", float("nan"), 0, 1, "B", 1.0, 1, 1, "samples") == (
        "A: $? per 1k samples vs B $1.00")
    assert cost_per_1k(0.5, 250.0) == pytest.approx(2.0)   # 0.5 × 1000 / 250
    assert np.isnan(cost_per_1k(np.array([1.0, 1.0]), np.array([0.0, np.inf]))).all()


def test_reference_rate():
    model = WorkModel(workload="transformer", reference_gpu="V100")
    assert reference_rate(model, []) == (pytest.approx(V100_T), "prior")
    rate, source = reference_rate(model, [Measurement("V100", 1, 123.0, 1000.0)])
    assert rate == pytest.approx(123.0, rel=1e-3) and source == "measured"
    assert reference_rate(WorkModel(), []) == (1.0, "prior")


def test_spellings_and_bad_measurements():
    # A measurement under one spelling applies to every spelling of that model; measurements
    # with no hours or a non-finite rate are ignored.
    est = estimate_rates(WorkModel(), ["RTX 4090", "rtx_4090", "NVIDIA GeForce RTX 4090"],
                         [1, 1, 1], [Measurement("RTX4090", 1, 5.0, 1000.0),
                                     Measurement("RTX4090", 1, 99.0, 0.0),
                                     Measurement("RTX4090", 1, float("nan"), 5.0)])
    assert est.units_per_h == pytest.approx([5.0] * 3, rel=1e-3)
    assert est.source == ("measured",) * 3


def test_shapes():
    est = estimate_rates(WorkModel(), [], [], [])
    assert est.units_per_h.shape == (0,) and est.rel_sd.shape == (0,) and est.source == ()
    with pytest.raises(ValueError, match="gpu_counts"):
        estimate_rates(WorkModel(), ["V100"], [1, 2], [])
    models = ["T4", "A10G", "L4", "V100", "A100", "RTX4090", "RTX3060"] * 150
    est = estimate_rates(WorkModel(workload="cnn"), models, [1, 4] * 525, [])
    assert est.units_per_h.shape == (1050,)
    assert np.isfinite(est.units_per_h).all() and (est.units_per_h > 0).all()


def test_reference_hours_of_a_spec():
    t4 = gpu_spec("T4").transformer            # 0.1506 per A100-80GB
    hours_on_t4 = JobSpec.model_validate({
        "name": "x", "command": "true", "expected_hours": 2, "reference_gpu": "T4",
        "work": {"unit": "steps", "workload": "transformer"}})
    # 2 h on the job's own reference are 2 reference-hours; on one A100-80GB 2 × 0.1506.
    assert spec_reference_hours(hours_on_t4) == pytest.approx(2.0)
    assert spec_reference_hours(hours_on_t4, REFERENCE_GPU) == pytest.approx(2 * t4)
    # 3.6M samples at a declared 100/s on a T4 (360k/h): 10 T4-hours, 10 × 0.1506 A100-hours.
    total = JobSpec.model_validate({
        "name": "x", "command": "true", "work": {
            "unit": "samples", "total": 3.6e6, "workload": "transformer",
            "throughput": {"T4": 100}}})
    assert spec_reference_hours(total, "T4") == pytest.approx(10.0)
    assert spec_reference_hours(total) == pytest.approx(10 * t4)
    # A total without any rate in its units says nothing of hours; nothing at all: unknown.
    assert spec_reference_hours(JobSpec.model_validate({
        "name": "x", "command": "true", "expected_hours": 3,
        "work": {"unit": "samples", "total": 1e6}})) == pytest.approx(3.0)
    assert spec_reference_hours(JobSpec(name="x", command="true")) is None
    # Measured units: the total ÷ the measured reference rate.
    model = WorkModel(reference_gpu="T4")
    assert reference_hours(model, 1e6, None, [Measurement("T4", 1, 2e5, 1.0)]) \
        == pytest.approx(5.0)


def test_gpu_models_the_table_lacks_are_warned_with_the_closest_names():
    spec = JobSpec.model_validate({
        "name": "x", "command": "true", "reference_gpu": "V1000",
        "work": {"throughput": {"FooGPU": 10, "rtx 4090": 3}}})
    warnings = unknown_gpu_warnings(spec)
    assert len(warnings) == 2
    assert warnings[0].startswith("reference_gpu: 'V1000' is not in the GPU table (closest: "
                                  "V100, P100, H100); its speed is the conservative prior")
    assert warnings[1].startswith("work.throughput: 'FooGPU' is not in the GPU table (no close "
                                  "name); its declared rate is used")
    assert "conservative prior" in warnings[1]
    # Every spelling the table knows passes; a spec naming no GPU has nothing to warn about.
    assert unknown_gpu_warnings(JobSpec.model_validate({
        "name": "x", "command": "true", "reference_gpu": "Tesla V100-SXM2-16GB",
        "work": {"throughput": {"A100 80GB": 1}}})) == []
    assert unknown_gpu_warnings(JobSpec(name="x", command="true")) == []
