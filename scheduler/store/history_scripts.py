"""Lua scripts of the price-history store, each run atomically by Redis on one series' keys
(which share the ``{series}`` hash tag, so they work on Redis Cluster); no script touches a
key of another slot (the series indexes are written by the callers). Every key goes in
through KEYS. Prices travel as canonical text (:func:`scheduler.store.rollups.price_text`) so
equal prices compare equal as strings; times are UTC milliseconds.
"""

from __future__ import annotations

from redis.exceptions import NoScriptError

# Append price observations to one series, keeping only price changes.
# KEYS[1]: raw zset (member "{ms}:{price}", score ms). KEYS[2]: meta hash. KEYS[3]: rollup
#   zset (one series' keys, one slot: the series indexes are written by the caller, outside,
#   see history_index).
# ARGV[1]: "seen_until,source,raw_window,slack,cap" (one argument: the client's time to pack
#   a command grows with its argument count, and this runs once per series per append):
#   - seen_until: "seen until" ms, the end of the span the caller observed (may be later
#     than every point; "" for none);
#   - source: the history source ("real", "replay:<market>"); written to the meta hash as
#     "source" when this call creates the series, so series created before sources existed
#     (no "source" field) can be told apart;
#   - raw_window, slack, cap: the raw window (ms), the compaction slack (ms) and the raw point
#     cap of the retention settings (see history_compaction.due_for_compaction, the same test).
# ARGV[2]: the observations "ms:price,ms:price,...", ascending by ms (one argument: packing
#   thousands of arguments costs more than parsing one string).
# An observation older than the rolled-up frontier (meta rolled_until_ms) is "late" and
# dropped; one equal to the price in force at its time is "unchanged" and not stored; a
# different price at an existing point's ms replaces it. After an insert in the middle, the
# next point is removed when it no longer changes the price. Observations newer than every
# raw point (the usual case) take a fast path: one command per change.
# Returns one string (one reply to parse, not a nested array: parsing replies is most of a
# client's time): "stored,unchanged,late,to_index,due", where to index is 1 when the series
# has history but its meta lacks "ix" (never indexed, or its writer died before indexing it;
# the caller indexes it, then sets "ix"), and due is 0 when no compaction is due, 2 when due
# with more raw points than the cap (the caller compacts it the long way), 1 when due by age
# alone. With due 1, more lines follow with what the compaction plan needs, read in this same
# atomic call: the age cutoff ms; the meta hash as "field<TAB>value<TAB>..."; the raw members
# before the cutoff, space-separated; the newest rollup blob ("" for none).
APPEND = """
local seen_until_text, source, raw_window, slack, cap =
  string.match(ARGV[1], '^([^,]*),([^,]*),([^,]*),([^,]*),([^,]*)$')
local m = redis.call('HMGET', KEYS[2], 'rolled_until_ms', 'rolled_price', 'first_ms', 'last_seen_ms', 'ix')
local rolled = tonumber(m[1] or '')
local rolled_price = m[2] or false
local first = tonumber(m[3] or '')
local seen = tonumber(m[4] or '')
local indexed = m[5]
local created = (first == nil)
local stored, unchanged, late = 0, 0, 0
local function price_of(member)
  return string.sub(member, string.find(member, ':', 1, true) + 1)
end
local newest_ms, newest_price = nil, rolled_price
local function refresh_newest()
  local newest = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  if #newest > 0 then
    newest_ms, newest_price = tonumber(newest[2]), price_of(newest[1])
  else
    newest_ms, newest_price = nil, rolled_price
  end
end
refresh_newest()
-- New changes past the newest point wait here and go in with one ZADD (a call from Lua costs
-- more than the insert); anything that reads the zset flushes them first. Bounded, as unpack
-- is by Lua's C stack.
local pending = {}
local function flush()
  if #pending > 0 then
    redis.call('ZADD', KEYS[1], unpack(pending))
    pending = {}
  end
end
for ms_text, price in string.gmatch(ARGV[2], '(%d+):([^,]+)') do
  local ms = tonumber(ms_text)
  if rolled and ms < rolled then
    late = late + 1
  elseif newest_ms == nil or ms > newest_ms then
    if newest_price == price then
      unchanged = unchanged + 1
    else
      pending[#pending + 1] = ms_text
      pending[#pending + 1] = ms_text .. ':' .. price
      if #pending >= 1000 then flush() end
      stored = stored + 1
      newest_ms, newest_price = ms, price
    end
  else
    flush()
    local prev = redis.call('ZREVRANGEBYSCORE', KEYS[1], ms_text, '-inf', 'WITHSCORES', 'LIMIT', 0, 1)
    if #prev > 0 and tonumber(prev[2]) == ms and price_of(prev[1]) ~= price then
      redis.call('ZREM', KEYS[1], prev[1])
      prev = redis.call('ZREVRANGEBYSCORE', KEYS[1], '(' .. ms_text, '-inf', 'WITHSCORES', 'LIMIT', 0, 1)
    end
    local before = rolled_price
    if #prev > 0 then before = price_of(prev[1]) end
    if before == price then
      unchanged = unchanged + 1
    else
      redis.call('ZADD', KEYS[1], ms_text, ms_text .. ':' .. price)
      stored = stored + 1
      local nxt = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. ms_text, '+inf', 'LIMIT', 0, 1)
      if #nxt > 0 and price_of(nxt[1]) == price then
        redis.call('ZREM', KEYS[1], nxt[1])
      end
    end
    refresh_newest()
  end
  if rolled == nil or ms >= rolled then
    if not first or ms < first then first = ms end
    if not seen or ms > seen then seen = ms end
  end
end
flush()
local seen_until = tonumber(seen_until_text)
if seen_until and first and (not seen or seen_until > seen) then seen = seen_until end
if first then
  redis.call('HSET', KEYS[2], 'first_ms', string.format('%d', first), 'last_seen_ms', string.format('%d', seen))
  if created then redis.call('HSET', KEYS[2], 'source', source) end
end
local to_index = 0
if first and not indexed then to_index = 1 end
local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local oldest_ms = -1
if #oldest > 0 then oldest_ms = tonumber(oldest[2]) end
local count = redis.call('ZCARD', KEYS[1])
local head = stored .. ',' .. unchanged .. ',' .. late .. ',' .. to_index .. ','
if oldest_ms < 0 or not seen then return head .. '0' end
local hour = 3600000
local by_age = (seen - tonumber(raw_window)) - (seen - tonumber(raw_window)) % hour
cap = tonumber(cap)
if not (oldest_ms < by_age - tonumber(slack) or count > cap * 1.1) then return head .. '0' end
if count > cap then return head .. '2' end
local cutoff = string.format('%d', by_age)
local blob = redis.call('ZRANGE', KEYS[3], -1, -1)
return table.concat({head .. '1', cutoff,
  table.concat(redis.call('HGETALL', KEYS[2]), '\\t'),
  table.concat(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. cutoff), ' '),
  blob[1] or ''}, '\\n')
"""

# Move the raw points before a cutoff into hourly rollups (computed by the caller), if the
# series did not change since the caller read it; then drop rollups past retention.
# KEYS[1]: raw zset. KEYS[2]: rollup zset (day blobs scored by day start ms). KEYS[3]: meta hash.
# ARGV[1]: "rolled,cutoff,digest,rolled_price,horizon,first_ms,base_price" (one argument, as
#   APPEND's settings):
#   - rolled: rolled_until_ms the caller read ("" when none); cutoff: ms (an hour boundary);
#   - digest: sha1 hex of the raw members before the cutoff, joined with "\\n", as read;
#   - rolled_price: the new one (price in force at the cutoff); horizon: retention horizon ms
#     (day start; rollups scored before it are dropped; "" for none); first_ms: the new one;
#   - base_price: the new one (price in force at first_ms when first_ms is not a point; "" none).
# ARGV[2], ARGV[3], ...: pairs day start ms, day blob (replacing that day's blob).
# Returns 1 when applied, 0 when the series changed meanwhile (the caller retries later).
COMPACT = """
local read_rolled, cutoff, digest, rolled_price, horizon, first_ms, base_price =
  string.match(ARGV[1], '^([^,]*),([^,]*),([^,]*),([^,]*),([^,]*),([^,]*),([^,]*)$')
local rolled = redis.call('HGET', KEYS[3], 'rolled_until_ms') or ''
if rolled ~= read_rolled then return 0 end
local members = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. cutoff)
if redis.sha1hex(table.concat(members, '\\n')) ~= digest then return 0 end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. cutoff)
for i = 2, #ARGV, 2 do
  redis.call('ZREMRANGEBYSCORE', KEYS[2], ARGV[i], ARGV[i])
  redis.call('ZADD', KEYS[2], ARGV[i], ARGV[i + 1])
end
if horizon ~= '' then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. horizon)
end
redis.call('HSET', KEYS[3], 'rolled_until_ms', cutoff, 'rolled_price', rolled_price, 'first_ms', first_ms)
if base_price ~= '' then
  redis.call('HSET', KEYS[3], 'base_price', base_price)
end
return 1
"""

# Move one series stored before history sources existed (the real namespace, meta without a
# "source" field) into a replayed market's namespace, when the caller found every price in
# it to be one that market quotes. Keys of both namespaces share the ``{series}`` hash tag.
# KEYS[1..3]: legacy raw zset, rollup zset, meta hash. KEYS[4..6]: the same in the target
#   source. (The series indexes are other slots: the caller moves the series between them
#   after a move; the moved meta loses "ix", so the next append re-indexes it if the caller
#   died first.)
# ARGV[1]: the series key. ARGV[2]: the target source ("replay:<market>"). ARGV[3]: the
#   legacy raw count the caller checked (the move is refused when it changed since).
# Returns 1 when moved; 0 when not legacy (absent, or has a source) or changed meanwhile;
# -1 when the target already holds that series (left as it is: never merged, never lost).
ADOPT_LEGACY = """
if redis.call('EXISTS', KEYS[3]) == 0 then return 0 end
if redis.call('HEXISTS', KEYS[3], 'source') == 1 then return 0 end
if redis.call('ZCARD', KEYS[1]) ~= tonumber(ARGV[3]) then return 0 end
if redis.call('EXISTS', KEYS[6]) == 1 then return -1 end
for i = 1, 3 do
  if redis.call('EXISTS', KEYS[i]) == 1 then redis.call('RENAME', KEYS[i], KEYS[i + 3]) end
end
redis.call('HSET', KEYS[6], 'source', ARGV[2], 'adopted_from', 'legacy')
redis.call('HDEL', KEYS[6], 'ix')
return 1
"""


def run_pipelined(client, script, calls: list[tuple[list[str], list]]) -> list:
    """Run ``script`` once per ``(keys, args)`` of ``calls`` in one pipelined round trip;
    returns the replies in order.

    ``script``: a registered :class:`redis.commands.core.Script`. A server that does not know
    it yet (a new server, a promoted replica, a flushed script cache; a Cluster pipeline never
    loads scripts itself) answers NOSCRIPT: those calls are run again after loading it (on
    every primary of a Cluster). Raises the first other error."""
    if not calls:
        return []
    replies = _execute(client, script, calls)
    missing = [i for i, r in enumerate(replies) if isinstance(r, NoScriptError)]
    if missing:
        client.script_load(script.script)
        for i, reply in zip(missing, _execute(client, script, [calls[i] for i in missing])):
            replies[i] = reply
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return replies


def _execute(client, script, calls: list[tuple[list[str], list]]) -> list:
    with client.pipeline(transaction=False) as pipe:
        for keys, args in calls:
            # A raw EVALSHA: a plain pipeline given the Script would first ask SCRIPT EXISTS
            # (one more round trip per call), and a Cluster pipeline blocks its evalsha method
            # but routes a raw EVALSHA by its keys. NOSCRIPT is handled by the caller.
            pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
        return pipe.execute(raise_on_error=False)
