"""What past spot availability says about the future: run statistics and forecasts.

Pure numpy over availability samples (1 = capacity available, 0 = reclaimed/unavailable, the
``cbl_spot_traces`` polarity). The simulator feeds whole replay traces; the daemon feeds the
samples its offer polls recorded (one per poll: listed or absent; see
``OfferStore.record_samples``) and reads the last column.

Spot availability runs are heavy-tailed (on the Can't-Be-Late AWS traces the mean remaining
length of a run grows roughly like its age), so the forecasts below use the "Lindy" estimate
``expected remaining = mean run length + age`` instead of a memoryless one.
"""

from __future__ import annotations

import numpy as np

from core.units import HOURS_PER_MONTH
from policies.views import AvailabilityStats

# Weak priors (in runs / samples) so that a short history does not swing the estimates.
PRIOR_RUNS = 1.0
PRIOR_UP_H = 2.0
PRIOR_DOWN_H = 2.0
PRIOR_FRAC = 0.5
PRIOR_FRAC_WEIGHT_H = 12.0


def _run_length(x: np.ndarray) -> np.ndarray:
    """Length of the run of True ending at each position (inclusive), along the last axis."""
    t = x.shape[-1]
    idx = np.broadcast_to(np.arange(t), x.shape)
    last_false = np.maximum.accumulate(np.where(x, -1, idx), axis=-1)
    return np.where(x, idx - last_false, 0)


def availability_stats(samples: np.ndarray, gap_h: float, *, prior_up_h: float | np.ndarray = PRIOR_UP_H,
                       prior_down_h: float | np.ndarray = PRIOR_DOWN_H) -> AvailabilityStats:
    """Run statistics after each sample.

    Args:
        samples: bool array ``(..., T)``, True where capacity was available; samples are
            ``gap_h`` hours apart, oldest first.
        gap_h: hours between samples (> 0).
        prior_up_h, prior_down_h: prior mean run lengths (hours), scalars or broadcastable to
            ``samples.shape[:-1] + (1,)``; each weighs as one observed run.

    Returns:
        :class:`AvailabilityStats` whose arrays have the shape of ``samples``: entry ``t`` uses
        samples ``0..t`` only (no look-ahead). Ages count the samples *before* ``t`` in the
        current run, so capacity that just came back has age 0.

    Raises:
        ValueError: ``gap_h`` is not positive.
    """
    if not gap_h > 0:
        raise ValueError(f"gap_h must be > 0, got {gap_h!r}")
    x = np.asarray(samples, dtype=bool)
    up_run = _run_length(x)
    down_run = _run_length(~x)
    up_ticks = np.cumsum(x, axis=-1)
    n = np.arange(1, x.shape[-1] + 1)
    prev = np.concatenate([np.zeros(x.shape[:-1] + (1,), bool), x[..., :-1]], axis=-1)
    up_ends = np.cumsum(prev & ~x, axis=-1)        # runs of availability that ended
    down_ends = np.cumsum(~prev & x, axis=-1)      # outages that ended (incl. an initial one)
    down_ends = down_ends - x[..., :1]             # a trace that starts available had no outage
    up_time = up_ticks * gap_h
    down_time = (n - up_ticks) * gap_h
    mean_up = (up_time + PRIOR_RUNS * np.asarray(prior_up_h)) / (up_ends + PRIOR_RUNS)
    mean_down = (down_time + PRIOR_RUNS * np.asarray(prior_down_h)) / (down_ends + PRIOR_RUNS)
    w = PRIOR_FRAC_WEIGHT_H / gap_h
    return AvailabilityStats(
        up_age_h=np.maximum(up_run - 1, 0) * gap_h,
        down_age_h=np.maximum(down_run - 1, 0) * gap_h,
        mean_up_h=mean_up, mean_down_h=mean_down,
        frac=(up_ticks + w * PRIOR_FRAC) / (n + w),
    )


def always_available(shape: tuple[int, ...]) -> AvailabilityStats:
    """Stats of capacity that never goes away (on-demand offers, spot without a trace)."""
    inf = np.full(shape, np.inf)
    zero = np.zeros(shape)
    return AvailabilityStats(up_age_h=inf, down_age_h=zero, mean_up_h=inf,
                             mean_down_h=zero, frac=np.ones(shape))


def risk_to_mean_up_h(interruption_risk: np.ndarray | float) -> np.ndarray:
    """Mean hours between interruptions implied by a monthly interruption frequency.

    ``interruption_risk`` is the AWS Spot Advisor notion (share of instances interrupted in a
    month, in [0, 1]); read as a Poisson rate: ``mean = HOURS_PER_MONTH / -ln(1 - risk)``
    (:data:`core.units.HOURS_PER_MONTH`, 730 h). 0 gives ``inf``; values are clipped to 0.999.
    """
    risk = np.clip(np.asarray(interruption_risk, dtype=float), 0.0, 0.999)
    with np.errstate(divide="ignore"):
        return np.where(risk > 0, HOURS_PER_MONTH / -np.log1p(-np.maximum(risk, 1e-12)), np.inf)


def residual_up_h(stats: AvailabilityStats) -> np.ndarray:
    """Expected hours an available offer stays available: ``mean_up + up_age`` (Lindy)."""
    return stats.mean_up_h + stats.up_age_h


def residual_down_h(stats: AvailabilityStats) -> np.ndarray:
    """Expected hours until unavailable capacity returns: ``mean_down + down_age`` (Lindy)."""
    return stats.mean_down_h + stats.down_age_h
