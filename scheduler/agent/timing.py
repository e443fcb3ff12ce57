"""Every interval, timeout and retry bound of the node agent, with why it has its value.

Units are in the names. These belong beside the service's own in :mod:`scheduler.timing`; the
heartbeat is shared with the daemon, which decides from it when an agent is lost.
"""

from scheduler.timing import AGENT_HEARTBEAT_S

# The main loop wakes this often to poll the preemption notice and check the job: AWS gives a
# 2-minute notice and recommends polling every 5 s, so 1 s leaves the job nearly all of it.
LOOP_TICK_S = 1.0
# Heartbeat reports (shared with the daemon's lost-agent detection).
HEARTBEAT_S = AGENT_HEARTBEAT_S
# Reports to the daemon: connect fails fast when it is down; a heartbeat must not stall the
# loop for long (a dropped heartbeat is harmless, the next one carries the same log lines).
REPORT_CONNECT_TIMEOUT_S = 2.0
REPORT_TIMEOUT_S = 5.0
# Instance metadata is link-local and answers in milliseconds; a slow answer means trouble.
METADATA_TIMEOUT_S = 1.0
# IMDSv2 session token lifetime (AWS allows 1..21600 s) and how long before expiry we renew it.
IMDS_TOKEN_TTL_S = 21600
IMDS_TOKEN_RENEW_BEFORE_S = 60
# Final reports, checkpoint uploads, restores and code downloads are retried this long (the
# daemon or the store may be restarting), with exponential backoff from FIRST to MAX wait.
FINAL_RETRY_FOR_S = 600.0
RETRY_FIRST_WAIT_S = 0.5
RETRY_MAX_WAIT_S = 5.0
# After SIGKILL, how long to wait for the job's process to be reaped.
KILL_WAIT_S = 5.0
# After the job exits, how long to wait for the rest of its output (children may still write).
OUTPUT_DRAIN_S = 2.0
