"""The client ``connect()`` returns for a ``redis+cluster://`` URL keeps serving the stores
after a master is SIGKILLed and its replica promoted: it refreshes its slot map itself. The
session's shared cluster is made whole again (the killed node rejoins as a replica)."""

from __future__ import annotations

from scheduler.store import keys
from scheduler.store.connection import connect
from scheduler.store.leases import Leases
from scheduler.store.offers import OfferStore
from scheduler.store.users import UserStore
from tests.factories.offers import offer
from tests.fixtures.redis_cluster import wait_replicated


def test_stores_keep_working_after_a_master_is_killed(redis_cluster):
    client = connect(redis_cluster.url)
    offers, users = OfferStore(client), UserStore(client)
    leases = Leases(client, replica="replica-a")
    offers.replace_offers("aws", [offer()])
    names = [keys.job_lease(f"job-{i}") for i in range(9)]
    held = leases.acquire_many(names, 60)
    users.add("ana")
    token, _ = users.create_token("ana")
    victim = keys.offers("aws")
    for master in redis_cluster.masters():
        wait_replicated(master)
    try:
        dead = redis_cluster.kill_master_of(victim)
        promoted = redis_cluster.wait_failover(timeout_s=60)
        assert redis_cluster.master_of(victim) is promoted

        # The same client: what was written is read, and every slot takes writes again.
        assert [o.provider for o in offers.all_offers()] == ["aws"]
        assert all(leases.renew(lease, 60) for lease in held.values())
        assert users.resolve(token).user == "ana"
        offers.replace_offers("aws", [offer(price_usd_per_hour=2.0)])
        assert [o.price_usd_per_hour for o in offers.all_offers()] == [2.0]
        leases.release_many(names)
        assert leases.holders(names) == [None] * len(names)
        assert promoted.client().exists(victim)
        assert dead.port not in {n.port for n in client.get_primaries()}
    finally:
        redis_cluster.restart_killed()
        client.close()
