"""A daemon started without a provider in its config no longer lists that provider's latest
offers (they would linger in `schedctl offers` for up to OFFERS_TTL_S); price history stays.
Real Redis; the daemon is constructed (not run) over it."""

from __future__ import annotations

from core.models import PriceObservation
from scheduler.daemon import Daemon, DaemonSettings
from scheduler.store import Store
from tests.factories.offers import T0, offer


def test_offers_of_providers_no_longer_configured_are_dropped_at_start(tmp_path, redis_server,
                                                                        redis_client):
    store = Store.over(redis_client)
    gcp = offer(provider="gcp", region="asia-east1", zone="asia-east1-c", instance_type="V100:1")
    store.offers.replace_offers("gcp", [gcp])
    store.offers.append_prices([PriceObservation(series=gcp.key.series(), observed_at=T0,
                                                 price_usd_per_hour=0.466)])
    assert {o.provider for o in store.offers.all_offers()} == {"gcp"}
    daemon = Daemon(DaemonSettings(home=tmp_path / "home", providers=[],
                                   redis_url=redis_server.url,
                                   store_url=(tmp_path / "ckpt").as_uri()))
    try:
        assert store.offers.all_offers() == []
        assert store.offers.price_history(gcp.key.series())  # history is kept
        assert store.offers.forget_providers_except({"aws"}) == []
    finally:
        daemon.replicas.leave()
        daemon._lock.close()


def test_forget_keeps_the_named_providers(redis_client):
    store = Store.over(redis_client)
    store.offers.replace_offers("aws", [offer()])
    store.offers.replace_offers("gcp", [offer(provider="gcp")])
    assert store.offers.forget_providers_except(["aws"]) == ["gcp"]
    assert {o.provider for o in store.offers.all_offers()} == {"aws"}
