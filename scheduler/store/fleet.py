"""The slot ledger of a fleet (``providers/fleet``): which instance holds which GPU of which
host, which hosts are drained, when each host last answered. Shared by every replica.

Every change is one Lua script over the fleet's keys (one hash tag), so two replicas racing
for the last GPU of a host cannot both get it. A claim belongs to its instance, not to the
replica that made it: it has no expiry and ends only with :meth:`FleetLedger.release`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

import redis

from scheduler.store import keys
from scheduler.store.connection import RedisClient

# KEYS[1]: gpus hash, KEYS[2]: claims hash, KEYS[3]: drained hash. ARGV[1]: host,
# ARGV[2]: instance id, ARGV[3]: GPUs wanted (>= 1), ARGV[4]: the claim's JSON without
# ``gpus``, ARGV[5..]: candidate GPU indices in order of preference.
# Returns the claimed indices (the earlier claim's for a known instance), false when fewer
# candidates are free or the host is drained, an error when the instance holds another host.
_CLAIM = """
local existing = redis.call('HGET', KEYS[2], ARGV[2])
if existing then
  local rec = cjson.decode(existing)
  if rec.host ~= ARGV[1] then
    return redis.error_reply('instance ' .. ARGV[2] .. ' holds GPUs of host ' .. rec.host)
  end
  return rec.gpus
end
if redis.call('HEXISTS', KEYS[3], ARGV[1]) == 1 then
  return false
end
local want = tonumber(ARGV[3])
local chosen = {}
for i = 5, #ARGV do
  if #chosen == want then break end
  if redis.call('HEXISTS', KEYS[1], ARGV[1] .. '#' .. ARGV[i]) == 0 then
    table.insert(chosen, tonumber(ARGV[i]))
  end
end
if #chosen < want then
  return false
end
for _, idx in ipairs(chosen) do
  redis.call('HSET', KEYS[1], ARGV[1] .. '#' .. idx, ARGV[2])
end
local rec = cjson.decode(ARGV[4])
rec.gpus = chosen
redis.call('HSET', KEYS[2], ARGV[2], cjson.encode(rec))
return chosen
"""

# KEYS[1]: gpus hash, KEYS[2]: claims hash. ARGV[1]: instance id, ARGV[2]: the claim's
# claimed_at_ms to release only that claim ('' any). Frees the instance's GPUs (only fields
# it still holds) and its claim; returns the indices.
_RELEASE = """
local existing = redis.call('HGET', KEYS[2], ARGV[1])
if not existing then
  return {}
end
local rec = cjson.decode(existing)
if ARGV[2] ~= '' and tonumber(ARGV[2]) ~= rec.claimed_at_ms then
  return {}
end
for _, idx in ipairs(rec.gpus) do
  local gpu = rec.host .. '#' .. string.format('%d', idx)
  if redis.call('HGET', KEYS[1], gpu) == ARGV[1] then
    redis.call('HDEL', KEYS[1], gpu)
  end
end
redis.call('HDEL', KEYS[2], ARGV[1])
return rec.gpus
"""

# KEYS[1]: claims hash. ARGV[1]: instance id, ARGV[2]: ms. Notes that the instance is to end
# (its GPUs stay claimed until its processes are known gone); returns 0 when it has no claim.
_MARK_ENDING = """
local existing = redis.call('HGET', KEYS[1], ARGV[1])
if not existing then
  return 0
end
local rec = cjson.decode(existing)
if not rec.ending_at_ms then
  rec.ending_at_ms = tonumber(ARGV[2])
  redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(rec))
end
return 1
"""

# KEYS[1]: seen hash. ARGV[1]: host, ARGV[2]: ms. Keeps the latest time (replicas race).
_MARK_SEEN = """
local old = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
if tonumber(ARGV[2]) > old then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
end
return 1
"""


def _ms(at: datetime) -> int:
    return int(at.timestamp() * 1000)


def _at(ms: str | int) -> datetime:
    return datetime.fromtimestamp(int(ms) / 1000, UTC)


@dataclass(frozen=True)
class Claim:
    """One slot claim: ``gpus`` (indices) of ``host`` held by its instance since
    ``claimed_at`` (aware UTC); ``detail`` is what the claimer kept with it (str -> str);
    ``ending_at``: when the instance was asked to end while its host could not be reached
    (``None``: it was not)."""

    host: str
    gpus: tuple[int, ...]
    claimed_at: datetime
    detail: dict[str, str] = field(default_factory=dict)
    ending_at: datetime | None = None


class FleetLedger:
    """The slot ledger of the fleet provider named ``fleet`` over ``client`` (a Redis client
    with ``decode_responses=True``). Safe to share between threads. Raises
    ``redis.RedisError`` when Redis cannot be reached; ``ValueError`` for a bad argument."""

    def __init__(self, client: RedisClient, fleet: str) -> None:
        if not fleet:
            raise ValueError("fleet: a provider name is required")
        self.fleet = fleet
        self._r = client
        self._gpus = keys.fleet_gpus(fleet)
        self._claims = keys.fleet_claims(fleet)
        self._drained = keys.fleet_drained(fleet)
        self._seen = keys.fleet_seen(fleet)
        self._claim = client.register_script(_CLAIM)
        self._release = client.register_script(_RELEASE)
        self._mark_seen = client.register_script(_MARK_SEEN)
        self._mark_ending = client.register_script(_MARK_ENDING)

    def claim(self, host: str, free_gpu_indices: Iterable[int], count: int, instance_id: str,
              detail: Mapping[str, str] | None = None,
              at: datetime | None = None) -> list[int] | None:
        """Claim ``count`` GPUs of ``host`` for ``instance_id``: the first of
        ``free_gpu_indices`` (what the host reports free, in order of preference) that no
        other instance holds. Returns their indices, or ``None`` when fewer are free or the
        host is drained. A second claim for the same instance returns its first one's GPUs.
        Raises ``ValueError`` when ``count`` < 1 or the instance holds GPUs of another host."""
        if count < 1:
            raise ValueError(f"count: at least 1 GPU, got {count}")
        candidates = list(dict.fromkeys(int(i) for i in free_gpu_indices))
        record = json.dumps({"host": host, "claimed_at_ms": _ms(at or datetime.now(UTC)),
                             "detail": dict(detail or {})})
        try:
            got = self._claim(keys=[self._gpus, self._claims, self._drained],
                              args=[host, instance_id, count, record, *candidates])
        except redis.ResponseError as exc:
            raise ValueError(str(exc)) from None
        return None if got is None else [int(i) for i in got]

    def release(self, instance_id: str, claimed_at: datetime | None = None) -> list[int]:
        """Free the GPUs ``instance_id`` holds; returns their indices (``[]`` when it held
        none: releasing twice is harmless). With ``claimed_at`` only the claim made then is
        released (one seen earlier, not a newer claim of the same instance)."""
        since = "" if claimed_at is None else str(_ms(claimed_at))
        return [int(i) for i in self._release(keys=[self._gpus, self._claims],
                                              args=[instance_id, since])]

    def mark_ending(self, instance_id: str, at: datetime | None = None) -> bool:
        """Note that ``instance_id`` is to end although its processes could not be stopped
        (its host is unreachable): its GPUs stay claimed until they are. The first time is
        kept. Returns ``False`` when it holds no claim."""
        return bool(self._mark_ending(keys=[self._claims],
                                      args=[instance_id, _ms(at or datetime.now(UTC))]))

    def allocations(self) -> dict[str, dict[int, str]]:
        """``{host: {gpu index: instance id}}`` of every claimed GPU."""
        out: dict[str, dict[int, str]] = {}
        for gpu, instance_id in self._r.hgetall(self._gpus).items():
            host, _, index = gpu.rpartition("#")
            out.setdefault(host, {})[int(index)] = instance_id
        return out

    def claims(self) -> dict[str, Claim]:
        """``{instance id: Claim}`` of every live claim. A record that does not parse is
        left out (it can only come from outside this module)."""
        out = {}
        for instance_id, raw in self._r.hgetall(self._claims).items():
            try:
                rec = json.loads(raw)
                out[instance_id] = Claim(
                    rec["host"], tuple(int(i) for i in rec["gpus"]), _at(rec["claimed_at_ms"]),
                    {str(k): str(v) for k, v in (rec.get("detail") or {}).items()},
                    _at(rec["ending_at_ms"]) if rec.get("ending_at_ms") else None)
            except (ValueError, KeyError, TypeError):
                continue
        return out

    def drain(self, host: str, at: datetime | None = None) -> None:
        """No new claims on ``host``; its instances are to be moved. Draining a drained host
        keeps its first time (the notice's deadline stays put)."""
        self._r.hsetnx(self._drained, host, _ms(at or datetime.now(UTC)))

    def undrain(self, host: str) -> None:
        """``host`` takes claims again (harmless when it was not drained)."""
        self._r.hdel(self._drained, host)

    def drained(self) -> dict[str, datetime]:
        """``{host: when it was drained}``, aware UTC."""
        return {host: _at(ms) for host, ms in self._r.hgetall(self._drained).items()}

    def mark_seen(self, host: str, at: datetime) -> None:
        """``host`` answered over SSH at ``at``; an older time than the stored one is
        ignored (replicas report out of order)."""
        self._mark_seen(keys=[self._seen], args=[host, _ms(at)])

    def last_seen(self) -> dict[str, datetime]:
        """``{host: last successful SSH contact}``, aware UTC; hosts never reached are absent."""
        return {host: _at(ms) for host, ms in self._r.hgetall(self._seen).items()}
