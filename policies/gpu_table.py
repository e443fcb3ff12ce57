"""The package's GPU table: datasheet numbers and a training-speed prior per GPU model.

One :class:`GpuRow` per GPU model (and form factor) the providers list. Every number was copied
from the reference data in ``shared/data/gpus`` (collected from public sources, read
2026-12-01) by a one-off script; nothing is read at run time.

- **Specs** (``memory_gib``, ``bandwidth_gbs`` GB/s, ``fp16_tflops`` dense FP16/BF16 tensor
  with FP32 accumulate, ``fp32_tflops`` non-tensor FP32) are the vendor datasheet figures of
  ``gpu_specs.csv``; ``None`` where no source gave one. Each row's ``source`` names the source
  ids of that file's provenance table (EPOCH = Epoch AI "Machine Learning Hardware", WZ =
  winston-zhang-orz/gpu-specs, FSDL = the FSDL cloud-GPU table, MULLET = NVIDIA's L40/L40S
  datasheet table, ...).
- **Relative training throughput** per workload (``transformer``, ``cnn``, ``generic``): one GPU
  of the model ÷ one A100-80GB SXM4, from ``gpu_training_throughput.csv``, **Lambda PyTorch
  suites, fp16 AMP, 1 GPU** (lambdal/deeplearning-benchmark, NVIDIA DeepLearningExamples
  models; Lambda's batch grows with GPU memory, so the speeds include that effect):

  - the rows of the merged table (``lambda_pytorch_v1v2``, @aa5addb6) plus the Transformer-XL
    rows of the same v1 harness (``lambda_pytorch_v1``); for a model absent there (A100 SXM4
    40 GB, A40, V100-32GB, RTX A4000/A5000, Quadro RTX 6000/5000) the 2022 table
    (``lambda_pytorch_2022``, @67a9bb51). Several rows of one benchmark: their median.
  - ``transformer`` = median ``relative_to_ref`` of BERT-base SQuAD, BERT-large SQuAD,
    Transformer-XL base and large (WikiText-103); ``cnn`` = median of ResNet-50 (ImageNet),
    SSD300 (COCO) and Mask R-CNN (COCO, 2022 table only); ``generic`` = √(transformer × cnn),
    both families weighted alike. GNMT, NCF, Tacotron2 and WaveGlow are left out.
  - ``benchmarks`` keeps the per-benchmark relatives behind them (e.g. the RTX 4090 trains
    BERT-large at 0.6118 of an A100-80GB and a V100 at 0.375; its transformer median is 0.74
    because it does better on BERT-base and Transformer-XL).

- **Models without such a row** (``basis = "formula"``) get their relatives from their specs,
  a power law in FP32 TFLOPS ``F`` and memory bandwidth ``B`` relative to the A100-80GB SXM4
  (19.49 TFLOPS, 2,039 GB/s)::

      relative = (F / 19.49) ** a × (B / 2039) ** b

  a log-linear blend of the compute and the memory roof, fitted by least squares on the log of
  the 20 benchmarked rows that have both specs (no intercept, so the reference stays 1.0):

  ============  =====  =====  ==========================  =========================
  workload        a      b    RMS error (log, fit rows)   worst row
  ============  =====  =====  ==========================  =========================
  transformer   0.170  0.942  0.16 (×1.17)                0.29 (×1.34, V100-32GB)
  cnn           0.111  0.696  0.11 (×1.11)                0.32 (×1.37, B200)
  generic       0.141  0.819  0.12 (×1.12)                0.28 (×1.33, B200)
  ============  =====  =====  ==========================  =========================

  (Dense tensor TFLOPS would be the natural compute term, but no source gives it for 6 of the 20
  rows; fitted on the 14 that have it, the error was no smaller: RMS 0.16, 0.13, 0.13.) Without
  an FP32 figure (H100 NVL) the bandwidth term alone is used, fitted the same way (b = 0.939,
  0.694, 0.816; RMS 0.21, 0.14, 0.16). Checked against benchmarks that are not in the fit:
  MLPerf v3.1 ResNet-50 (8 GPUs, × A100-80GB PCIe's 0.965) puts L40S at 0.67 and L40 at 0.61
  (formula 0.65, 0.65); Gavel's fp32 Transformer puts K80 at 0.24 and P100 at 0.62 of a V100
  (formula 0.26 and 0.84); MLPerf v3.1 ResNet-50 at 2 GPUs puts the A10G at 0.28 (formula 0.45:
  the A10G's tensor rate is below the A10's, which FP32 cannot see). AMD rows (MI250X, MI300X)
  extrapolate an NVIDIA fit and are likely optimistic. The estimates' ``rel_sd`` says how much
  to trust a row (:data:`PRIOR_REL_SD`).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache

WORKLOADS = ("transformer", "cnn", "generic")

BENCHMARK_FAMILY = {
    "bert_base": "transformer", "bert_large": "transformer",
    "transformer_xl_base": "transformer", "transformer_xl_large": "transformer",
    "resnet50": "cnn", "ssd300": "cnn", "maskrcnn": "cnn",
}
"""The workload family of each benchmark name :attr:`GpuRow.benchmarks` may hold."""

PRIOR_REL_SD = {"benchmark": 0.35, "formula": 0.5}
"""Relative standard deviation (of the log-normal prior) of a row's relatives for a job the
table knows nothing else about: the benchmarks of one family spread by about ±25 % around their
median on one GPU model, jobs differ from the benchmarks, and the formula adds its own error."""

FIT_EXPONENTS = {"transformer": (0.170, 0.942), "cnn": (0.111, 0.696), "generic": (0.141, 0.819)}
"""(a, b) of ``(F / 19.49) ** a × (B / 2039) ** b`` per workload (see the module docstring)."""

FIT_BANDWIDTH_ONLY = {"transformer": 0.939, "cnn": 0.694, "generic": 0.816}
"""b of ``(B / 2039) ** b`` per workload, for rows without an FP32 figure."""

_REF_FP32_TFLOPS = 19.49
_REF_BANDWIDTH_GBS = 2039.0


@dataclass(frozen=True)
class GpuRow:
    """One GPU model (one form factor).

    ``name``: the canonical name (SkyPilot ``AcceleratorName`` spelling; non-default form
    factors get a suffix, e.g. ``A100-80GB-PCIE``). ``memory_gib``: GiB per GPU;
    ``bandwidth_gbs``: GB/s; ``fp16_tflops``: dense FP16/BF16 tensor TFLOPS (FP32 accumulate);
    ``fp32_tflops``: non-tensor FP32 TFLOPS (each ``None`` without a source).
    ``transformer``/``cnn``/``generic``: training throughput of one GPU ÷ one A100-80GB SXM4.
    ``basis``: ``benchmark`` (Lambda rows) or ``formula`` (from the specs).
    ``benchmarks``: per-benchmark relatives behind a ``benchmark`` row.
    """

    name: str
    variant: str
    vendor: str
    architecture: str
    memory_gib: float
    bandwidth_gbs: float | None
    fp16_tflops: float | None
    fp32_tflops: float | None
    transformer: float
    cnn: float
    generic: float
    basis: str
    benchmarks: Mapping[str, float] = field(default_factory=dict)
    source: str = ""

    def relative(self, workload: str) -> float:
        """Relative throughput for ``workload``: ``transformer`` | ``cnn`` | ``generic``, or a
        benchmark of :data:`BENCHMARK_FAMILY` (e.g. ``bert_large``; a row without it gives
        that benchmark's family). Any other name gives ``generic``."""
        if workload in WORKLOADS:
            return float(getattr(self, workload))
        if workload in self.benchmarks:
            return float(self.benchmarks[workload])
        return float(getattr(self, BENCHMARK_FAMILY.get(workload, "generic")))


def spec_relative(fp32_tflops: float | None, bandwidth_gbs: float, workload: str) -> float:
    """The fitted formula of the module docstring: relative throughput of a GPU with these
    specs (``workload`` one of :data:`WORKLOADS`)."""
    if fp32_tflops is None:
        return (bandwidth_gbs / _REF_BANDWIDTH_GBS) ** FIT_BANDWIDTH_ONLY[workload]
    a, b = FIT_EXPONENTS[workload]
    return (fp32_tflops / _REF_FP32_TFLOPS) ** a * (bandwidth_gbs / _REF_BANDWIDTH_GBS) ** b


ROWS: tuple[GpuRow, ...] = (
    GpuRow("K80", "GK210 (one of 2 GPUs per board)", "NVIDIA", "Kepler", 12.0, 240.6, None, 4.113,
           0.1025, 0.1901, 0.1395, "formula", {},
           ('specs FSDL/FPS_K80; '
            'relatives: spec formula')),
    GpuRow("M60", "GM204 (one of 2 GPUs per board)", "NVIDIA", "Maxwell 2.0", 8.0, 160.4, None, 4.825,
           0.0719, 0.1459, 0.1024, "formula", {},
           ('specs FPS_M60; '
            'relatives: spec formula')),
    GpuRow("P4", "PCIe", "NVIDIA", "Pascal", 8.0, 192.3, None, 5.704,
           0.0878, 0.1687, 0.1216, "formula", {},
           ('specs FSDL/EPOCH; '
            'relatives: spec formula')),
    GpuRow("P40", "PCIe", "NVIDIA", "Pascal", 24.0, 347.1, None, 11.76,
           0.1731, 0.2757, 0.2184, "formula", {},
           ('specs ALLDB_P40/EPOCH; '
            'relatives: spec formula')),
    GpuRow("P100", "PCIe-16GB", "NVIDIA", "Pascal", 16.0, 732.0, None, 9.3,
           0.3359, 0.4515, 0.3893, "formula", {},
           ('specs FSDL/EPOCH; '
            'relatives: spec formula')),
    GpuRow("V100", "SXM2-16GB", "NVIDIA", "Volta", 16.0, 897.0, 125.0, 15.67,
           0.4008, 0.5132, 0.4536, "benchmark", {"bert_base": 0.4266, "bert_large": 0.375, "resnet50": 0.5265, "ssd300": 0.5, "transformer_xl_base": 0.4293, "transformer_xl_large": 0.3388},
           ('specs FSDL/EPOCH/MLPERF_V07_DGX1; '
            "lambda@aa5addb6/pytorch/csv_v1_v2/pytorch-train-throughput-fp16.csv row 'LambdaCloud 1x V100 16GB'; "
            "lambda@aa5addb6/pytorch/pytorch-train-throughput-fp16.csv row 'LambdaCloud V100 16GB'")),
    GpuRow("V100-PCIE", "PCIe-16GB", "NVIDIA", "Volta", 16.0, 897.0, 112.0, 14.13,
           0.4368, 0.5449, 0.4878, "formula", {},
           ('specs FSDL/EPOCH; '
            'relatives: spec formula')),
    GpuRow("V100-32GB", "SXM2-32GB", "NVIDIA", "Volta", 32.0, 898.0, 125.0, 15.67,
           0.3328, 0.5385, 0.4234, "benchmark", {"bert_base": 0.3957, "bert_large": 0.3984, "maskrcnn": 0.5385, "resnet50": 0.5974, "ssd300": 0.5333, "transformer_xl_base": 0.27, "transformer_xl_large": 0.2391},
           ('specs FSDL/EPOCH; '
            "lambda@67a9bb51/pytorch/pytorch-train-throughput-fp16.csv row 'V100 32GB'")),
    GpuRow("T4", "PCIe", "NVIDIA", "Turing", 16.0, 320.0, 65.13, 8.141,
           0.1506, 0.2501, 0.194, "formula", {},
           ('specs FSDL/EPOCH/MLCO2; '
            'relatives: spec formula')),
    GpuRow("A10", "PCIe", "NVIDIA", "Ampere", 24.0, 600.2, 125.0, 31.24,
           0.309, 0.3916, 0.3479, "benchmark", {"bert_base": 0.3047, "bert_large": 0.2763, "resnet50": 0.4033, "ssd300": 0.3799, "transformer_xl_base": 0.378, "transformer_xl_large": 0.3133},
           ('specs FSDL/EPOCH/WZ; '
            "lambda@aa5addb6/pytorch/csv_v1_v2/pytorch-train-throughput-fp16.csv row 'LambdaCloud 1x A10'; "
            "lambda@aa5addb6/pytorch/pytorch-train-throughput-fp16.csv row 'LambdaCloud A10'")),
    GpuRow("A10G", "PCIe (AWS)", "NVIDIA", "Ampere", 24.0, 600.2, None, 31.5,
           0.3429, 0.4503, 0.393, "formula", {},
           ('specs FSDL/EPOCH; '
            'relatives: spec formula')),
    GpuRow("L4", "PCIe", "NVIDIA", "Lovelace", 24.0, 300.1, 121.0, 30.29,
           0.1773, 0.2767, 0.2215, "formula", {},
           ('specs FSDL/EPOCH; '
            'relatives: spec formula')),
    GpuRow("L40", "PCIe", "NVIDIA", "Ada Lovelace", 48.0, 864.0, 181.0, 90.52,
           0.5782, 0.6524, 0.6147, "formula", {},
           ('specs MULLET/EPOCH; '
            'relatives: spec formula')),
    GpuRow("L40S", "PCIe", "NVIDIA", "Ada Lovelace", 48.0, 864.0, 362.05, 91.6,
           0.5794, 0.6532, 0.6157, "formula", {},
           ('specs MULLET/ITC_L40S; '
            'relatives: spec formula')),
    GpuRow("A40", "PCIe", "NVIDIA", "Ampere", 48.0, 695.8, 149.7, 37.42,
           0.5043, 0.4711, 0.4874, "benchmark", {"bert_base": 0.4786, "bert_large": 0.4634, "maskrcnn": 0.5385, "resnet50": 0.4711, "ssd300": 0.419, "transformer_xl_base": 0.5701, "transformer_xl_large": 0.5299},
           ('specs FSDL/EPOCH/ECER_A40; '
            "lambda@67a9bb51/pytorch/pytorch-train-throughput-fp16.csv row 'RTX A40'")),
    GpuRow("A100", "SXM4-40GB", "NVIDIA", "Ampere", 40.0, 1560.0, 312.0, 19.49,
           0.8871, 0.8846, 0.8859, "benchmark", {"bert_base": 0.8957, "bert_large": 0.8699, "maskrcnn": 0.8846, "resnet50": 0.8737, "ssd300": 0.9619, "transformer_xl_base": 0.886, "transformer_xl_large": 0.8883},
           ('specs FSDL/EPOCH; '
            "lambda@67a9bb51/pytorch/pytorch-train-throughput-fp16.csv row 'A100 40GB SXM4'")),
    GpuRow("A100-PCIE", "PCIe-40GB", "NVIDIA", "Ampere", 40.0, 1555.0, 312.0, 19.5,
           0.8258, 0.8724, 0.8488, "benchmark", {"bert_base": 0.8307, "bert_large": 0.7697, "resnet50": 0.8824, "ssd300": 0.8624, "transformer_xl_base": 0.821, "transformer_xl_large": 0.8949},
           ('specs FSDL/WZ/EPOCH; '
            "lambda@aa5addb6/pytorch/csv_v1_v2/pytorch-train-throughput-fp16.csv row 'LambdaCloud 1x A100 40GB PCIe'; "
            "lambda@aa5addb6/pytorch/pytorch-train-throughput-fp16.csv row 'LambdaCloud A100 40GB PCIe'")),
    GpuRow("A100-80GB", "SXM4-80GB", "NVIDIA", "Ampere", 80.0, 2039.0, 312.0, 19.49,
           1.0, 1.0, 1.0, "benchmark", {"bert_base": 1.0, "bert_large": 1.0, "resnet50": 1.0, "ssd300": 1.0, "transformer_xl_base": 1.0, "transformer_xl_large": 1.0},
           ('specs FSDL/EPOCH/MLPERF_V10_DGXA100; '
            "lambda@aa5addb6/pytorch/csv_v1_v2/pytorch-train-throughput-fp16.csv row 'A100 80GB SXM4'; "
            "lambda@aa5addb6/pytorch/pytorch-train-throughput-fp16.csv row 'A100 80GB SXM4'")),
    GpuRow("A100-80GB-PCIE", "PCIe-80GB", "NVIDIA", "Ampere", 80.0, 1935.0, 312.0, 19.5,
           0.945, 0.9596, 0.9523, "benchmark", {"bert_base": 0.9368, "bert_large": 0.9211, "resnet50": 0.9652, "ssd300": 0.9541, "transformer_xl_base": 0.9657, "transformer_xl_large": 0.9533},
           ('specs FSDL/WZ/MLPERF_V20_A100PCIE; '
            "lambda@aa5addb6/pytorch/csv_v1_v2/pytorch-train-throughput-fp16.csv row 'A100 80GB PCIe'; "
            "lambda@aa5addb6/pytorch/pytorch-train-throughput-fp16.csv row 'A100 80GB PCIe'")),
    GpuRow("H100", "SXM5-80GB", "NVIDIA", "Hopper", 80.0, 3350.0, 989.4, 66.91,
           1.829, 1.8198, 1.8244, "benchmark", {"bert_base": 1.9368, "bert_large": 2.0461, "resnet50": 1.7642, "ssd300": 1.8755, "transformer_xl_base": 1.4453, "transformer_xl_large": 1.7212},
           ('specs FSDL/EPOCH; '
            "lambda@aa5addb6/pytorch/csv_v1_v2/pytorch-train-throughput-fp16.csv row 'LambdaCloud 1x H100 80GB SXM5'; "
            "lambda@aa5addb6/pytorch/pytorch-train-throughput-fp16.csv row 'H100 80GB SXM5'")),
    GpuRow("H100-PCIE", "PCIe-80GB", "NVIDIA", "Hopper", 80.0, 2040.0, 756.0, 51.22,
           1.275, 1.2872, 1.2811, "benchmark", {"bert_base": 1.3093, "bert_large": 1.3421, "resnet50": 1.2491, "ssd300": 1.3253, "transformer_xl_base": 1.0836, "transformer_xl_large": 1.2407},
           ('specs FSDL/EPOCH/HPCTECH_H100; '
            "lambda@aa5addb6/pytorch/csv_v1_v2/pytorch-train-throughput-fp16.csv row 'LambdaCloud 1x H100 80GB PCIe'; "
            "lambda@aa5addb6/pytorch/pytorch-train-throughput-fp16.csv row 'H100 80GB PCIe Gen5'; "
            "lambda@aa5addb6/pytorch/pytorch-train-throughput-fp16.csv row 'LambdaCloud H100 80GB PCIe Gen5'")),
    GpuRow("H100-NVL", "NVL-94GB", "NVIDIA", "Hopper", 94.0, 3938.0, None, None,
           1.8553, 1.579, 1.711, "formula", {},
           ('specs FSDL/EPOCH/MLPERF_V41_H100NVL; '
            'relatives: spec formula')),
    GpuRow("H200", "SXM-141GB", "NVIDIA", "Hopper", 141.0, 4800.0, 989.5, 66.91,
           2.2032, 2.0059, 2.1022, "benchmark", {"bert_base": 2.1038, "bert_large": 2.3026, "resnet50": 1.9463, "ssd300": 2.0655},
           ('specs ASTRO/EPOCH/MLPERF_V40_H200; '
            "lambda@aa5addb6/pytorch/pytorch-train-throughput-v2-fp16.csv row 'LambdaBM_ENG04_1xH200_140GB_SXM_h200_v2'")),
    GpuRow("GH200", "96GB HBM3", "NVIDIA", "Grace-Hopper", 96.0, None, 989.5, 66.91,
           1.9195, 1.8967, 1.908, "benchmark", {"bert_base": 1.8916, "bert_large": 1.9474, "resnet50": 1.7977, "ssd300": 1.9956},
           ('specs FSDL/CAT_LAMBDA_GH200/EPOCH; '
            "lambda@aa5addb6/pytorch/csv_v1_v2/pytorch-train-throughput-fp16.csv row 'LambdaCloud 1x GH200 96GB'")),
    GpuRow("B200", "SXM-180GB", "NVIDIA", "Blackwell", 180.0, 7700.0, 2250.0, 62.08,
           3.3062, 2.0912, 2.6294, "benchmark", {"bert_base": 3.1716, "bert_large": 3.4408, "resnet50": 1.9444, "ssd300": 2.238},
           ('specs ASTRO/EPOCH/MLPERF_B200; '
            "lambda@aa5addb6/pytorch/csv_v1_v2/pytorch-train-throughput-fp16.csv row 'LambdaCloud 1x B200 192GB SXM5'")),
    GpuRow("MI250X", "OAM", "AMD", "CDNA 2", 128.0, 3280.0, 383.0, 47.87,
           1.8232, 1.5382, 1.6754, "formula", {},
           ('specs ZEXRON_MI250X/EPOCH; '
            'relatives: spec formula')),
    GpuRow("MI300X", "OAM", "AMD", "CDNA 3", 192.0, 5300.0, 1307.4, 163.4,
           3.5301, 2.4617, 2.951, "formula", {},
           ('specs AIWIKI_MI300X/EPOCH/MLPERF_V50_MI300X; '
            'relatives: spec formula')),
    GpuRow("RTXA4000", "PCIe", "NVIDIA", "Ampere", 16.0, 448.0, None, 19.17,
           0.2542, 0.3261, 0.2879, "benchmark", {"bert_base": 0.2727, "bert_large": 0.2358, "maskrcnn": 0.3462, "resnet50": 0.3261, "ssd300": 0.2976, "transformer_xl_base": 0.2983, "transformer_xl_large": 0.1822},
           ('specs FSDL/EPOCH; '
            "lambda@67a9bb51/pytorch/pytorch-train-throughput-fp16.csv row 'RTX A4000'")),
    GpuRow("RTXA5000", "PCIe", "NVIDIA", "Ampere", 24.0, 768.0, None, 27.77,
           0.3875, 0.5072, 0.4433, "benchmark", {"bert_base": 0.393, "bert_large": 0.3659, "maskrcnn": 0.5769, "resnet50": 0.5072, "ssd300": 0.4738, "transformer_xl_base": 0.4909, "transformer_xl_large": 0.382},
           ('specs FSDL/EPOCH/MLPERF_V20_A5000; '
            "lambda@67a9bb51/pytorch/pytorch-train-throughput-fp16.csv row 'RTX A5000'")),
    GpuRow("RTXA6000", "PCIe", "NVIDIA", "Ampere", 48.0, 768.0, 154.8, 38.7,
           0.5258, 0.5734, 0.5491, "benchmark", {"bert_base": 0.447, "bert_large": 0.4474, "resnet50": 0.579, "ssd300": 0.5677, "transformer_xl_base": 0.6043, "transformer_xl_large": 0.6209},
           ('specs FSDL/EPOCH/LLMPERF_A6000/STH_A6000; '
            "lambda@aa5addb6/pytorch/csv_v1_v2/pytorch-train-throughput-fp16.csv row 'RTX A6000'; "
            "lambda@aa5addb6/pytorch/pytorch-train-throughput-fp16.csv row 'RTX A6000'")),
    GpuRow("RTX3090", "GeForce", "NVIDIA", "Ampere", 24.0, 936.0, None, 35.58,
           0.4124, 0.5437, 0.4735, "benchmark", {"bert_base": 0.3883, "bert_large": 0.3421, "resnet50": 0.5721, "ssd300": 0.5153, "transformer_xl_base": 0.5307, "transformer_xl_large": 0.4365},
           ('specs SPICE_3090/EPOCH; '
            "lambda@aa5addb6/pytorch/csv_v1_v2/pytorch-train-throughput-fp16.csv row 'RTX 3090'; "
            "lambda@aa5addb6/pytorch/pytorch-train-throughput-fp16.csv row 'RTX 3090'")),
    GpuRow("RTX4090", "GeForce", "NVIDIA", "Ada Lovelace", 24.0, 1008.0, 165.2, 82.6,
           0.74, 0.825, 0.7813, "benchmark", {"bert_base": 0.6704, "bert_large": 0.6118, "resnet50": 0.8224, "ssd300": 0.8275, "transformer_xl_base": 0.9385, "transformer_xl_large": 0.8097},
           ('specs GIGA_4090/EPOCH; '
            "lambda@aa5addb6/pytorch/csv_v1_v2/pytorch-train-throughput-fp16.csv row 'RTX 4090'; "
            "lambda@aa5addb6/pytorch/pytorch-train-throughput-fp16.csv row 'RTX 4090'")),
    GpuRow("RTX5090", "GeForce", "NVIDIA", "Blackwell", 32.0, 1792.0, None, 104.0,
           1.1771, 1.1008, 1.1392, "formula", {},
           ('specs SPHERON_5090/POCKET_5090; '
            'relatives: spec formula')),
    GpuRow("RTX6000-Ada", "PCIe", "NVIDIA", "Ada Lovelace", 48.0, 960.0, None, 91.1,
           0.7143, 0.7345, 0.7243, "benchmark", {"bert_base": 0.5756, "bert_large": 0.5197, "resnet50": 0.7244, "ssd300": 0.7445, "transformer_xl_base": 0.853, "transformer_xl_large": 0.8957},
           ('specs GRAFIK_6000ADA; '
            "lambda@aa5addb6/pytorch/csv_v1_v2/pytorch-train-throughput-fp16.csv row 'RTX 6000 Ada'; "
            "lambda@aa5addb6/pytorch/pytorch-train-throughput-fp16.csv row 'RTX 6000 Ada'")),
    GpuRow("RTX6000", "Quadro RTX 6000 (Turing)", "NVIDIA", "Turing", 24.0, 672.0, None, 16.31,
           0.2708, 0.4615, 0.3535, "benchmark", {"bert_base": 0.3235, "bert_large": 0.3171, "maskrcnn": 0.4615, "resnet50": 0.4654, "ssd300": 0.4262, "transformer_xl_base": 0.2246, "transformer_xl_large": 0.1903},
           ('specs FSDL/EPOCH; '
            "lambda@67a9bb51/pytorch/pytorch-train-throughput-fp16.csv row 'Quadro RTX 6000'")),
    GpuRow("RTX5000", "Quadro RTX 5000 (Turing)", "NVIDIA", "Turing", 16.0, 448.0, None, 11.15,
           0.181, 0.3167, 0.2395, "benchmark", {"bert_base": 0.2299, "bert_large": 0.2033, "maskrcnn": 0.3462, "resnet50": 0.3167, "ssd300": 0.3, "transformer_xl_base": 0.1588, "transformer_xl_large": 0.0535},
           ('specs FSDL/EPOCH; '
            "lambda@67a9bb51/pytorch/pytorch-train-throughput-fp16.csv row 'Quadro RTX 5000'")),
    GpuRow("RTX4000", "Quadro RTX 4000 (Turing)", "NVIDIA", "Turing", 8.0, 416.0, None, 7.119,
           0.1885, 0.2958, 0.236, "formula", {},
           ('specs FSDL/EPOCH; '
            'relatives: spec formula')),
)

_ALIASES = {
    # Other spellings the providers, catalogs and users use for the same GPU.
    "T4G": "T4", "H100-MEGA": "H100", "H100-HGX": "H100", "H100-SXM": "H100", "H100-SXM5": "H100",
    "A100-SXM4": "A100", "A100-40GB": "A100", "A100-SXM4-40GB": "A100",
    "A100-SXM4-80GB": "A100-80GB", "A100-80G": "A100-80GB", "A100-PCIE-40GB": "A100-PCIE",
    "A100-PCIE-80GB": "A100-80GB-PCIE", "A100-80GB-PCIE": "A100-80GB-PCIE",
    "V100-16GB": "V100", "V100-SXM2": "V100", "V100-SXM2-16GB": "V100",
    "V100-SXM2-32GB": "V100-32GB", "V100-PCIE-16GB": "V100-PCIE",
    "H100-PCIE-80GB": "H100-PCIE", "H100-NVL-94GB": "H100-NVL",
    "A4000": "RTXA4000", "A5000": "RTXA5000", "A6000": "RTXA6000",
    "RTX-A4000": "RTXA4000", "RTX-A5000": "RTXA5000", "RTX-A6000": "RTXA6000",
    "QUADRO-RTX6000": "RTX6000", "QUADRO-RTX5000": "RTX5000", "QUADRO-RTX4000": "RTX4000",
    "RTX6000ADA": "RTX6000-Ada", "RTX-6000-ADA": "RTX6000-Ada",
    "RTX-6000ADA": "RTX6000-Ada",
}

_PREFIXES = ("NVIDIA", "GEFORCE", "TESLA", "AMD", "INSTINCT", "RADEON")


def _key(name: str) -> str:
    """Case, spaces, ``_``, ``-`` and parentheses do not matter: ``RTX_4090``, ``rtx 4090``
    and ``RTX-4090`` all give ``RTX4090``."""
    return re.sub(r"[\s_\-()]+", "", name.upper())


_BY_KEY: dict[str, GpuRow] = {_key(row.name): row for row in ROWS}
_BY_KEY.update({_key(alias): _BY_KEY[_key(target)] for alias, target in _ALIASES.items()})


@lru_cache(maxsize=4096)
def gpu_spec(name: str) -> GpuRow | None:
    """The row of GPU model ``name``, or ``None`` when the table has none.

    Spellings are normalised: case, spaces, ``_``, ``-`` and a leading ``NVIDIA`` /
    ``GeForce`` / ``Tesla`` / ``Quadro`` (``NVIDIA GeForce RTX 4090``, ``RTX_4090``,
    ``Tesla_V100``). A trailing memory size picks the model with that memory (``A100 80GB``,
    ``A100-80G``, ``V100 (32 GB)`` → ``A100-80GB``, ``V100-32GB``; ``A100 40GB`` → ``A100``).
    A bare ``A100`` is the 40 GB SXM4, as in the AWS, GCP, Azure and Lambda catalogs.
    """
    key = _key(name)
    for _ in range(3):
        for prefix in _PREFIXES:
            if key.startswith(prefix) and len(key) > len(prefix):
                key = key[len(prefix):]
    if key.startswith("QUADRO") and len(key) > 6:
        key = key[6:]
    row = _BY_KEY.get(key)
    if row is not None:
        return row
    sized = re.fullmatch(r"(.*?)(\d+)(GB|G|GIB)", key)
    if sized:
        # "T416GB" is T4 with 16 GB: try the longest model name the digits allow first.
        head, digits = sized.group(1), sized.group(2)
        for cut in range(len(digits) - 1, -1, -1):
            base = _BY_KEY.get(head + digits[:cut])
            if base is None:
                continue
            gib, prefix = float(digits[cut:]), head + digits[:cut]
            if base.memory_gib == gib:
                return base
            for candidate in ROWS:
                if candidate.memory_gib == gib and _key(candidate.name).startswith(prefix):
                    return candidate
            return base
    return None


def closest_names(name: str, n: int = 3) -> list[str]:
    """Up to ``n`` table names closest to ``name`` (``difflib`` over the normalised spellings
    of :func:`gpu_spec`, aliases included), best first; ``[]`` when none is close."""
    keys = {_key(row.name): row.name for row in ROWS}
    keys.update({_key(alias): _BY_KEY[_key(alias)].name for alias in _ALIASES})
    out: list[str] = []
    for key in difflib.get_close_matches(_key(name or ""), list(keys), n=3 * n, cutoff=0.6):
        if keys[key] not in out:
            out.append(keys[key])
    return out[:n]


def lowest_relative(workload: str) -> float:
    """The smallest relative throughput of any row for ``workload``: the conservative prior of
    a GPU model the table lacks."""
    return min(row.relative(workload) for row in ROWS)
