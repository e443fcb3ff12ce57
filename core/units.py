"""Units and the one-value quantities that policies, adapters and the service all use.

One definition each, with why it has its value; importing this module imports nothing else.
"""

# Hours in the average month of the Gregorian year (8760 h / 12). Monthly figures are read
# against it: the interruption frequencies the providers publish (AWS Spot Advisor and Alibaba
# DescribeSpotAdvice rate interruptions over the past month) and S3's price per GB-month
# (AWS's pricing calculator uses the same 730-hour month).
HOURS_PER_MONTH = 8760.0 / 12

# Launch + boot + agent install + restore of a new instance, in hours, as the policy's restart
# overhead in the daemon: cloud GPU VMs take a few minutes before the job resumes.
RESTART_OVERHEAD_H = 0.1
