"""Priors: the values the policies assume where the market says nothing.

Each has one definition here, with its source. Adapters translate what their cloud reports and
leave a missing figure missing (``None``); the service fills it from here before the offer is
stored or ranked.
"""

# Monthly interruption frequency assumed for a spot offer whose source rates none (a catalog,
# an instance type Spot Advisor or DescribeSpotAdvice does not cover). Source: the mean of the
# bucket midpoints (<5 % → 0.025, 5-10 % → 0.075, 10-15 % → 0.125, 15-20 % → 0.175,
# >20 % → 0.25) over the 609 Linux GPU/accelerator rows of AWS Spot Instance Advisor
# (shared/data/spot_advisor/spot_advisor_gpu_accel_flat.csv) is 0.144; rounded.
UNKNOWN_SPOT_RISK = 0.15
