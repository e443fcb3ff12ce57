"""A query answered through the columnar path (``HistoryStore.piece_columns`` and
``Accumulator.add_columns``) against the same query through the per-piece path it replaced
(``HistoryStore.pieces`` and ``Accumulator.add``, kept for plans and plots): equal answers,
field for field, on random histories and on the real AWS dumps, against a real Redis."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from core.models import PriceObservation
from scheduler.services import history as history_service
from scheduler.services.history_import import import_path
from scheduler.services.history_stats import Accumulator
from scheduler.store.history import HistoryStore
from tests.integration.history.conftest import DUMPS

T0 = datetime(2025, 1, 1, tzinfo=UTC)
TYPES = ("p3.2xlarge", "p3.8xlarge", "g4dn.xlarge")


def per_piece_answer(monkeypatch, store, **query):
    """``query`` as the previous code computed it: pieces as objects, added one by one."""
    with monkeypatch.context() as m:
        m.setattr(HistoryStore, "piece_columns", HistoryStore.pieces)
        m.setattr(Accumulator, "add_columns", Accumulator.add)
        return history_service.query(store, **query)


def load_random(store, rng: random.Random, days: int) -> None:
    """Series in two regions; each changes price at random minutes (bursts of several changes
    in an hour, and quiet days), observed once more at each day's end."""
    batch = []
    for region in ("us-east-1", "us-west-2"):
        for zone in "ab":
            for itype in TYPES:
                series = f"aws/{region}/{region}{zone}/{itype}/spot"
                price, minute = rng.uniform(0.5, 20), rng.randrange(600)
                while minute < days * 1440:
                    batch.append(PriceObservation.model_construct(
                        series=series, price_usd_per_hour=price,
                        observed_at=T0 + timedelta(minutes=minute)))
                    price = round(max(0.05, price * rng.uniform(0.9, 1.1)), rng.choice([3, 4]))
                    minute += rng.choice([1, 7, 40, 180, 900, 3000])
    store.offers.history.append(batch)


@pytest.mark.parametrize("seed", range(3))
def test_random_histories_answer_as_the_per_piece_path(store, monkeypatch, seed):
    rng = random.Random(seed)
    store.offers.history.configure(raw_days=rng.choice([2, 5]), compact_slack_h=0)
    days = 40
    load_random(store, rng, days)
    end = T0 + timedelta(days=days)
    windows = [(None, None), ((T0 - timedelta(days=3)).isoformat(), end.isoformat())]
    for _ in range(6):
        a = T0 + timedelta(minutes=rng.randrange(days * 1440))
        b = a + timedelta(minutes=rng.randrange(1, days * 1440))
        windows.append((a.isoformat(), b.isoformat()))
    checked = 0
    for since, until in windows:
        for by in ("series", "zone", "region", "provider", "hour-of-day"):
            for per_gpu in (False, True):
                query = dict(since=since, until=until, by=by, per_gpu=per_gpu, provider="aws",
                             now=end + timedelta(hours=1))
                got = history_service.query(store, **query)
                assert got == per_piece_answer(monkeypatch, store, **query), query
                checked += len(got["rows"])
    assert checked > 100  # the windows do hold data


def test_real_dumps_answer_as_the_per_piece_path(store, data_dir, monkeypatch):
    import_path(store, data_dir / DUMPS)  # default retention: 30 days raw, older hours rolled up
    now = datetime(2020, 4, 1, tzinfo=UTC)
    windows = [("2019-01-01", "2020-04-01"), ("2019-12-15T07:30:00Z", "2020-02-11T13:05:00Z"),
               ("2020-02-20", "2020-03-20"), ("2020-01-01", "2020-01-02")]
    rows = 0
    for since, until in windows:
        for by, filters in (("series", {"gpu": "V100"}), ("region", {}), ("zone", {"region": "us-east-1"})):
            for per_gpu in (False, True):
                query = dict(since=since, until=until, by=by, per_gpu=per_gpu, now=now,
                             source="real", **filters)
                got = history_service.query(store, **query)
                assert got == per_piece_answer(monkeypatch, store, **query), query
                rows += len(got["rows"])
    assert rows > 200
