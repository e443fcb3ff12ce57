"""The AWS Spot Instance Advisor data, read as interruption risks.

Source: the public JSON behind https://aws.amazon.com/ec2/spot/instance-advisor/
(default URL ``https://spot-bid-advisor.s3.amazonaws.com/spot-advisor-data.json``, ~1.5 MB),
``spot_advisor[region][os][instance_type] = {"s": savings %, "r": bucket 0..4}``. Buckets map
to interruption risk through :data:`providers.aws.translate.RISK_BY_BUCKET`.

The file is a :class:`providers.cache.CachedFile`: refetched when older than
:data:`SPOT_ADVISOR_TTL_S`; a failed fetch keeps the stale copy (or, with none, no risks at
all: spot offers are then unrated) and is retried after :data:`SPOT_ADVISOR_RETRY_S`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

from providers.aws.translate import advisor_risks
from providers.cache import CachedFile

# AWS regenerates the file a few times a day; refetching it more often than every 6 h would
# only re-download the same 1.5 MB.
SPOT_ADVISOR_TTL_S = 6 * 3600.0
# After a failed download, wait this long before trying again.
SPOT_ADVISOR_RETRY_S = 600.0


class SpotAdvisor(CachedFile[dict[str, dict[str, float]]]):
    """Interruption risk per (region, instance type) from the Spot Advisor file at ``url``
    (``https://…`` or ``file://…``), cached at ``cache_path``; ``clock`` gives wall-clock
    seconds. Never raises for network or format problems (see :class:`CachedFile`)."""

    def __init__(self, url: str, cache_path: Path, *, max_age_s: float = SPOT_ADVISOR_TTL_S,
                 clock: Callable[[], float] = time.time) -> None:
        super().__init__("spot advisor", url, cache_path,
                         lambda body: advisor_risks(json.loads(body)), max_age_s=max_age_s,
                         retry_s=SPOT_ADVISOR_RETRY_S, clock=clock)

    def risks(self, region: str) -> dict[str, float]:
        """instance type → interruption risk (0–1) in ``region`` (Linux); empty when unknown."""
        return dict((self.value() or {}).get(region, {}))
