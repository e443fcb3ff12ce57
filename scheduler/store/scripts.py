"""Lua scripts, each run atomically by Redis. Every key goes in through KEYS."""

# Renew a lease only if we still hold it.
# KEYS[1]: lease key. ARGV[1]: holder token. ARGV[2]: new TTL in milliseconds.
# Returns 1 if renewed, 0 if the lease is held by someone else or expired.
RENEW_LEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""

# Release a lease only if we still hold it.
# KEYS[1]: lease key. ARGV[1]: holder token. Returns 1 if released, 0 otherwise.
RELEASE_LEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""
