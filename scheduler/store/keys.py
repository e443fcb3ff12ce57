"""Every Redis key of gpu-arbiter. No other module formats a key.

Job-scoped keys share the ``{job_id}`` hash tag so a transaction over one job's keys works on
Redis Cluster; so do one provider's latest-offer keys (``{offers:<provider>}``), one fleet's,
one price series', and the user/token keys (``{auth}``). A key without a tag is its own slot.
"""

from scheduler.store.history_sources import REAL

PREFIX = "ga"

JOBS_INDEX = f"{PREFIX}:jobs"                 # zset job_id -> created ms
ACTIVE_JOBS = f"{PREFIX}:jobs:active"         # set of non-terminal job ids
SERIES_INDEX = f"{PREFIX}:series"             # set of price series keys (every series with history)
OFFER_PROVIDERS = f"{PREFIX}:offers:providers"  # set of provider names with offers
UNAVAILABLE_OFFERS = f"{PREFIX}:unavailable"   # zset series -> expiry ms
PREEMPTIONS = f"{PREFIX}:preemptions"          # hash series -> preemptions observed by us
SPOT_HOURS = f"{PREFIX}:spot-hours"            # hash series -> spot hours we ran (market hours)
# Price history (scheduler/store/history.py). One series' keys share the ``{series}`` hash tag.
HISTORY_CONFIG = f"{PREFIX}:hist:config"      # hash: retention settings shared by all replicas
HISTORY_HARDWARE = f"{PREFIX}:hist:hardware"  # hash "provider/instance_type" -> hardware JSON
HISTORY_SOURCES = f"{PREFIX}:hist:sources"    # set of history sources other than real (replay:*)
HISTORY_MIGRATED = f"{PREFIX}:hist:migrated"  # hash replay source -> legacy series moved to it


def job(job_id: str) -> str:
    return f"{PREFIX}:job:{{{job_id}}}"


def job_logs(job_id: str) -> str:
    return f"{PREFIX}:job:{{{job_id}}}:logs"


def job_log_seq(job_id: str, rank: int = 0) -> str:
    """``"<attempt>:<n>"``: the job's log has the output of the attempt's agent of node
    ``rank`` up to its line n - 1 (only the current attempt's agents add output). Rank 0's
    (every one-node job's) is the job's own; a gang's other ranks' are beside it, so that
    their line numbers do not collide."""
    base = f"{PREFIX}:job:{{{job_id}}}:logseq"
    return base if rank == 0 else f"{base}:r{rank}"


def job_lease(job_id: str) -> str:
    return f"{PREFIX}:lease:job:{{{job_id}}}"


def agent_report(job_id: str, attempt: int, rank: int = 0) -> str:
    """The newest report of one agent: rank 0's (every one-node job's) under the attempt,
    a gang's other ranks' beside it."""
    base = f"{PREFIX}:agent:{{{job_id}}}:{attempt}"
    return base if rank == 0 else f"{base}:r{rank}"


def _offers_tag(provider: str) -> str:
    # One hash slot per provider: its offers, their price starts and source are replaced in
    # one transaction. Keys of older versions (``ga:offers:<provider>``...) are no longer
    # read; they expire within OFFERS_TTL_S, and the next poll writes these.
    return f"{PREFIX}:{{offers:{provider}}}"


def offers(provider: str) -> str:
    """hash series -> offer JSON: the provider's latest offers."""
    return _offers_tag(provider)


def _history_ns(source: str) -> str:
    # Real history keeps the layout it always had, so history stored before sources existed
    # reads as real; other sources get their own namespace before the series' hash tag.
    return f"{PREFIX}:hist:" if source == REAL else f"{PREFIX}:hist:{source}:"


def series_index(source: str = REAL) -> str:
    """set of the series keys with history in ``source`` (real: ``ga:series``)."""
    return SERIES_INDEX if source == REAL else f"{SERIES_INDEX}:{source}"


def history_raw(series: str, source: str = REAL) -> str:
    """zset of the series' price changes: member ``"{ms}:{price}"``, score ms (raw tier)."""
    return f"{_history_ns(source)}{{{series}}}:raw"


def history_hourly(series: str, source: str = REAL) -> str:
    """zset of day blobs of hourly rollups, score = the day's start in ms (rollup tier)."""
    return f"{_history_ns(source)}{{{series}}}:hourly"


def history_meta(series: str, source: str = REAL) -> str:
    """hash: extent and tier boundaries of the series (first/last seen ms, rolled-until ms)."""
    return f"{_history_ns(source)}{{{series}}}:meta"


def offer_source(provider: str) -> str:
    """string: the history source (``real``, ``replay:<market>``) of the provider's latest
    offers; written with them, expires with them."""
    return f"{_offers_tag(provider)}:source"


def offer_price_since(provider: str) -> str:
    """hash series -> ``"{price}|{ms}"``: each latest offer's price and since when it is
    listed at that price (its first poll at that price); replaced with the offers."""
    return f"{_offers_tag(provider)}:since"


def lease(name: str) -> str:
    return f"{PREFIX}:lease:{name}"


# --- the policy in the daemon: availability samples, spend per owner, budget webhook -----
OFFER_SAMPLES = f"{PREFIX}:offers:samples"    # hash series -> "0"/"1" per poll, oldest first
# The three budget-alert lists share the ``{budget}`` tag: an alert moves between them in one
# atomic command or transaction, on Redis Cluster too.
BUDGET_OUTBOX = f"{PREFIX}:notify:{{budget}}"      # list of budget-alert JSON payloads to POST
BUDGET_INFLIGHT = f"{PREFIX}:notify:{{budget}}:inflight"  # list: taken by a delivery run
BUDGET_DEAD = f"{PREFIX}:notify:{{budget}}:dead"  # list: alerts given up on (tries/age)
BUDGET_SETTINGS = f"{PREFIX}:config:budgets"   # JSON: per-user limits, webhook on/off


def owner_spend(owner: str) -> str:
    """hash job_id -> USD spent by that job (as of its last reconcile step), one per owner."""
    return f"{PREFIX}:spend:{{{owner}}}"


# --- observability: event stream, per-job summaries, counters shared by replicas --------
EVENTS = f"{PREFIX}:events"                    # stream of job timeline events (capped)
JOB_SUMMARIES = f"{PREFIX}:jobs:summary"       # hash active job_id -> JSON (state, money saved)
JOBS_FINISHED = f"{PREFIX}:jobs:finished"      # hash finished job_id -> USD saved (counted below)
METRIC_FINISHED_STATES = f"{PREFIX}:metrics:finished"  # hash terminal state -> finished jobs
METRIC_FINISHED_SAVED = f"{PREFIX}:metrics:finished-saved-usd"  # float: USD saved, finished jobs
METRIC_BACKFILLED = f"{PREFIX}:metrics:backfilled"  # set once jobs stored before the figures
                                                    # existed were counted (a lock while it runs)
METRIC_PREEMPTIONS = f"{PREFIX}:metrics:preemptions"  # hash provider -> placements preempted
METRIC_MIGRATIONS = f"{PREFIX}:metrics:migrations"    # hash reason -> migrations started
METRIC_WASTE = f"{PREFIX}:metrics:waste"  # hash waste alert -> alerts raised
METRIC_PROVIDER_ERRORS = f"{PREFIX}:metrics:provider-errors"  # hash "provider|op|kind" -> n


# --- several replicas: fences, service leases, what replicas must share ------------------
SHARED_OWNER = f"{PREFIX}:config:owner"          # instance ownership tag of this installation
SHARED_STORE_URL = f"{PREFIX}:config:store-url"  # checkpoint store URL every replica uses
RECONCILERS = f"{PREFIX}:reconcilers"            # zset replica id -> last pass ms
ORPHAN_SWEEP_LEASE = lease("orphan-sweep")


def lease_fence(lease_key: str) -> str:
    """Fence counter of a lease; in the lease key's hash slot (its tag, or the whole key)."""
    return f"{lease_key}:fence" if "{" in lease_key else f"{{{lease_key}}}:fence"


def poller_lease(provider: str) -> str:
    return lease(f"poll:{provider}")


def replica(replica_id: str) -> str:
    """JSON about one live replica (API URL, secret fingerprints); expires unless renewed."""
    return f"{PREFIX}:replica:{replica_id}"


# Written by older versions for every launched instance, never read: deleted at daemon start.
LEGACY_INSTANCES_INDEX = f"{PREFIX}:instances"
LEGACY_INSTANCE_PATTERN = f"{PREFIX}:instance:*"


def known_names(attribute: str) -> str:
    """Set of every ``provider``/``region``/``zone``/``gpu_model``/``instance_type`` value an
    offer poll has listed (scheduler/store/known_names.py)."""
    return f"{PREFIX}:known:{attribute}"


# --- the team's own hosts (providers/fleet): one fleet's keys share its hash tag ----------
def fleet_gpus(fleet: str) -> str:
    """hash ``"<host>#<gpu index>"`` -> instance id holding that GPU (the slot ledger)."""
    return f"{PREFIX}:fleet:{{{fleet}}}:gpus"


def fleet_claims(fleet: str) -> str:
    """hash instance id -> JSON ``{host, gpus, claimed_at_ms, detail}``, one per slot claim."""
    return f"{PREFIX}:fleet:{{{fleet}}}:claims"


def fleet_drained(fleet: str) -> str:
    """hash host -> ms when it was drained (no new claims; its instances get a notice)."""
    return f"{PREFIX}:fleet:{{{fleet}}}:drained"


def fleet_seen(fleet: str) -> str:
    """hash host -> ms of the last SSH contact that succeeded."""
    return f"{PREFIX}:fleet:{{{fleet}}}:seen"

# Users, API tokens and the audit stream (scheduler/store/users.py). The user and token keys
# share the ``{auth}`` hash tag: creating or revoking a token is one transaction.
USERS = f"{PREFIX}:{{auth}}:users"            # hash user name -> user JSON
TOKENS = f"{PREFIX}:{{auth}}:tokens"          # hash sha256(token) -> token record JSON
TOKEN_IDS = f"{PREFIX}:{{auth}}:token-ids"    # hash token id -> sha256(token)
AUDIT = f"{PREFIX}:audit"                      # stream of state-changing requests (capped)
AUDIT_REFUSED = f"{PREFIX}:audit:refused"      # stream of refused unauthenticated ones (capped)


def form_once(nonce: str) -> str:
    """string: the token id a dashboard form with this one-time ``nonce`` created (short TTL)."""
    return f"{PREFIX}:ui:once:{nonce}"

# Index of price-history series by field (scheduler/store/history_index.py). Every index key
# of one source shares the ``{<source>}`` hash tag, so SINTER over several fields works on
# Redis Cluster; a series' own keys (tag ``{series}``) never share a script with them.


def history_index(source: str, field: str, value: str) -> str:
    """set of the series of ``source`` whose ``field`` (provider, region, zone, instance_type,
    market) is ``value`` (lower case)."""
    return f"{PREFIX}:hist:ix:{{{source}}}:{field}:{value}"


def history_index_built(source: str) -> str:
    """string ``"1"`` once the index of ``source`` holds every series of its series index
    (series created since are indexed by their writer); absent: build it, or scan."""
    return f"{PREFIX}:hist:ix:{{{source}}}:built"


def history_index_lock(source: str) -> str:
    """string with a TTL: held by the replica building the index of ``source``."""
    return f"{PREFIX}:hist:ix:{{{source}}}:building"

# Job writes on Redis Cluster (scheduler/store/outbox.py): a job write's side writes to the
# global keys above are queued in the job's own slot and applied after it commits, each at
# most once, guarded by a key in the target key's slot.


def job_outbox(job_id: str) -> str:
    """list of JSON entries ``{"id": "<job_id>:<version>", "ops": [...]}``: side writes of
    committed job writes not yet applied (normally empty)."""
    return f"{PREFIX}:job:{{{job_id}}}:outbox"


JOBS_DIRTY = f"{PREFIX}:jobs:dirty"  # zset "<job_id>:<version>" -> ms a write of it began


def slot_prefix(key: str) -> str:
    """The part of ``key`` up to and including its hash tag (``ga:spend:{alice}``), or
    ``{key}`` for an untagged key: a key starting with it is in ``key``'s slot."""
    start = key.find("{")
    end = key.find("}", start + 1) if start >= 0 else -1
    if start >= 0 and end > start + 1:
        return key[:end + 1]
    return f"{{{key}}}"


def op_once(target: str, op_id: str) -> str:
    """string with a TTL: the side write ``op_id`` was applied to ``target`` (its slot)."""
    return f"{slot_prefix(target)}:once:{op_id}"


def op_version(target: str, job_id: str) -> str:
    """string with a TTL: the newest job version whose state ``target`` (its slot) holds."""
    return f"{slot_prefix(target)}:ver:{job_id}"


# The budget-alert lists as older versions named them (untagged: each its own slot); their
# items are moved to the lists above by BudgetOutbox.recover().
LEGACY_BUDGET_LISTS = ((f"{PREFIX}:notify:budget:inflight", BUDGET_OUTBOX),
                       (f"{PREFIX}:notify:budget", BUDGET_OUTBOX),
                       (f"{PREFIX}:notify:budget:dead", BUDGET_DEAD))
