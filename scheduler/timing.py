"""Every TTL, poll interval and timeout of the service, with why it has its value.

Units are in the names. Replayed markets compress market time, not these wall-clock timings.
"""

# The policy's restart overhead has its one definition, and its reason, with the units.
from core.units import RESTART_OVERHEAD_H  # noqa: F401  (the controller reads it here)

# How often the reconcile loop runs over active jobs; a step is cheap, so react quickly.
RECONCILE_INTERVAL_S = 1.0
# How often providers are polled for offers and prices. Real clouds change spot prices at most
# every few minutes; a replayed market changes as fast as its time scale, so it is polled faster.
OFFER_POLL_S = 60.0
REPLAY_OFFER_POLL_S = 2.0
# How long an offer that failed with a capacity error (or was just reclaimed) is skipped
# (Karpenter's unavailable-offerings cache uses 3 minutes).
UNAVAILABLE_OFFER_TTL_S = 180
# Agent heartbeats every AGENT_HEARTBEAT_S; an agent silent for AGENT_LOST_AFTER_S is presumed
# lost, whether or not its provider still lists the instance running (a frozen agent): the
# instance is terminated and the job resumes from its latest committed checkpoint. The default
# of the daemon's setting (scheduler.daemon.DaemonSettings.agent_lost_after_s), which
# GA_AGENT_LOST_AFTER_S overrides (tests make an agent "lost" in seconds, not a minute).
AGENT_HEARTBEAT_S = 2.0
AGENT_LOST_AFTER_S = 60.0
# Clouds list a new instance with some delay after the launch call answered: ECS may leave it out
# of DescribeInstances for up to two minutes (EC2 for seconds). One not listed yet this soon
# after its launch is not taken for gone by the controller, and is reported pending by an
# adapter that tracks its launches (Alibaba). One value for both, the slowest cloud's.
INSTANCE_LISTING_GRACE_S = 120.0
# After the grace period the agent still needs time to upload the checkpoint.
CHECKPOINT_SYNC_TIMEOUT_S = 300.0
# A job control lease outlives a few reconcile passes so a slow pass does not lose it, and is
# short enough that a dead replica's jobs are taken over quickly.
JOB_LEASE_TTL_S = 15
# Orphan collection: instances we own that no job claims are terminated after this age, so an
# instance launched a moment before its job record was written is not killed by mistake.
ORPHAN_GRACE_S = 30.0
ORPHAN_SWEEP_S = 10.0
# How often the daemon checks that its embedded Redis still runs (and restarts it from its AOF).
EMBEDDED_REDIS_CHECK_S = 2.0
# Log lines kept per job in Redis.
JOB_LOG_MAX_LINES = 10_000
# Latest offers expire if no poll refreshed them (a provider gone silent must not look current).
OFFERS_TTL_S = 3600

# --- the node agent (scheduler/agent/) ---------------------------------------------------

# The main loop wakes this often to poll the preemption notice and check the job: AWS gives a
# 2-minute notice and recommends polling every 5 s, so 1 s leaves the job nearly all of it.
AGENT_LOOP_TICK_S = 1.0
# Reports to the daemon: connect fails fast when it is down; a heartbeat must not stall the
# loop for long (a dropped heartbeat is harmless, the next one carries the same log lines).
REPORT_CONNECT_TIMEOUT_S = 2.0
REPORT_TIMEOUT_S = 5.0
# Instance metadata is link-local and answers in milliseconds; a slow answer means trouble.
METADATA_TIMEOUT_S = 1.0
# ... each step of it (connect, each read); the whole answer, however it trickles in, gets this
# long: a replayed cloud on two busy cores has answered past 1 s in all, and a deadline that
# short read every notice as "no answer".
METADATA_DEADLINE_S = 5.0
# IMDSv2 session token lifetime (AWS allows 1..21600 s) and how long before expiry we renew it.
IMDS_TOKEN_TTL_S = 21600
IMDS_TOKEN_RENEW_BEFORE_S = 60
# Final reports, checkpoint uploads, restores and code downloads are retried this long (the
# daemon or the store may be restarting), with exponential backoff from FIRST to MAX wait.
AGENT_FINAL_RETRY_FOR_S = 600.0
AGENT_RETRY_FIRST_WAIT_S = 0.5
AGENT_RETRY_MAX_WAIT_S = 5.0
# After SIGKILL, how long to wait for the job's process to be reaped.
AGENT_KILL_WAIT_S = 5.0
# After the job exits, how long to wait for the rest of its output (children may still write).
AGENT_OUTPUT_DRAIN_S = 2.0

# --- the policy in the daemon (placement, price migration, budgets) ------------------------

# Availability samples kept per offer, one per offer poll (1 = listed, 0 = absent): 288 polls
# span 4.8 h at the 60 s cloud poll (OFFER_POLL_S) and 9.6 min of wall time (9.6 market hours
# at time_scale 60) at the 2 s replay poll: enough for mean up/down run lengths, and bounded
# (288 bytes per offer).
OFFER_SAMPLES_KEPT = 288
# Budget webhook: a delivery run every few seconds (never inside the reconcile loop); each alert
# gets one short POST per run; a failed one goes to the back of the queue with an exponential
# backoff (so it never blocks the alerts behind it) and to a dead-letter list after
# BUDGET_WEBHOOK_ATTEMPTS tries or BUDGET_WEBHOOK_MAX_AGE_S. A run stops after
# BUDGET_WEBHOOK_BATCH POSTs or BUDGET_WEBHOOK_RUN_S (under the interval, so runs never overlap
# and a shutdown waits at most that long). The lease keeps one replica delivering at a time; a
# run that died leaves its in-flight items, requeued by the next run.
BUDGET_WEBHOOK_INTERVAL_S = 5.0
BUDGET_WEBHOOK_TIMEOUT_S = 2.0
BUDGET_WEBHOOK_RUN_S = 4.0
BUDGET_WEBHOOK_ATTEMPTS = 12
BUDGET_WEBHOOK_BACKOFF_S = 5.0       # first retry delay; doubles per attempt
BUDGET_WEBHOOK_BACKOFF_MAX_S = 600.0
BUDGET_WEBHOOK_MAX_AGE_S = 24 * 3600.0
BUDGET_WEBHOOK_BATCH = 50
BUDGET_WEBHOOK_LEASE_S = 60.0

# --- observability: event stream, /metrics ---------------------------------------------------

# Job events kept in the Redis stream (approximate trim): ~100k events is days of a busy
# installation and a few tens of MB; older events stay in each job's own timeline.
EVENTS_STREAM_MAXLEN = 100_000
# Longest a GET /v1/events may wait for new events: long enough for cheap follow loops (one
# idle request per 5 s), well under the 10 s read timeout common in HTTP clients and proxies,
# and short enough that waiting requests never tie up the API's worker threads for long.
EVENTS_MAX_WAIT_S = 5.0
# A waiting GET /v1/events re-reads the stream this often (a non-blocking read in the
# threadpool, an asyncio sleep between): waiters hold no worker thread, and 200 waiters cost
# ~800 tiny Redis reads/s at most; a new event reaches a follower within this delay.
EVENTS_POLL_S = 0.25
# Stream entries one events request reads at most while filtering by job, so a filter that
# matches nothing costs a bounded scan; the cursor still advances past what was scanned.
EVENTS_SCAN_MAX = 5_000
# Buckets (s) of the offer poll latency histogram: replayed markets answer in ms, a cold poll
# of many cloud regions takes tens of seconds.
POLL_LATENCY_BUCKETS_S = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
# Buckets (s) of the reconcile pass duration histogram: the benchmark target is 1,000 jobs in
# well under the 1 s reconcile interval.
RECONCILE_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)

# --- several replicas on one Redis -----------------------------------------------------

# A poller's lease lasts this many of its poll intervals (at least POLL_LEASE_MIN_S), so a
# slow poll keeps it, and a dead owner's poller is taken over within that time.
POLL_LEASE_INTERVALS = 3
POLL_LEASE_MIN_S = 10.0
# The orphan sweep runs on one replica at a time; taken over within this after its owner died.
ORPHAN_SWEEP_LEASE_S = 3 * ORPHAN_SWEEP_S
# Each live replica's registry entry (API URL, secret fingerprints) is renewed this often and
# expires this long after its last renewal (a replica killed outright drops out by itself).
REPLICA_HEARTBEAT_S = 5.0
REPLICA_TTL_S = 30.0
# Replicas split the jobs evenly: each takes at most ceil(jobs / replicas) job leases, counting
# the replicas whose reconcile pass ran within this window. As long as a job lease: a replica
# killed outright stops counting when its leases expire, so its jobs wait no longer.
RECONCILER_ACTIVE_WINDOW_S = JOB_LEASE_TTL_S
# A reconcile pass takes leases and reads jobs this many at a time (one round trip each): far
# fewer round trips than one per job, and a batch's steps run well within its leases' TTL.
RECONCILE_BATCH = 50

# --- Redis client reconnects --------------------------------------------------------------

# A command whose connection fails (Redis restarting, a failover) is retried on a new
# connection REDIS_RETRIES times, with full-jitter exponential backoff (redis-py's
# ExponentialWithJitterBackoff: the n-th wait is random in [0, min(MAX, FIRST * 2**n)], i.e.
# up to 0.1, 0.2, 0.4, 0.8, 1, 1 s: at most 3.5 s in all, ~2.3 s on average), then fails to its
# caller, which retries on its next pass; so a thread never hangs on a dead Redis and a
# restart of a few seconds is mostly absorbed.
REDIS_RETRIES = 6
REDIS_RETRY_FIRST_WAIT_S = 0.05
REDIS_RETRY_MAX_WAIT_S = 1.0
# Connecting to a live Redis takes milliseconds; a server that is down refuses at once.
REDIS_CONNECT_TIMEOUT_S = 2.0

# --- budgets ---------------------------------------------------------------------------------

# How often a running job's spend is written to its owner's ledger when the owner has no
# per-user limit (with a limit: every pass). Only a limit configured later reads it.
LEDGER_REFRESH_S = 60.0

# A running job is reviewed for a price-driven move at most this often (and at most once per
# offer poll): a move takes minutes (checkpoint, relaunch, restore), so reacting to a price
# faster gains nothing, and each review costs ~1-3 ms of CPU per job (1,000 jobs on a market
# that changes every second would otherwise spend seconds per pass on reviews).
MOVE_REVIEW_MIN_S = 30.0
# A running placement records its held offer's price changes from price history at most this
# often (and once per offer poll): a market whose prices move every second would otherwise
# write every running job every pass. The bill stays exact (changes keep their own times, the
# rest is read when the placement ends); cost so far lags by at most this. A price above the
# job's max is acted on at the next pass regardless. One small Redis read per running job.
PRICE_CATCH_UP_S = 30.0

# A job that chose to leave an offer (a price move, or its price rose above the job's max) is
# not placed on that offer again for this many market hours: a price hovering at the limit
# would otherwise cost a checkpoint and a relaunch every poll, each billed above the max.
LEFT_OFFER_COOLDOWN_H = 1.0

# `schedctl audit --follow` asks for new audit entries this often (seconds).
AUDIT_FOLLOW_POLL_S = 2.0
