"""The GPU table: its numbers against the reference data and by hand, and the name lookup."""

from __future__ import annotations

import csv
import math
import statistics

import pytest

from core.config import shared_data_dir
from policies.gpu_table import (
    PRIOR_REL_SD,
    ROWS,
    WORKLOADS,
    closest_names,
    gpu_spec,
    lowest_relative,
    spec_relative,
)
from policies.throughput import JOB_SCALE_SD, MODEL_REL_SD

GPUS_DIR = shared_data_dir() / "gpus"
needs_data = pytest.mark.skipif(not (GPUS_DIR / "gpu_specs.csv").is_file(),
                                reason=f"reference data absent: {GPUS_DIR} (set GA_DATA_DIR)")


def test_the_issue_numbers_come_out_of_the_table():
    # Lambda fp16, 1 GPU, BERT-large SQuAD relative to one A100-80GB SXM4.
    rtx4090, v100 = gpu_spec("RTX 4090"), gpu_spec("V100")
    assert rtx4090.benchmarks["bert_large"] == 0.6118
    assert v100.benchmarks["bert_large"] == 0.375
    # $/h ÷ relative = $ per A100-hour of work: 0.30 / 0.6118 = 0.4904; 0.92 / 0.375 = 2.4533.
    assert 0.30 / rtx4090.relative("bert_large") == pytest.approx(0.49, abs=0.005)
    assert 0.92 / v100.relative("bert_large") == pytest.approx(2.45, abs=0.005)


def test_family_relatives_worked_by_hand_for_the_rtx_4090():
    row = gpu_spec("RTX4090")
    # transformer: median of BERT-base 0.6704, BERT-large 0.6118, TXL-base 0.9385,
    # TXL-large 0.8097 = (0.6704 + 0.8097) / 2 = 0.74005.
    assert row.transformer == pytest.approx(0.74005, abs=1e-4)
    # cnn: median of ResNet-50 0.8224 and SSD300 0.8275 = 0.82495.
    assert row.cnn == pytest.approx(0.82495, abs=1e-4)
    # generic: √(0.74005 × 0.82495) = 0.78134.
    assert row.generic == pytest.approx(0.7813, abs=1e-4)
    assert row.basis == "benchmark" and row.relative("cnn") == row.cnn
    # A benchmark the row lacks gives its family; an unknown workload generic.
    assert row.relative("maskrcnn") == row.cnn
    assert row.relative("tacotron2") == row.generic
    assert gpu_spec("T4").relative("bert_large") == gpu_spec("T4").transformer


def test_the_reference_is_one_and_every_row_is_positive_and_sourced():
    ref = gpu_spec("A100-80GB")
    assert (ref.variant, ref.transformer, ref.cnn, ref.generic) == ("SXM4-80GB", 1.0, 1.0, 1.0)
    names = [row.name for row in ROWS]
    assert len(names) == len(set(names))
    for row in ROWS:
        for workload in WORKLOADS:
            value = row.relative(workload)
            assert math.isfinite(value) and value > 0, (row.name, workload)
        assert row.memory_gib > 0 and row.source.startswith("specs "), row.name
        assert row.basis in ("benchmark", "formula")
        assert bool(row.benchmarks) == (row.basis == "benchmark"), row.name


def test_benchmark_rows_are_the_medians_of_their_benchmarks():
    transformer = {"bert_base", "bert_large", "transformer_xl_base", "transformer_xl_large"}
    cnn = {"resnet50", "ssd300", "maskrcnn"}
    for row in ROWS:
        if row.basis != "benchmark":
            continue
        t = statistics.median(v for k, v in row.benchmarks.items() if k in transformer)
        c = statistics.median(v for k, v in row.benchmarks.items() if k in cnn)
        assert row.transformer == pytest.approx(t, abs=1e-4), row.name
        assert row.cnn == pytest.approx(c, abs=1e-4), row.name
        assert row.generic == pytest.approx(math.sqrt(t * c), abs=1e-4), row.name


def test_formula_rows_follow_the_formula():
    formula = [row for row in ROWS if row.basis == "formula"]
    assert {row.name for row in formula} >= {"T4", "L4", "A10G", "L40S", "K80", "P100"}
    for row in formula:
        for workload in WORKLOADS:
            expected = spec_relative(row.fp32_tflops, row.bandwidth_gbs, workload)
            assert row.relative(workload) == pytest.approx(expected, rel=2e-3), row.name


def test_spec_formula_worked_by_hand():
    # T4: 8.141 TFLOPS FP32, 320 GB/s; transformer a = 0.170, b = 0.942:
    # (8.141 / 19.49) ** 0.170 × (320 / 2039) ** 0.942 = 0.8620 × 0.1746 = 0.1505.
    assert spec_relative(8.141, 320, "transformer") == pytest.approx(0.1505, abs=5e-4)
    # The reference's own specs give 1.
    assert spec_relative(19.49, 2039, "cnn") == pytest.approx(1.0)
    # Bandwidth only: (3938 / 2039) ** 0.939 = 1.855.
    assert spec_relative(None, 3938, "transformer") == pytest.approx(1.855, abs=2e-3)


def test_lowest_relative_is_the_table_minimum():
    assert lowest_relative("transformer") == min(row.transformer for row in ROWS)
    assert lowest_relative("transformer") == gpu_spec("M60").transformer


@pytest.mark.parametrize("spelling,name", [
    ("RTX 4090", "RTX4090"), ("RTX_4090", "RTX4090"), ("rtx4090", "RTX4090"),
    ("NVIDIA GeForce RTX 4090", "RTX4090"), ("Tesla_V100", "V100"), ("NVIDIA V100", "V100"),
    ("A100", "A100"), ("A100 40GB", "A100"), ("A100_SXM4", "A100"),
    ("A100-80GB", "A100-80GB"), ("A100 80GB", "A100-80GB"), ("a100-80g", "A100-80GB"),
    ("A100 (80 GB)", "A100-80GB"), ("A100-SXM4-80GB", "A100-80GB"),
    ("A100_PCIE", "A100-PCIE"), ("A100-80GB-PCIe", "A100-80GB-PCIE"),
    ("V100 (32 GB)", "V100-32GB"), ("V100 (16 GB)", "V100"), ("T4 (16 GB)", "T4"),
    ("T4g", "T4"), ("H100-MEGA", "H100"), ("H100_SXM", "H100"), ("H100 NVL", "H100-NVL"),
    ("H100 PCIe (80GB)", "H100-PCIE"), ("RTX_6000Ada", "RTX6000-Ada"),
    ("RTX 6000 Ada", "RTX6000-Ada"), ("A6000", "RTXA6000"), ("RTX A6000 (48 GB)", "RTXA6000"),
    ("Quadro RTX 6000", "RTX6000"), ("L4 (24 GB)", "L4"), ("MI300X", "MI300X"),
])
def test_spellings(spelling, name):
    assert gpu_spec(spelling).name == name


@pytest.mark.parametrize("unknown", ["RTX3060", "A30", "MI25", "", "A100-PCIE-12GB-typo", "X"])
def test_models_without_a_row(unknown):
    assert gpu_spec(unknown) is None


def test_prior_sd_is_the_throughput_models_sum():
    assert PRIOR_REL_SD["benchmark"] == pytest.approx(
        math.hypot(JOB_SCALE_SD, MODEL_REL_SD["benchmark"]), abs=0.01)
    assert PRIOR_REL_SD["formula"] == pytest.approx(
        math.hypot(JOB_SCALE_SD, MODEL_REL_SD["formula"]), abs=0.01)


@needs_data
def test_specs_match_the_reference_data():
    rows = list(csv.DictReader((GPUS_DIR / "gpu_specs.csv").open()))
    by_variant = {(r["gpu_model"], r["variant"]): r for r in rows}
    assert len(by_variant) == len(ROWS)
    for row in ROWS:
        model = row.name.removesuffix("-PCIE").removesuffix("-NVL")
        data = by_variant[(model, row.variant)]
        for ours, column in ((row.memory_gib, "memory_gib"),
                             (row.bandwidth_gbs, "memory_bandwidth_gbs"),
                             (row.fp16_tflops, "fp16_bf16_dense_tflops"),
                             (row.fp32_tflops, "fp32_tflops")):
            theirs = float(data[column]) if data[column] else None
            assert ours == theirs, (row.name, column)


@needs_data
def test_benchmarks_match_the_reference_data():
    # Every per-benchmark relative of the table is the median of the Lambda fp16 1-GPU rows
    # of that model, benchmark and suite (merged table + v1 Transformer-XL, else 2022).
    rows = [r for r in csv.DictReader((GPUS_DIR / "gpu_training_throughput.csv").open())
            if r["suite"].startswith("lambda_pytorch") and r["precision"] == "fp16_amp"
            and r["gpus"] == "1" and r["relative_to_ref"]]
    checked = 0
    for row in ROWS:
        if row.basis != "benchmark":
            continue
        model = row.name.removesuffix("-PCIE")
        mine = [r for r in rows if (r["gpu_model"], r["variant"]) == (model, row.variant)]
        newer = [r for r in mine if r["suite"] != "lambda_pytorch_2022"]
        mine = newer or mine
        for bench, value in row.benchmarks.items():
            values = [float(r["relative_to_ref"]) for r in mine
                      if r["workload"].startswith(bench)]
            assert values and value == pytest.approx(statistics.median(values), abs=1e-4), \
                (row.name, bench)
            checked += 1
    assert checked > 100


def test_closest_names_of_a_typo():
    # "V1000" is one character from V100 (difflib ratio 8/9) and two from P100 and H100.
    assert closest_names("V1000") == ["V100", "P100", "H100"]
    assert closest_names("rtx 4900")[0] == "RTX4090"
    assert closest_names("FooGPU") == []
    assert closest_names("V1000", n=1) == ["V100"]
