"""A job's throughput on each offer: priors from the GPU table, declared rates, measured rates.

Rates are **units per market hour for the whole offer** (``units_per_h``); a job's units are its
``work.unit`` (samples, tokens or steps). Without any declaration or measurement the unit is the
*reference-hour*: one A100-80GB SXM4 does 1.0 per hour and every other GPU its table relative
(:mod:`policies.gpu_table`). Pure numpy, no I/O, deterministic.

The model, in log space (so every ratio is geometric and every sd is a relative sd):

- **Prior** of GPU model ``g`` (per GPU): ``log rate_g = log(relative_g(workload)) + c0``, where
  ``c0`` is the mean log ratio declared/relative over the declared models the table knows (all
  declared ones if it knows none; 0 without any: the unit is then the reference-hour). Its error is ``δ + ε_g``: ``δ`` is common to the job (how
  this job differs from the benchmarks; sd :data:`JOB_SCALE_SD`, or :data:`DECLARED_REL_SD`
  when declarations pin the scale) and ``ε_g`` is the table's error on that model
  (:data:`MODEL_REL_SD`: 0.25 for a benchmark row, 0.43 for a formula row, 0.97 for a model the
  table lacks, whose prior is the table's lowest relative, :func:`unknown_relative`).
  Without evidence a benchmark row's rel_sd is √(0.25² + 0.25²) ≈ 0.35, a formula row's 0.5,
  an unknown model's 1.0.
- **Declared** (spec ``work.throughput``, units/s on one GPU, ×3600 per hour): the rate of that
  model, rel_sd :data:`DECLARED_REL_SD`, until the model is measured (then its measurement
  replaces it).
- **Measured** (:class:`Measurement`, whole offer): converted to one GPU through
  :func:`scaling`; several of one model are combined hours-weighted (geometric). Measurement
  noise has rel_sd ``0.2 × √(0.1 h / hours)`` (:func:`measurement_rel_sd`): ±20 % after six
  minutes of evidence, ±6 % after an hour.
- **Calibration**: each measured model gives ``r_k = log(measured_k / predicted_k)`` with variance
  ``ε_k² + noise_k²``; ``δ`` is their precision-weighted mean shrunk toward 0 by its prior
  (Gaussian posterior), so thin evidence moves the others a little and hours of it fully.
  Every model not measured nor declared gets ``prior × exp(δ)`` with rel_sd
  ``√(ε_g² + var δ)``. A measured model's rate is its measurement (hours-weighted over its
  attempts), with the measurement's rel_sd: a declaration or a table row says nothing more of
  a model the job has run on.
- **Multi-GPU**: an ``n``-GPU offer runs at ``scaling(n, e) = 1 + (n - 1) e`` single GPUs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from core.units import usd_small
from policies.gpu_table import closest_names, gpu_spec, lowest_relative

if TYPE_CHECKING:
    from core.models.specs import JobSpec

REFERENCE_GPU = "A100-80GB"
"""The GPU model relatives are measured against (one A100-80GB SXM4, Lambda's reference)."""

JOB_SCALE_SD = 0.25
"""sd (log) of how far one job's speed on every GPU is from the benchmarks' (δ's prior)."""

DECLARED_REL_SD = 0.15
"""rel_sd of a declared rate; also δ's prior sd when a declaration sets the job's scale."""

MODEL_REL_SD = {"benchmark": 0.25, "formula": 0.43, "unknown": 0.97}
"""sd (log) of the table's error on one GPU model beyond the job's common δ (ε_g); with
:data:`JOB_SCALE_SD` they make the table's :data:`~policies.gpu_table.PRIOR_REL_SD`."""

MEASURED_REL_SD_AT_H0 = 0.2
EVIDENCE_H0 = 0.1
"""Measurement noise: rel_sd ``MEASURED_REL_SD_AT_H0 × √(EVIDENCE_H0 / hours)``."""

_MIN_EVIDENCE_H = 1e-6



@dataclass(frozen=True)
class Measurement:
    """What the daemon learned of a job on one (``gpu_model``, ``gpu_count``): ``units_per_h``
    for the whole offer in market hours, from ``hours`` market hours of evidence. Measurements
    with a non-positive or non-finite rate or hours are ignored."""

    gpu_model: str
    gpu_count: int
    units_per_h: float
    hours: float


@dataclass(frozen=True)
class WorkModel:
    """What is known of a job's speed before measuring it.

    ``workload``: ``transformer`` | ``cnn`` | ``generic``, or a benchmark of
    :data:`~policies.gpu_table.BENCHMARK_FAMILY` (e.g. ``bert_large``; models without it use
    that benchmark's family). ``declared``:
    lower-cased GPU model → units per hour on ONE GPU. ``scaling_efficiency``: e of
    :func:`scaling`. ``reference_gpu``: the GPU model of :func:`reference_rate`.
    """

    workload: str = "generic"
    declared: Mapping[str, float] = field(default_factory=dict)
    scaling_efficiency: float = 0.9
    reference_gpu: str = REFERENCE_GPU

    @classmethod
    def from_spec(cls, spec: JobSpec) -> WorkModel:
        """The spec's ``work`` (declared units/s become units/h) and ``reference_gpu``."""
        reference = spec.reference_gpu or REFERENCE_GPU
        if spec.work is None:
            return cls(reference_gpu=reference)
        return cls(
            workload=spec.work.workload.value,
            declared={name.lower(): float(rate) * 3600.0
                      for name, rate in spec.work.throughput.items()},
            scaling_efficiency=float(spec.work.scaling_efficiency),
            reference_gpu=reference,
        )


@dataclass(frozen=True)
class RateEstimates:
    """Per offer (shape ``(m,)``): ``units_per_h`` for the whole offer (finite, > 0), the
    ``source`` of each (``measured`` | ``declared`` | ``prior``) and ``rel_sd``, the relative
    standard deviation (sd of the log) of the estimate."""

    units_per_h: np.ndarray
    source: tuple[str, ...]
    rel_sd: np.ndarray


def scaling(gpu_count, efficiency):
    """Single GPUs' worth of an offer with ``gpu_count`` GPUs: ``1 + (n - 1) × efficiency``;
    0 GPUs (a CPU offer) counts as 1. Scalars give a float, arrays an array."""
    n = np.maximum(np.asarray(gpu_count, dtype=float), 1.0)
    out = 1.0 + (n - 1.0) * float(efficiency)
    return float(out) if out.ndim == 0 else out


def measurement_rel_sd(hours: float) -> float:
    """rel_sd of a rate measured over ``hours`` market hours."""
    return MEASURED_REL_SD_AT_H0 * math.sqrt(EVIDENCE_H0 / max(hours, _MIN_EVIDENCE_H))


def unknown_relative(workload: str) -> float:
    """Prior relative of a GPU model the table lacks: the table's lowest for ``workload``
    (conservative: such a GPU is chosen only once measured, or when nothing else fits)."""
    return lowest_relative(workload)


def _canonical(name: str) -> str:
    """One key per GPU model however it is spelled (the table's name, else the upper-cased
    name without spaces, ``_`` and ``-``)."""
    row = gpu_spec(name or "")
    if row is not None:
        return row.name
    return "".join(ch for ch in (name or "").upper() if ch not in " _-")


def _prior(canonical: str, workload: str) -> tuple[float, float]:
    """(log relative, ε sd) of a GPU model for ``workload``."""
    row = gpu_spec(canonical)
    if row is None:
        return math.log(unknown_relative(workload)), MODEL_REL_SD["unknown"]
    return math.log(row.relative(workload)), MODEL_REL_SD[row.basis]


@dataclass(frozen=True)
class _Belief:
    log_rate: float   # per GPU
    sd: float
    source: str


def _beliefs(model: WorkModel, names: set[str],
             measurements: Sequence[Measurement]) -> dict[str, _Belief]:
    """Per canonical GPU model in ``names`` (plus the measured ones): per-GPU log rate, sd and
    source, following the module docstring."""
    declared: dict[str, float] = {}
    for name, rate in model.declared.items():
        if rate > 0 and math.isfinite(rate):
            declared[_canonical(name)] = math.log(rate)
    # Measurements: per model, hours-weighted mean of per-GPU log rates.
    sums: dict[str, list[float]] = {}
    for m in measurements:
        if not (m.units_per_h > 0 and m.hours > 0 and math.isfinite(m.units_per_h)
                and math.isfinite(m.hours)):
            continue
        per_gpu = m.units_per_h / scaling(m.gpu_count, model.scaling_efficiency)
        acc = sums.setdefault(_canonical(m.gpu_model), [0.0, 0.0])
        acc[0] += m.hours * math.log(per_gpu)
        acc[1] += m.hours
    measured = {k: (s / h, h) for k, (s, h) in sums.items()}

    table = {k: _prior(k, model.workload) for k in names | set(measured) | set(declared)}
    # The job's units from its declarations: models the table knows set them (a declared model
    # it lacks has only the conservative prior to compare with), else all declared ones.
    anchors = [k for k in declared if gpu_spec(k) is not None] or list(declared)
    c0 = sum(declared[k] - table[k][0] for k in anchors) / len(anchors) if anchors else 0.0
    tau = DECLARED_REL_SD if declared else JOB_SCALE_SD

    def predicted(k: str) -> tuple[float, float]:   # (log mean, ε sd) before calibration
        if k in declared:
            return declared[k], DECLARED_REL_SD
        return table[k][0] + c0, table[k][1]

    # δ's posterior from every measured model (Gaussian, prior N(0, τ²)).
    terms = {}
    for k, (log_m, hours) in measured.items():
        mean, eps = predicted(k)
        var = eps ** 2 + measurement_rel_sd(hours) ** 2
        terms[k] = (log_m - mean, var)
    precision = 1.0 / tau ** 2 + sum(1.0 / v for _, v in terms.values())
    weighted = sum(r / v for r, v in terms.values())
    delta = weighted / precision

    out: dict[str, _Belief] = {}
    for k in table:
        mean, eps = predicted(k)
        if k in measured:
            # The job's own evidence on this model is its rate there: a prior (declared or
            # from the table) may be far off, and shrinking toward it would show the user a
            # "measured" rate the job never ran at.
            log_m, hours = measured[k]
            out[k] = _Belief(log_m, measurement_rel_sd(hours), "measured")
        elif k in declared:
            out[k] = _Belief(mean, DECLARED_REL_SD, "declared")
        else:
            out[k] = _Belief(mean + delta, math.sqrt(eps ** 2 + 1.0 / precision), "prior")
    return out


def estimate_rates(model: WorkModel, gpu_models: Sequence[str], gpu_counts: Sequence[int],
                   measurements: Sequence[Measurement]) -> RateEstimates:
    """The job's rate on each of ``m`` offers, given their GPU models and counts (length
    ``m`` each; ``ValueError`` when they differ). See the module docstring for the model."""
    if len(gpu_models) != len(gpu_counts):
        raise ValueError(f"gpu_models has {len(gpu_models)} offers, gpu_counts {len(gpu_counts)}")
    distinct = {name: _canonical(name) for name in set(gpu_models)}
    beliefs = _beliefs(model, set(distinct.values()), measurements)
    per_name = {name: beliefs[canon] for name, canon in distinct.items()}
    log_rate = np.fromiter((per_name[n].log_rate for n in gpu_models), float, len(gpu_models))
    rel_sd = np.fromiter((per_name[n].sd for n in gpu_models), float, len(gpu_models))
    counts = np.asarray(gpu_counts, dtype=float).reshape(len(gpu_models))
    rates = np.exp(log_rate) * scaling(counts, model.scaling_efficiency)
    return RateEstimates(units_per_h=np.asarray(rates, dtype=float),
                         source=tuple(per_name[n].source for n in gpu_models), rel_sd=rel_sd)


def reference_rate(model: WorkModel, measurements: Sequence[Measurement]) -> tuple[float, str]:
    """The job's rate on one GPU of ``model.reference_gpu`` (units/h) and its source."""
    est = estimate_rates(model, [model.reference_gpu], [1], measurements)
    return float(est.units_per_h[0]), est.source[0]


def reference_hours(model: WorkModel, total_units: float | None,
                    expected_hours: float | None, measurements: Sequence[Measurement] = (),
                    reference: str | None = None, ref_rate: float | None = None
                    ) -> float | None:
    """Hours of one ``reference`` GPU (default ``model.reference_gpu``) a whole job needs.

    - ``total_units`` (the job's units, e.g. ``work.total``) when the rates are in those units
      (``model.declared`` or ``measurements`` non-empty): ``total_units`` ÷ the rate of one
      ``reference`` GPU;
    - else ``expected_hours`` (hours on one ``model.reference_gpu``, the spec's) × the rate of
      one ``model.reference_gpu`` ÷ the rate of one ``reference`` GPU (1 when they are the
      same model: ``expected_hours: 2, reference_gpu: T4`` is 2 × 0.1506 = 0.30
      A100-80GB-hours of transformer work);
    - else ``None`` (unknown).

    ``ref_rate``: the rate of one ``reference`` GPU in the job's units when the caller has
    estimated it already (the daemon's); it puts the rates in units.
    """
    target = reference or model.reference_gpu
    in_units = ref_rate is not None or bool(model.declared) or bool(measurements)
    if total_units is not None and in_units:
        if ref_rate is None:
            ref_rate = float(estimate_rates(model, [target], [1], measurements).units_per_h[0])
        return float(total_units) / float(ref_rate)
    if expected_hours is None:
        return None
    if _canonical(target) == _canonical(model.reference_gpu):
        return float(expected_hours)
    rates = estimate_rates(model, [model.reference_gpu, target], [1, 1], measurements).units_per_h
    return float(expected_hours) * float(rates[0]) / float(rates[1])


def spec_reference_hours(spec: JobSpec, reference: str | None = None) -> float | None:
    """:func:`reference_hours` of a spec before it runs: its ``work.total`` and
    ``expected_hours`` with its :meth:`WorkModel.from_spec`, no measurement."""
    total = spec.work.total if spec.work is not None else None
    return reference_hours(WorkModel.from_spec(spec), total, spec.expected_hours, (), reference)


def unknown_gpu_warnings(spec: JobSpec) -> list[str]:
    """One message per GPU model of the spec's ``reference_gpu`` and ``work.throughput`` keys
    that the GPU table does not know (:func:`~policies.gpu_table.gpu_spec`), naming the
    closest table names, e.g. ``reference_gpu: 'V1000' is not in the GPU table (closest:
    V100, ...)``. Such a model is not refused (it may be newer than the table): it gets the
    conservative prior of :func:`unknown_relative`, which the message says. Pure."""
    out = []

    def unknown(path: str, name: str, consequence: str) -> None:
        if gpu_spec(name) is not None:
            return
        close = closest_names(name)
        hint = f"closest: {', '.join(close)}" if close else "no close name"
        out.append(f"{path}: {name!r} is not in the GPU table ({hint}); {consequence}")

    if spec.reference_gpu is not None:
        unknown("reference_gpu", spec.reference_gpu,
                "its speed is the conservative prior for GPU models the table lacks (the "
                "table's slowest, ±100 %) until the job runs on it, so every other GPU is "
                "taken to be at least as fast")
    if spec.work is not None:
        for name in spec.work.throughput:
            unknown("work.throughput", name,
                    "its declared rate is used on that model, and the other models' priors "
                    "are scaled from the declared models the table knows (from the "
                    "conservative prior for GPU models it lacks, the table's slowest, when it "
                    "knows none)")
    return out


def cost_per_1k(price_usd_per_hour, units_per_h):
    """USD per 1,000 units at ``price_usd_per_hour`` and ``units_per_h`` (scalars or arrays);
    ``nan`` where the rate is not positive and finite."""
    price = np.asarray(price_usd_per_hour, dtype=float)
    rate = np.asarray(units_per_h, dtype=float)
    ok = np.isfinite(rate) & (rate > 0)
    out = np.where(ok, price * 1000.0 / np.where(ok, rate, 1.0), np.nan)
    return float(out) if out.ndim == 0 else out


def _ratio(value: float) -> str:
    return f"{value:.2g}" if value < 10 else f"{value:.0f}"


def compare_text(a_name: str, a_cost_per_1k: float, a_rate: float, a_price: float,
                 b_name: str, b_cost_per_1k: float, b_rate: float, b_price: float,
                 unit: str) -> str:
    """One line comparing offer a with offer b for events, e.g. ``"RTX4090: $0.42 per 1k
    samples vs V100 $1.10: 1.6× faster at 0.33× the price"`` (costs per 1,000 ``unit``, rates
    units/h, prices USD/h)."""
    text = f"{a_name}: {usd_small(a_cost_per_1k)} per 1k {unit} vs {b_name} {usd_small(b_cost_per_1k)}"
    if not (a_rate > 0 and b_rate > 0 and b_price > 0):
        return text
    speed, price = a_rate / b_rate, a_price / b_price
    if speed >= 1.05:
        pace = f"{_ratio(speed)}× faster"
    elif speed <= 0.95:
        pace = f"{_ratio(speed)}× the speed"
    else:
        pace = "as fast"
    return f"{text}: {pace} at {_ratio(price)}× the price"
