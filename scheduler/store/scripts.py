"""Lua scripts, each run atomically by Redis. Every key goes in through KEYS."""

# Renew a lease only if we still hold it (the same acquisition: holder and fence).
# KEYS[1]: lease key. ARGV[1]: lease value "<holder>/<fence>". ARGV[2]: new TTL in milliseconds.
# Returns 1 if renewed, 0 if the lease is held by someone else or expired.
RENEW_LEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""

# Release a lease only if we still hold it.
# KEYS[1]: lease key. ARGV[1]: lease value "<holder>/<fence>". Returns 1 if released, 0 otherwise.
RELEASE_LEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""

# Take a lease, or extend it if we hold it already, and return its fencing token.
# KEYS[1]: lease key. KEYS[2]: the lease's fence counter (same hash tag).
# ARGV[1]: holder token. ARGV[2]: TTL in milliseconds. ARGV[3]: fence counter TTL in ms.
# The lease's value is "<holder>/<fence>": the fence is INCRemented on every fresh acquisition,
# so it grows for every new holder (and for the same holder after it lost the lease).
# Returns the lease value on success, false when another holder has it.
ACQUIRE_LEASE = """
local value = redis.call('GET', KEYS[1])
if value then
  local sep = string.find(value, '/', 1, true)
  if sep and string.sub(value, 1, sep - 1) == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return value
  end
  return false
end
local fence = redis.call('INCR', KEYS[2])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
value = ARGV[1] .. '/' .. fence
redis.call('SET', KEYS[1], value, 'PX', ARGV[2])
return value
"""

# Take over a lease from an earlier process of the same replica (it is known to be gone), with
# a new fence so that a write it still had in flight is refused; the remaining TTL is kept.
# KEYS[1]: lease key. KEYS[2]: its fence counter. ARGV[1]: the value seen ("<holder>/<fence>").
# ARGV[2]: our holder token. ARGV[3]: fence counter TTL in ms.
# Returns the new lease value, or false when the lease changed or expired meanwhile.
TAKE_OVER_LEASE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return false
end
local ttl = redis.call('PTTL', KEYS[1])
if ttl <= 0 then
  return false
end
local fence = redis.call('INCR', KEYS[2])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
local value = ARGV[2] .. '/' .. fence
redis.call('SET', KEYS[1], value, 'PX', ttl)
return value
"""

# Append an agent's output lines to the job's log, each line once, in order, whatever reports
# are sent again (an answer lost) or cut short (lines the agent had to drop).
# KEYS[1]: the job's log list. KEYS[2]: "<attempt>:<next expected line number>" of one node's
# agent (one key per rank of a gang, so ranks never skip each other's lines; one attempt adds
# output at a time; another attempt's number starts from 0).
# ARGV[1]: number of the first line given. ARGV[2]: lines the log keeps. ARGV[3]: the attempt.
# ARGV[4], ARGV[5]: text before and after the count of a note on missing lines.
# ARGV[6..]: the lines. Lines numbered below the expected one are already there and skipped; a
# gap before the first line is noted in the log. Returns how many lines were appended.
APPEND_AGENT_LINES = """
local expected = 0
local stored = redis.call('GET', KEYS[2])
if stored then
  local sep = string.find(stored, ':', 1, true)
  if sep and string.sub(stored, 1, sep - 1) == ARGV[3] then
    expected = tonumber(string.sub(stored, sep + 1)) or 0
  end
end
local first = tonumber(ARGV[1])
local n = #ARGV - 5
local skip = expected - first
if skip >= n then
  return 0
end
if skip < 0 then
  redis.call('RPUSH', KEYS[1], ARGV[4] .. string.format('%d', -skip) .. ARGV[5])
  skip = 0
end
local pushed = 0
local from = 6 + skip
while from <= #ARGV do
  local to = math.min(from + 999, #ARGV)
  redis.call('RPUSH', KEYS[1], unpack(ARGV, from, to))
  pushed = pushed + (to - from + 1)
  from = to + 1
end
redis.call('LTRIM', KEYS[1], -tonumber(ARGV[2]), -1)
redis.call('SET', KEYS[2], ARGV[3] .. ':' .. string.format('%d', first + n))
return pushed
"""
