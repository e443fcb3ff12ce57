"""History stored before sources existed, written by a replayed market: moved to its source.

Before sources (:mod:`scheduler.store.history_sources`) every series lived in one namespace,
which is now the real one, so a daemon that traded on a replayed market (the embedded
default) left replayed prices there that would read as real. When a replayed market's poller
starts, each series of that market's offer keys that is **legacy** (its meta has no
``source`` field: every series created since carries one) and whose every stored price is one
the market quotes for that key (raw points, rollup min/max/last, carried prices) is moved,
keys renamed, into ``replay:<market>``; counts go to ``ga:hist:migrated``. A legacy series
holding any other price (real prices, perhaps mixed with replayed ones) stays real, untouched,
and is reported: nothing is guessed, nothing is lost.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import redis

from scheduler.store import history_index, keys
from scheduler.store.history_scripts import ADOPT_LEGACY
from scheduler.store.history_sources import REAL, check
from scheduler.store.rollups import decode_day, price_text


@dataclass
class Adopted:
    """Series moved into the replayed market's source, and legacy ones left real (they hold
    prices the market never quotes)."""

    moved: list[str] = field(default_factory=list)
    kept_real: list[str] = field(default_factory=list)


def adopt_legacy(client: redis.Redis, prices: Mapping[str, set[float]], source: str) -> Adopted:
    """Move the legacy series among ``prices`` that only hold prices the market quotes.

    Args:
        client: the Redis holding the history.
        prices: series key → every price (USD/hour) the replayed market quotes for it (its
            on-demand price; its spot base price and steps).
        source: the market's source, ``replay:<name>``.

    Returns:
        :class:`Adopted`. Idempotent: a moved series is no longer legacy.

    Raises:
        ValueError: ``source`` is not a replay source.
    """
    if check(source) == REAL:
        raise ValueError("legacy series are adopted by a replay source, not real")
    names = sorted(prices)
    with client.pipeline(transaction=False) as pipe:
        for series in names:
            pipe.hgetall(keys.history_meta(series))
            pipe.zrange(keys.history_raw(series), 0, -1)
            pipe.zrange(keys.history_hourly(series), 0, -1)
        replies = pipe.execute()
    out = Adopted()
    script = client.register_script(ADOPT_LEGACY)
    for i, series in enumerate(names):
        meta, raw, blobs = replies[3 * i: 3 * i + 3]
        if not meta or "source" in meta:
            continue
        quoted = {price_text(p) for p in prices[series]}
        if not _stored_prices(meta, raw, blobs) <= quoted:
            out.kept_real.append(series)
            continue
        moved = script(keys=[keys.history_raw(series), keys.history_hourly(series),
                             keys.history_meta(series), keys.history_raw(series, source),
                             keys.history_hourly(series, source),
                             keys.history_meta(series, source)], args=[series, source, len(raw)])
        (out.moved if int(moved) == 1 else out.kept_real).append(series)
    if out.moved:
        _reindex(client, out.moved, source)
        client.sadd(keys.HISTORY_SOURCES, source)
        client.hincrby(keys.HISTORY_MIGRATED, source, len(out.moved))
    return out


def _reindex(client: redis.Redis, moved: list[str], source: str) -> None:
    """Take moved series out of the real indexes and into the source's (other slots than the
    series' keys, so not in the script), then mark them indexed (meta ``ix``)."""
    with client.pipeline(transaction=False) as pipe:
        history_index.remove_commands(pipe, moved, REAL)
        history_index.add_commands(pipe, moved, source)
        pipe.execute()
    with client.pipeline(transaction=False) as pipe:
        for series in moved:
            pipe.hset(keys.history_meta(series, source), "ix", "1")
        pipe.execute()


def _stored_prices(meta: Mapping[str, str], raw: list[str], blobs: list[str]) -> set[str]:
    """Every price a legacy series holds, as canonical text."""
    found = {price_text(float(m.split(":", 1)[1])) for m in raw}
    for blob in blobs:
        for h in decode_day(blob):
            found |= {price_text(h.min), price_text(h.max), price_text(h.last)}
    for name in ("rolled_price", "base_price"):
        if meta.get(name):
            found.add(price_text(float(meta[name])))
    return found
