"""How fast the simulated job runs on each offer: a speed per offer, relative to the
simulator's reference, one A100-80GB (:data:`policies.throughput.REFERENCE_GPU`, the GPU a
replayed market's per-offer ``speed`` factors are relative to), whatever the job's
``reference_gpu``: the job's compute is converted to hours of that reference
(:func:`policies.throughput.spec_reference_hours`).

A speed ``s`` means one market hour on the offer does ``s`` reference-hours of the job's work,
so a job with ``c`` reference-hours left finishes uninterrupted in ``c / s`` hours there. The
simulator advances progress by ``dt × s`` and hands the same ``s`` to the policy
(``MarketView.speed``), as the daemon hands it its estimates.

Speeds come from the job's :class:`policies.throughput.WorkModel` (the package's GPU table,
scaled to multi-GPU offers with the job's scaling efficiency, and its declared throughput), with
no measurement: the simulated job has not run yet.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from core.models import JobSpec, Offer

SpeedFn = Callable[[Sequence[Offer]], np.ndarray]
"""``offers -> (m,)`` speeds relative to the job's reference, finite and > 0."""


def speed_model_on(spec: JobSpec) -> bool:
    """Whether a job's spec says what its work runs on (``work`` or ``reference_gpu``): only
    then do offers of different GPU models progress at different speeds."""
    return spec.work is not None or spec.reference_gpu is not None


def work_speeds(model, offers: Sequence[Offer]) -> np.ndarray:
    """``(m,)`` speed of each offer for a job of ``model`` (a
    :class:`policies.throughput.WorkModel`): its estimated whole-offer rate (no measurements)
    ÷ the estimated rate of one A100-80GB (the simulator's reference, not the job's
    ``reference_gpu``).

    Raises:
        ValueError: a speed is not finite and positive (a broken throughput table).
    """
    from policies.throughput import REFERENCE_GPU, estimate_rates

    names = [o.gpu_model for o in offers] + [REFERENCE_GPU]
    rates = estimate_rates(model, names, [o.gpu_count for o in offers] + [1], []).units_per_h
    out = np.asarray(rates[:-1], dtype=float) / float(rates[-1])
    check(out, len(offers))
    return out


def spec_speeds(spec: JobSpec) -> SpeedFn | None:
    """The speed function of ``spec`` (:func:`work_speeds` of its ``WorkModel``), or ``None``
    when the speed model is off for it (every offer at speed 1, as before speeds existed)."""
    if not speed_model_on(spec):
        return None
    from policies.throughput import WorkModel

    model = WorkModel.from_spec(spec)
    return lambda offers: work_speeds(model, offers)


def check(speed: np.ndarray, m: int) -> None:
    """Raise ``ValueError`` unless ``speed`` is ``(m,)``, finite and > 0."""
    if speed.shape != (m,):
        raise ValueError(f"speeds must have shape ({m},), got {speed.shape}")
    bad = ~(np.isfinite(speed) & (speed > 0))
    if bad.any():
        raise ValueError(f"speeds must be finite and > 0, got {speed[bad][0]!r} "
                         f"for offer {int(np.flatnonzero(bad)[0])}")
