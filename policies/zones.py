"""Multi-zone, multi-provider placement after a reclaim: go where the loss is not repeated.

Spot capacity in one zone tends to vanish together (a reclaim is a symptom of that zone's
pool running dry), and zones of one region often move together too. After a reclaim we
therefore (1) never use spot in the zone just lost for ``same_zone_cooldown_h`` hours while
another zone's spot is available (or at all, in strict mode), and
(2) raise the hazard of other offers by how correlated their zone's availability has been with
the lost zone's (phi coefficient of the two availability histories), for ``cooldown`` hours.
"""

from __future__ import annotations

import numpy as np

from policies.views import NO_ZONE, JobView, OfferTable


def zone_correlation(samples: np.ndarray) -> np.ndarray:
    """Pairwise correlation of availability histories.

    Args:
        samples: bool ``(z, T)``: availability of ``z`` zones over the same ``T`` instants
            (1 = available). Source: replay traces, or the daemon's observed offer polls.

    Returns:
        ``(z, z)`` phi coefficients in [-1, 1]; 0 where a zone never changed (no information).
    """
    x = np.asarray(samples, dtype=float)
    if x.ndim != 2:
        raise ValueError(f"samples must be (zones, time), got shape {x.shape}")
    x = x - x.mean(axis=1, keepdims=True)
    norm = np.sqrt((x * x).sum(axis=1))
    cov = x @ x.T
    with np.errstate(invalid="ignore", divide="ignore"):
        corr = cov / np.outer(norm, norm)
    corr = np.where(np.isfinite(corr), corr, 0.0)
    np.fill_diagonal(corr, 1.0)
    return corr


def cooling_zone_mask(jobs: JobView, offers: OfferTable, available: np.ndarray,
                      cooldown_h: float, strict: bool = False) -> np.ndarray:
    """``(n, m)`` bool: spot offers to skip because their zone was just reclaimed.

    Within ``cooldown_h`` hours of a reclaim, spot offers in the lost zone are skipped whenever
    some spot offer in another zone is available to the job (``available``, ``(n, m)``), so the
    job never goes back to the zone it just lost while an alternative exists. With ``strict``
    they are skipped even without an alternative. ``cooldown_h`` = 0 disables the rule.
    """
    recent = (jobs.last_preempted_zone != NO_ZONE) & (jobs.since_preemption_h < cooldown_h)
    same = (offers.zone[None, :] == jobs.last_preempted_zone[:, None]) & offers.is_spot[None, :]
    elsewhere = (np.broadcast_to(available, same.shape) & offers.is_spot[None, :] & ~same).any(axis=1)
    skip = recent & (elsewhere | strict)
    return skip[:, None] & same


def correlated_hazard_factor(jobs: JobView, offers: OfferTable, corr: np.ndarray | None,
                             cooldown_h: float) -> np.ndarray:
    """``(n, m)`` multiplier (>= 1) of each spot offer's hazard right after a reclaim:
    ``1 + max(0, corr[lost zone, offer zone])`` within ``cooldown_h``, else 1.

    ``corr`` is :func:`zone_correlation` over ``offers.zone_names``, ``(z, z)`` for all jobs or
    ``(n, z, z)`` per job (``None``: no correlation known, factor 1).
    """
    n, m = len(jobs), len(offers)
    if corr is None or m == 0:
        return np.ones((n, m))
    recent = (jobs.last_preempted_zone != NO_ZONE) & (jobs.since_preemption_h < cooldown_h)
    lost = np.maximum(jobs.last_preempted_zone, 0)
    if corr.ndim == 3:
        rho = corr[np.arange(n), lost][:, offers.zone]
    else:
        rho = corr[lost][:, offers.zone]
    rho = np.maximum(rho, 0.0)
    return 1.0 + np.where(recent[:, None] & offers.is_spot[None, :], rho, 0.0)
