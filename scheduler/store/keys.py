"""Every Redis key of gpu-arbiter. No other module formats a key.

Job-scoped keys share the ``{job_id}`` hash tag so a transaction over one job's keys works on
Redis Cluster.
"""

PREFIX = "ga"

JOBS_INDEX = f"{PREFIX}:jobs"                 # zset job_id -> created ms
ACTIVE_JOBS = f"{PREFIX}:jobs:active"         # set of non-terminal job ids
INSTANCES_INDEX = f"{PREFIX}:instances"       # set of instance ids we launched
SERIES_INDEX = f"{PREFIX}:series"             # set of price series keys
OFFER_PROVIDERS = f"{PREFIX}:offers:providers"  # set of provider names with offers
UNAVAILABLE_OFFERS = f"{PREFIX}:unavailable"   # zset series -> expiry ms
PREEMPTIONS = f"{PREFIX}:preemptions"          # hash series -> preemptions observed by us


def job(job_id: str) -> str:
    return f"{PREFIX}:job:{{{job_id}}}"


def job_logs(job_id: str) -> str:
    return f"{PREFIX}:job:{{{job_id}}}:logs"


def job_lease(job_id: str) -> str:
    return f"{PREFIX}:lease:job:{{{job_id}}}"


def agent_report(job_id: str, attempt: int) -> str:
    return f"{PREFIX}:agent:{{{job_id}}}:{attempt}"


def instance(instance_id: str) -> str:
    return f"{PREFIX}:instance:{instance_id}"


def offers(provider: str) -> str:
    return f"{PREFIX}:offers:{provider}"


def prices(series: str) -> str:
    return f"{PREFIX}:prices:{series}"


def lease(name: str) -> str:
    return f"{PREFIX}:lease:{name}"
