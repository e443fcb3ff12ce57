"""The history store on a real 3-master Redis Cluster and on a single Redis: append, the
series index, queries, compaction into rollups, sources and legacy adoption. On the cluster a
script or transaction touching keys of two slots fails (CROSSSLOT), so every test here also
checks that history keeps each to one slot."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from core.models import PriceObservation
from scheduler.services import history as history_service
from scheduler.store import Store, history_index, keys
from scheduler.store.history import HistoryStore, to_ms
from scheduler.store.history_legacy import adopt_legacy
from scheduler.store.history_sources import REAL

T0 = datetime(2025, 1, 1, tzinfo=UTC)
SERIES = [f"{p}/{r}/{r}a/{t}/spot" for p, r, t in (
    ("aws", "us-east-1", "p3.2xlarge"), ("aws", "us-east-1", "g5.xlarge"),
    ("aws", "eu-west-1", "p3.2xlarge"), ("gcp", "us-east-1", "a2-highgpu-1g"))]
REPLAY = "replay:demo"


@pytest.fixture(params=["single", "cluster"])
def client(request):
    if request.param == "cluster":
        servers = request.getfixturevalue("redis_cluster")
        servers.flushall()
        return servers.client()
    return request.getfixturevalue("redis_client")


def hourly(series: str, hours: int, base: float = 1.0, start: datetime = T0) -> list[PriceObservation]:
    """``hours`` hourly observations whose price changes every third hour."""
    return [PriceObservation(series=series, observed_at=start + timedelta(hours=h),
                             price_usd_per_hour=base + (h // 3) % 4 / 10) for h in range(hours)]


def forget_index(client, names: list[str], source: str = REAL) -> None:
    """Make ``names`` look like history stored before the index existed."""
    with client.pipeline(transaction=False) as pipe:
        history_index.remove_commands(pipe, names, source)
        pipe.sadd(keys.series_index(source), *names)
        for series in names:
            pipe.hdel(keys.history_meta(series, source), "ix")
        pipe.delete(keys.history_index_built(source))
        pipe.execute()


def test_append_indexes_series_and_queries_read_only_the_matching(client):
    history = HistoryStore(client)
    for series in SERIES:
        history.append(hourly(series, 48))
    assert history.series() == sorted(SERIES)
    assert history.series(provider="aws", region="us-east-1") == sorted(SERIES[:2])
    assert history.series(provider="AWS", instance_type="P3.2XLARGE") == sorted([SERIES[0], SERIES[2]])
    assert history.series(region="us-east-1", types=[("gcp", "a2-highgpu-1g")]) == [SERIES[3]]
    assert history.series(provider="aws", types=[("gcp", "a2-highgpu-1g")]) == []
    assert history.series(zone="nowhere") == []
    with pytest.raises(ValueError, match="gpu"):
        history.series(gpu="V100")
    result = history_service.query(Store.over(client), provider="aws", region="us-east-1",
                                   since=T0.isoformat(), until=(T0 + timedelta(days=2)).isoformat())
    assert sorted(r["series_key"] for r in result["rows"]) == sorted(SERIES[:2])
    assert result["matched"] == 2
    by_gpu = history_service.query(Store.over(client), gpu="V100", since=T0.isoformat(),
                                   until=(T0 + timedelta(days=2)).isoformat())
    assert sorted(r["series_key"] for r in by_gpu["rows"]) == sorted([SERIES[0], SERIES[2]])


def test_history_stored_before_the_index_is_indexed_once_on_first_use(client):
    history = HistoryStore(client)
    for series in SERIES:
        history.append(hourly(series, 10))
    forget_index(client, SERIES)
    assert not client.get(keys.history_index_built(REAL))
    assert history.series(provider="aws") == sorted(SERIES[:3])
    assert client.get(keys.history_index_built(REAL)) == "1"
    assert client.smembers(keys.history_index(REAL, "region", "eu-west-1")) == {SERIES[2]}


def test_queries_scan_while_another_replica_builds_the_index(client):
    history = HistoryStore(client)
    for series in SERIES:
        history.append(hourly(series, 10))
    forget_index(client, SERIES)
    client.set(keys.history_index_lock(REAL), "1", ex=60)
    assert history.series(provider="aws", region="us-east-1") == sorted(SERIES[:2])
    assert not client.get(keys.history_index_built(REAL))
    client.delete(keys.history_index_lock(REAL))
    assert history.series(provider="aws", region="us-east-1") == sorted(SERIES[:2])
    assert client.get(keys.history_index_built(REAL)) == "1"


def test_a_series_whose_writer_died_before_indexing_it_is_indexed_by_its_next_append(client):
    history = HistoryStore(client)
    history.append(hourly(SERIES[0], 10))
    history.series(provider="aws")  # the index is built
    with client.pipeline(transaction=False) as pipe:  # what a writer that died left
        history_index.remove_commands(pipe, [SERIES[0]], REAL)
        pipe.hdel(keys.history_meta(SERIES[0], REAL), "ix")
        pipe.execute()
    assert history.series(provider="aws") == []
    history.append(hourly(SERIES[0], 11)[-1:])
    assert history.series(provider="aws") == [SERIES[0]]
    assert client.hget(keys.history_meta(SERIES[0], REAL), "ix") == "1"


def test_compaction_rollups_and_reads_across_tiers(client):
    history = HistoryStore(client)
    history.configure(raw_days=2, compact_slack_h=0)
    result = history.append(hourly(SERIES[0], 5 * 24))
    assert result.compacted == 1
    day_by_day = HistoryStore(client)
    for day in range(5):  # the append script's own due test and reads
        day_by_day.append(hourly(SERIES[1], 24, start=T0 + timedelta(days=day)))
    for series in SERIES[:2]:
        meta = history.metas([series], REAL)[series]
        assert meta.rolled_until_ms is not None and meta.rolled_until_ms > to_ms(T0)
        pieces, changes = history.pieces(meta, to_ms(T0), meta.last_seen_ms)
        assert pieces[0].start_ms == to_ms(T0) and pieces[-1].end_ms == meta.last_seen_ms
        assert changes > 0
        assert client.zcard(keys.history_hourly(series)) >= 3
    at = to_ms(T0 + timedelta(hours=4))  # rolled up: hour resolution
    assert history.prices_at([SERIES[0], SERIES[1]], at, REAL) == {
        s: (1.1, to_ms(T0 + timedelta(hours=3))) for s in SERIES[:2]}  # the hour it changed


def test_compaction_past_the_point_cap(client):
    history = HistoryStore(client)
    history.configure(raw_max_points=10)
    history.append(hourly(SERIES[0], 24))
    result = history.append(hourly(SERIES[0], 72)[24:])
    assert result.compacted == 1
    assert client.zcard(keys.history_raw(SERIES[0])) <= 11


def test_replay_source_and_legacy_adoption_keep_their_indexes(client):
    history = HistoryStore(client)
    history.append(hourly(SERIES[0], 12), source=REPLAY)
    history.append(hourly(SERIES[1], 12))
    assert history.sources() == [REAL, REPLAY]
    assert history.series(REPLAY, provider="aws") == [SERIES[0]]
    assert history.series(REAL, provider="aws") == [SERIES[1]]
    client.hdel(keys.history_meta(SERIES[1]), "source")  # stored before sources existed
    quoted = {1.0, 1.1, 1.2, 1.3}
    adopted = adopt_legacy(client, {SERIES[1]: quoted}, REPLAY)
    assert adopted.moved == [SERIES[1]]
    assert history.series(REAL, provider="aws") == []
    assert history.series(REPLAY, provider="aws") == sorted(SERIES[:2])
    assert history.series(REPLAY) == sorted(SERIES[:2])
    assert client.hget(keys.history_meta(SERIES[1], REPLAY), "ix") == "1"
    assert history.metas([SERIES[1]], REPLAY)[SERIES[1]].source == REPLAY


def test_appends_survive_a_flushed_script_cache(client):
    history = HistoryStore(client)
    history.append(hourly(SERIES[0], 3))
    client.script_flush()
    assert history.append(hourly(SERIES[0], 9)[3:]).stored == 2
    assert len(history.raw_points(SERIES[0])) == 3
