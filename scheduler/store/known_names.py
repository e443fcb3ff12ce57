"""Every name an offer poll has listed: providers, regions, zones, GPU models, instance types.

A job spec naming a region or GPU model that no configured provider ever listed (``us-west2``
for ``us-west-2``) would wait forever; submit warns about it and the waiting reason says it
(:func:`policies.constraints.unknown_names`). The names are kept in one Redis set per attribute
(:func:`scheduler.store.keys.known_names`), written by the offer poller, never expired (a name
listed once may be listed again), and bounded: a set that reached :data:`MAX_NAMES_PER_ATTRIBUTE`
takes no more names and is then reported as not known (``None``), so a name it could not take
is never warned about.
"""

from __future__ import annotations

from collections.abc import Iterable

from core.models import Offer
from scheduler.store import keys
from scheduler.store.connection import RedisClient

ATTRIBUTES = ("provider", "region", "zone", "gpu_model", "instance_type")
# Real clouds list a few hundred zones and about a thousand GPU instance types.
MAX_NAMES_PER_ATTRIBUTE = 20_000


class KnownNames:
    """The ever-listed names over one Redis client; ``max_names`` bounds each attribute's set."""

    def __init__(self, client: RedisClient, max_names: int = MAX_NAMES_PER_ATTRIBUTE) -> None:
        self._r = client
        self._max = max_names

    def record(self, offers: Iterable[Offer]) -> None:
        """Add the names ``offers`` carry (two round trips). A set under the bound takes all of
        one poll's names, so it may pass ``max_names`` by one poll's worth.
        Raises ``redis.RedisError``."""
        names: dict[str, set[str]] = {a: set() for a in ATTRIBUTES}
        for offer in offers:
            for attribute in ATTRIBUTES:
                names[attribute].add(str(getattr(offer, attribute)))
        wanted = [a for a in ATTRIBUTES if names[a]]
        if not wanted:
            return
        with self._r.pipeline(transaction=False) as pipe:
            for attribute in wanted:
                pipe.scard(keys.known_names(attribute))
            sizes = pipe.execute()
        with self._r.pipeline(transaction=False) as pipe:
            for attribute, size in zip(wanted, sizes):
                if int(size) < self._max:
                    pipe.sadd(keys.known_names(attribute), *sorted(names[attribute]))
            pipe.execute()

    def names(self) -> dict[str, set[str] | None]:
        """Per attribute the names ever listed; ``None`` for an attribute with none yet or
        whose set is full (its names cannot be checked). Raises ``redis.RedisError``."""
        with self._r.pipeline(transaction=False) as pipe:
            for attribute in ATTRIBUTES:
                pipe.smembers(keys.known_names(attribute))
            sets = pipe.execute()
        out: dict[str, set[str] | None] = {}
        for attribute, members in zip(ATTRIBUTES, sets):
            decoded = {m.decode() if isinstance(m, bytes) else m for m in members}
            out[attribute] = decoded if 0 < len(decoded) < self._max else None
        return out
