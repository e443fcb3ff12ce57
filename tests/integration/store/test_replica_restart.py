"""A daemon restarted on the same ``GA_HOME`` is the same replica: it takes the leases its
previous (dead) process held at once, with a higher fence, and does not count that process as
another live replica. Daemons on other homes are still other replicas. Real Redis; daemons are
constructed (not run) over it, and a crash is the process's lock going away with nothing
released."""

from __future__ import annotations

import logging

import pytest

from core.models import Job, JobState, utcnow
from scheduler.controller.reconcile import reconcile_pass
from scheduler.daemon import Daemon, DaemonSettings
from scheduler.store import LeaseLostError, keys
from scheduler.timing import JOB_LEASE_TTL_S, RECONCILER_ACTIVE_WINDOW_S
from tests.factories.jobs import spec

SECRET_ENV = {"GA_API_TOKEN": "shared-token", "GA_AGENT_SECRET": "shared-agent-secret"}


@pytest.fixture
def daemons(tmp_path, redis_server, redis_client, monkeypatch):
    for name, value in SECRET_ENV.items():
        monkeypatch.setenv(name, value)
    made: list[Daemon] = []

    def make(home: str) -> Daemon:
        made.append(Daemon(DaemonSettings(home=tmp_path / home, providers=[],
                                          redis_url=redis_server.url,
                                          store_url=(tmp_path / "ckpt").as_uri())))
        return made[-1]

    yield make
    for daemon in made:
        daemon._lock.close()


def _crash(daemon: Daemon) -> None:
    """The process died: no lease released, its registration left to expire; its
    ``daemon.lock`` goes with it."""
    daemon._lock.close()


def _job(daemon: Daemon, job_id: str) -> Job:
    now = utcnow()
    job = Job(id=job_id, spec=spec(resources={"gpu_count": 64}), created_at=now, updated_at=now)
    job.record(JobState.PENDING, "submitted")
    return daemon.store.jobs.create(job)


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_restart_on_the_same_home_takes_its_own_leases_over_at_once(daemons, redis_client,
                                                                       caplog):
    first = daemons("a")
    jobs = [_job(first, f"j{i}") for i in range(2)]
    # As in the middle of a pass: it counts as a reconciler and holds both jobs' leases.
    first.store.leases.active_holders(keys.RECONCILERS, RECONCILER_ACTIVE_WINDOW_S)
    job_keys = [keys.job_lease(j.id) for j in jobs]
    old = {k: first.store.leases.acquire(k, JOB_LEASE_TTL_S) for k in job_keys}
    poll_key = keys.poller_lease("aws")
    old_poll = first.store.leases.acquire(poll_key, 60)
    zombie = first.store.jobs.fenced(old[job_keys[0]], JOB_LEASE_TTL_S)
    _crash(first)

    with caplog.at_level(logging.INFO):
        second = daemons("a")
    assert not any("other live replica" in w for w in _warnings(caplog)), _warnings(caplog)
    assert [r["api_url"] for r in second.replicas.live()] == [second.api_url]
    assert second.store.leases.holder != first.store.leases.holder
    # Every lease of the dead process is this one's now, under a higher fence, well before
    # the old ones would have expired.
    assert second.store.leases.holders(job_keys + [poll_key]) == [second.store.leases.holder] * 3
    for key in job_keys:
        assert second.store.leases.holds(key)
        assert second.store.leases.acquire(key, JOB_LEASE_TTL_S).fence > old[key].fence
    assert second.store.leases.acquire(poll_key, 60).fence > old_poll.fence
    assert redis_client.pttl(job_keys[0]) > 0
    # It is the only reconciler, so its first pass steps every job (pending, nothing fits:
    # each gets its waiting reason).
    assert second.store.leases.active_holders(keys.RECONCILERS, RECONCILER_ACTIVE_WINDOW_S) == 1
    assert reconcile_pass(second.ctx) == 2
    assert all(second.store.jobs.get(j.id).waiting_reason for j in jobs)
    # A write the old process had in flight is refused.
    with pytest.raises(LeaseLostError):
        zombie.save(jobs[0])


def test_replicas_on_other_homes_stay_other_replicas(daemons, caplog):
    first = daemons("a")
    _job(first, "j0")
    reconcile_pass(first.ctx)
    key = keys.job_lease("j0")
    assert first.store.leases.holds(key)
    with caplog.at_level(logging.WARNING):
        other = daemons("b")
    assert any("1 other live replica" in w and first.api_url in w for w in _warnings(caplog))
    assert sorted(r["api_url"] for r in other.replicas.live()) == sorted(
        [first.api_url, other.api_url])
    # It takes nothing of a live replica's, nor of one that died (that waits for the TTL).
    assert other.store.leases.holders([key]) == [first.store.leases.holder]
    _crash(first)
    assert daemons("c").store.leases.holders([key]) == [first.store.leases.holder]
    assert other.store.leases.active_holders(keys.RECONCILERS, RECONCILER_ACTIVE_WINDOW_S) == 2
