"""Interruption risk from what a provider advertises and what this service saw itself.

Providers publish a monthly interruption frequency per offer (AWS Spot Advisor buckets,
Alibaba DescribeSpotAdvice). We also count the preemptions of our own instances and the spot
hours they ran. The advertised figure is taken as a prior worth ``prior_months`` of exposure,
and the blend is the rate over prior plus observed exposure::

    risk = (advertised × prior_months + preemptions) / (prior_months + observed_months)

so a zone that reclaims our instances far more often than advertised soon shows it, and a
handful of lucky hours does not erase a bad advertised figure.
"""

from __future__ import annotations

from core.units import HOURS_PER_MONTH

DEFAULT_PRIOR_MONTHS = 1.0


def blended_risk(advertised: float, preemptions: int, spot_hours: float,
                 prior_months: float = DEFAULT_PRIOR_MONTHS) -> float:
    """Monthly interruption frequency in [0, 1].

    Args:
        advertised: the provider's figure, fraction per month in [0, 1].
        preemptions: preemptions we observed on this offer key (>= 0).
        spot_hours: spot instance-hours we ran on it (>= 0), market hours.
        prior_months: weight of the advertised figure, in months of exposure (> 0).

    Raises:
        ValueError: an argument out of range.
    """
    if not 0 <= advertised <= 1:
        raise ValueError(f"advertised risk must be in [0, 1], got {advertised}")
    if preemptions < 0 or spot_hours < 0 or prior_months <= 0:
        raise ValueError("preemptions and spot_hours must be >= 0, prior_months > 0")
    months = spot_hours / HOURS_PER_MONTH
    return min(1.0, (advertised * prior_months + preemptions) / (prior_months + months))
