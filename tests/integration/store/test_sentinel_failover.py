"""A Sentinel-managed Redis by ``redis+sentinel://``: the stores run on the master the
sentinels name, and the client ``connect()`` returned keeps working after that master is
SIGKILLed and its replica promoted (and after the old master comes back as a replica)."""

from __future__ import annotations

from scheduler.store import keys
from scheduler.store.connection import connect
from scheduler.store.leases import Leases
from scheduler.store.offers import OfferStore
from scheduler.store.users import UserStore
from tests.factories.offers import offer
from tests.fixtures.redis_cluster import wait_replicated


def test_stores_keep_working_through_a_failover(redis_sentinel):
    redis_sentinel.flushall()
    client = connect(redis_sentinel.url)
    first = redis_sentinel.master()
    assert client.connection_pool.get_master_address()[1] == first.port
    offers, users = OfferStore(client), UserStore(client)
    leases = Leases(client, replica="replica-a")
    offers.replace_offers("aws", [offer()])
    lease = leases.acquire(keys.poller_lease("aws"), 60)
    users.add("ana")
    token, _ = users.create_token("ana")
    wait_replicated(first)  # replication is asynchronous: these writes are on the replica

    dead = redis_sentinel.kill_master()
    promoted = redis_sentinel.wait_failover(timeout_s=60)
    assert promoted is not dead

    # The same client, on the promoted master: reads what was written, writes anew.
    assert [o.provider for o in offers.all_offers()] == ["aws"]
    assert leases.renew(lease, 60)
    assert users.resolve(token).user == "ana"
    offers.replace_offers("gcp", [offer(provider="gcp")])
    later, _ = users.create_token("ana", "after the failover")
    assert client.connection_pool.get_master_address()[1] == promoted.port
    assert promoted.client().sismember(keys.OFFER_PROVIDERS, "gcp")

    # The old master returns as a replica; writes still go to the master.
    redis_sentinel.restart_killed()
    assert dead.client().info("replication")["role"] == "slave"
    offers.replace_offers("azure", [offer(provider="azure")])
    assert {o.provider for o in offers.all_offers()} == {"aws", "gcp", "azure"}
    assert users.resolve(later).user == "ana"
    client.close()
