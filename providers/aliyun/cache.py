"""Named TTLs of the Alibaba Cloud adapter's caches (the cache object is the shared
:class:`providers.cache.TTLCache`). Wall-clock seconds, each with the reason for its value."""

from __future__ import annotations

# The region list changes when Alibaba opens a region: a day keeps DescribeRegions to one call.
REGIONS_TTL_S = 24 * 3600.0
# GPU instance types' hardware never changes; new types appear a few times a year.
INSTANCE_TYPES_TTL_S = 24 * 3600.0
# Stock (DescribeAvailableResource) moves within minutes; two calls per region (spot and
# on-demand) every two minutes is cheap and keeps sold-out zones out of the offers.
AVAILABLE_RESOURCES_TTL_S = 120.0
# Pay-as-you-go list prices change a few times a year (as AWS's; Karpenter refreshes them
# every 12 h). One DescribePrice per type and region.
ON_DEMAND_PRICES_TTL_S = 12 * 3600.0
# DescribeSpotAdvice rates are 30-day averages: refreshing hourly changes nothing that matters.
SPOT_ADVICE_TTL_S = 3600.0
# The current spot price is the latest DescribeSpotPriceHistory record of the last 3 hours:
# the API's own default window, and ECS writes a record per zone at least hourly.
CURRENT_SPOT_WINDOW_S = 3 * 3600.0
