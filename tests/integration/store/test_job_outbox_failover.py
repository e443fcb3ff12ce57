"""Job writes on the real 3-master Redis Cluster survive a SIGKILL of the master of the job's
slot once replicated (Redis replication is asynchronous: a write acknowledged but not yet on
the replica when its master dies is lost, which no client-side code can prevent; the test
waits for the replicas first), including a write whose writer died before applying its side
writes: repair() on the promoted master applies them once. The shared cluster is made whole
again."""

from __future__ import annotations

import pytest

from core.models import Job, JobState, utcnow
from scheduler.store import Store, keys, outbox
from scheduler.store import jobs as jobs_module
from scheduler.store.connection import connect
from scheduler.store.events import EventStream
from tests.factories.jobs import spec
from tests.fixtures.redis_cluster import wait_replicated

pytestmark = pytest.mark.slow


def _events(client, job_id: str) -> list[str]:
    return [e["message"] for e in EventStream(client).read(after="0", limit=1000,
                                                           job_id=job_id).events]


def test_committed_job_writes_survive_a_failover_of_their_slot(redis_cluster, monkeypatch):
    redis_cluster.flushall()
    client = connect(redis_cluster.url)
    store = Store.over(client)
    now = utcnow()
    jobs = [store.jobs.create(Job(id=f"fo-{i}", spec=spec(owner="ana"), created_at=now,
                                  updated_at=now)) for i in range(6)]
    victim = jobs[0]
    victim.record(JobState.RUNNING, "running")
    real = outbox.apply
    monkeypatch.setattr(jobs_module.outbox, "apply", lambda *a: 0)  # the writer dies
    victim = store.jobs.save(victim)
    monkeypatch.setattr(jobs_module.outbox, "apply", real)
    assert _events(client, victim.id) == []
    for master in redis_cluster.masters():
        wait_replicated(master)
    try:
        dead = redis_cluster.kill_master_of(keys.job(victim.id))
        promoted = redis_cluster.wait_failover(timeout_s=60)
        assert redis_cluster.master_of(keys.job(victim.id)) is promoted
        assert dead.port not in {n.port for n in redis_cluster.masters()}

        # The same client: the committed write and its queued side writes are there.
        assert store.jobs.get(victim.id).version == 2
        assert outbox.repair(client, grace_ms=0) > 0
        assert _events(client, victim.id) == ["running"]
        assert sorted(store.jobs.active_ids()) == sorted(j.id for j in jobs)
        # Every job's slot takes writes again, each applied once.
        for job in [victim, *jobs[1:]]:
            job.record(JobState.SUCCEEDED, "done")
            store.jobs.save(job)
        assert store.jobs.active_ids() == []
        assert _events(client, victim.id) == ["running", "done"]
        assert client.hget(keys.METRIC_FINISHED_STATES, "succeeded") == str(len(jobs))
        assert [j.id for j in store.jobs.list(limit=10)] == sorted(
            (j.id for j in jobs), key=lambda i: [j.id for j in jobs].index(i), reverse=True)
        assert client.zcard(keys.JOBS_DIRTY) == 0
    finally:
        redis_cluster.restart_killed()
        client.close()
