"""History stored before sources existed (one namespace, meta without ``source``) stays
readable: as real, except series a replayed market evidently wrote (every price one it
quotes), which its poller moves into ``replay:<market>`` on start. Real Redis, a real replay
cloud, the real poller and import."""

from __future__ import annotations

from datetime import timedelta

from core.models import PriceObservation, utcnow
from scheduler.poller.offers import OfferPoller
from scheduler.services import history as history_service
from scheduler.services.history_import import import_path
from scheduler.store import keys
from tests.integration.history.conftest import DUMPS
from tests.integration.history.test_replay_vs_real import SERIES, replay  # noqa: F401 (fixture)

ON_DEMAND = "aws/us-east-1/us-east-1c/p3.2xlarge/on-demand"


def _as_legacy(store) -> None:
    """Make every stored series look as the code before sources stored it: same keys, same
    meta fields, no ``source`` field."""
    for series in store.offers.history.series():
        store.redis.hdel(keys.history_meta(series), "source")


def test_replayed_legacy_series_move_to_their_market_and_real_ones_stay(store, data_dir, replay):  # noqa: F811
    now = utcnow()
    import_path(store, data_dir / DUMPS / "us-east-1")  # real: holds SERIES with 2020 prices
    store.offers.append_prices([  # what an older daemon on the replayed market wrote
        PriceObservation(series=ON_DEMAND, observed_at=now - timedelta(hours=2),
                         price_usd_per_hour=3.06)])
    _as_legacy(store)
    before = history_service.query(store, source="real", since="2020-03-01", until="2020-03-20",
                                   zone="us-east-1c", instance_type="p3.2xlarge")
    assert {r["series_key"] for r in before["rows"]} == {SERIES}

    OfferPoller(store, replay)()

    assert ON_DEMAND not in store.offers.history.series()
    assert ON_DEMAND in store.offers.history.series("replay:demo")
    moved = history_service.query(store, source="replay:demo", since="3h", market="on-demand")
    [row] = moved["rows"]
    assert (row["series_key"], row["min"], row["max"]) == (ON_DEMAND, 3.06, 3.06)
    assert row["hours"] > 1.9  # the legacy point two hours ago came along
    after = history_service.query(store, source="real", since="2020-03-01", until="2020-03-20",
                                  zone="us-east-1c", instance_type="p3.2xlarge")
    assert after["rows"] == before["rows"]  # real prices never quoted by the market: kept real
    assert store.redis.hget(keys.HISTORY_MIGRATED, "replay:demo") == "1"

    OfferPoller(store, replay)()  # a restart: nothing left to move, nothing moved twice
    assert store.redis.hget(keys.HISTORY_MIGRATED, "replay:demo") == "1"
