"""Units and the one-value quantities that policies, adapters and the service all use.

One definition each, with why it has its value; importing this module imports only ``math``.
"""

import math

# Hours in the average month of the Gregorian year (8760 h / 12). Monthly figures are read
# against it: the interruption frequencies the providers publish (AWS Spot Advisor and Alibaba
# DescribeSpotAdvice rate interruptions over the past month) and S3's price per GB-month
# (AWS's pricing calculator uses the same 730-hour month).
HOURS_PER_MONTH = 8760.0 / 12

# Launch + boot + agent install + restore of a new instance, in hours, as the policy's restart
# overhead in the daemon: cloud GPU VMs take a few minutes before the job resumes.
RESTART_OVERHEAD_H = 0.1


def usd_small(value: float) -> str:
    """USD for small sums such as a cost per 1,000 work units: cents from $0.01, below that two
    significant digits in decimals (a token's $0.000051 is neither $0.00 nor 5.1e-05);
    ``$?`` when not finite."""
    if not math.isfinite(value):
        return "$?"
    if 0 < value < 0.01:
        value = float(f"{value:.2g}")  # 0.00999999 is $0.01, not $0.0100
    if value >= 0.01 or value <= 0:
        return f"${value:,.2f}"
    return f"${value:.{1 - math.floor(math.log10(value))}f}"
