"""A job write acknowledged by the master of its slot, its side writes applied on the other
masters, and the master SIGKILLed before its replica got the write (replication is
asynchronous; the replica is held with SIGSTOP and cut off to make that certain): the promoted master
has the job's previous version. The next write of the job has the version the lost write
had, and its own side writes must still apply (events, counters), not be taken for the lost
write's. Real 3-master cluster; the shared cluster is made whole again."""

from __future__ import annotations

import signal

import pytest

from core.models import Job, JobState, utcnow
from scheduler.store import Store, keys
from scheduler.store.connection import connect
from scheduler.store.events import EventStream
from tests.factories.jobs import spec
from tests.fixtures.redis_cluster import wait_replicated

pytestmark = pytest.mark.slow


def _events(client, job_id: str) -> list[str]:
    return [e["message"] for e in EventStream(client).read(after="0", limit=1000,
                                                           job_id=job_id).events]


def test_the_write_after_a_lost_one_applies_its_own_side_writes(redis_cluster):
    client = connect(redis_cluster.url)
    store = Store.over(client)
    now = utcnow()
    job = store.jobs.create(Job(id="lost-1", spec=spec(owner="ana"), created_at=now,
                                updated_at=now))
    for master in redis_cluster.masters():
        wait_replicated(master)
    master = redis_cluster.master_of(keys.job(job.id))
    views = redis_cluster.view()
    master_id = next(v.node_id for v in views if v.port == master.port)
    replica = redis_cluster.node_at(next(v.port for v in views if v.master_id == master_id))
    if redis_cluster.master_of(keys.EVENTS) is master:
        pytest.skip("the event stream shares the job's master: its events would be lost too")
    # Stopped, and its link dropped: the master can send it nothing (a stopped process's
    # socket would still take the stream in).
    replica.proc.send_signal(signal.SIGSTOP)
    try:
        master.client().client_kill_filter(_type="replica")
        lost = job.model_copy(deep=True)
        lost.record(JobState.SUCCEEDED, "lost write")
        store.jobs.save(lost)  # acknowledged; only the stopped replica could have kept it
        redis_cluster.kill_master_of(keys.job(job.id))
        replica.proc.send_signal(signal.SIGCONT)
        assert redis_cluster.wait_failover(timeout_s=60) is replica

        stored = store.jobs.get(job.id)
        assert (stored.version, stored.state) == (1, JobState.PENDING)  # the write is gone
        stored.record(JobState.FAILED, "written again")
        store.jobs.save(stored)
        assert _events(client, job.id)[-1] == "written again"
        assert client.hget(keys.METRIC_FINISHED_STATES, "failed") == "1"
    finally:
        replica.proc.send_signal(signal.SIGCONT)
        redis_cluster.restart_killed()
        client.close()
