"""Index of price-history series by provider, region, zone, instance type and market, so a
query reads only the series it matches instead of every series name.

Per source and field, a set ``ga:hist:ix:{<source>}:<field>:<value>`` (value lower case, as
queries compare case-insensitively) of the series keys
(``provider/region/zone/instance_type/market``) with that value. Every index key of a source
shares the ``{<source>}`` hash tag, so one SINTER over several fields is one slot on Redis
Cluster. A GPU-model filter becomes instance types through the hardware map (which may learn
a type's GPU after its series exist), so the index keeps instance types, not GPU models.

Upkeep: the writer that creates a series adds it here (and to the source's series index)
*after* the series' own script, outside it (other slots); the series' meta field ``ix`` says
it was done, so a writer that died in between is healed by the series' next append. History
stored before the index existed: the first query builds the index once from the series index
(:meth:`SeriesIndex.ready`; one builder at a time, the others scan meanwhile).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

import redis

from scheduler.store import keys

FIELDS = ("provider", "region", "zone", "instance_type", "market")
# Seconds a builder holds the build lock: far more than a build of 100,000 series takes.
BUILD_LOCK_S = 300
# Series per pipelined round trip while building.
BUILD_CHUNK = 5000


def fields_of(series: str) -> dict[str, str] | None:
    """``{field: lower-case value}`` of a series key; ``None`` when it is not 5 parts."""
    parts = series.split("/")
    if len(parts) != len(FIELDS):
        return None
    return dict(zip(FIELDS, (p.lower() for p in parts)))


def add_commands(pipe, names: Iterable[str], source: str) -> None:
    """Queue the SADDs that index ``names`` (series of ``source``) on ``pipe``: one per
    distinct field value, each a single key (Cluster-safe), idempotent."""
    members: dict[str, list[str]] = defaultdict(list)
    listed = []
    for series in names:
        listed.append(series)
        found = fields_of(series)
        for field, value in (found or {}).items():
            members[keys.history_index(source, field, value)].append(series)
    for key, series in members.items():
        pipe.sadd(key, *series)
    if listed:
        pipe.sadd(keys.series_index(source), *listed)


def remove_commands(pipe, names: Iterable[str], source: str) -> None:
    """Queue the SREMs that take ``names`` out of the index of ``source`` (and its series
    index)."""
    listed = list(names)
    for series in listed:
        for field, value in (fields_of(series) or {}).items():
            pipe.srem(keys.history_index(source, field, value), series)
    if listed:
        pipe.srem(keys.series_index(source), *listed)


class SeriesIndex:
    """Reads and builds the index of one Redis (plain or Cluster client)."""

    def __init__(self, client: redis.Redis) -> None:
        self._r = client

    def ready(self, source: str) -> bool:
        """Is the index of ``source`` complete? Builds it when nobody has (once; a concurrent
        caller sees ``False`` while another builds and should scan instead)."""
        if self._r.get(keys.history_index_built(source)):
            return True
        lock = keys.history_index_lock(source)
        if not self._r.set(lock, "1", nx=True, ex=BUILD_LOCK_S):
            return False
        try:
            self.build(source)
            self._r.set(keys.history_index_built(source), "1")
        finally:
            self._r.delete(lock)
        return True

    def build(self, source: str) -> int:
        """Index every series of the source's series index (idempotent); returns how many."""
        names = sorted(self._r.smembers(keys.series_index(source)))
        for start in range(0, len(names), BUILD_CHUNK):
            with self._r.pipeline(transaction=False) as pipe:
                add_commands(pipe, names[start:start + BUILD_CHUNK], source)
                pipe.execute()
        return len(names)

    def find(self, source: str, wanted: Mapping[str, str],
             types: Iterable[tuple[str, str]] | None = None) -> set[str]:
        """Series of ``source`` whose fields equal ``wanted`` (``{field: value}``, compared
        lower case; at least one field or ``types``), and, when ``types`` is given, whose
        ``(provider, instance_type)`` is one of them. One pipelined round trip of SINTERs in
        the source's slot."""
        base = {f: v.lower() for f, v in wanted.items()}
        unknown = set(base) - set(FIELDS)
        if unknown:
            raise ValueError(f"unknown index field(s) {sorted(unknown)}; allowed: {FIELDS}")
        if types is None:
            groups = [base]
        else:
            groups = []
            for provider, instance_type in set(types):
                group = {**base}
                if group.setdefault("provider", provider.lower()) != provider.lower():
                    continue
                if group.setdefault("instance_type", instance_type.lower()) != instance_type.lower():
                    continue
                groups.append(group)
        if not groups:
            return set()
        if not groups[0]:
            raise ValueError("find needs at least one field or a list of types")
        with self._r.pipeline(transaction=False) as pipe:
            for group in groups:
                # raw: a Cluster pipeline blocks its sinter method (keys of one slot route)
                pipe.execute_command("SINTER", *(keys.history_index(source, f, v)
                                                 for f, v in sorted(group.items())))
            replies = pipe.execute()
        return set().union(*replies)
