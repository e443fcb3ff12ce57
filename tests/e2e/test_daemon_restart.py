"""A daemon killed outright and started again on the same ``GA_HOME`` is the same replica: it
takes over the leases its dead process held at once (not after their 15 s TTL), under higher
fences, and does not warn about "another live replica" that is its own dead process. Real
daemon processes on the embedded Redis, the replayed example market."""

from __future__ import annotations

import time

import pytest

from scheduler.store import keys
from scheduler.store.connection import EmbeddedRedis
from scheduler.timing import JOB_LEASE_TTL_S
from tests.fixtures.waiting import wait_until
from tests.e2e.test_daemon_faults import SLEEPER_SPEC

pytestmark = pytest.mark.e2e


def _lease(client, job_id: str) -> tuple[str, int]:
    holder, _, fence = (client.get(keys.job_lease(job_id)) or "/0").rpartition("/")
    return holder, int(fence)


def test_a_restarted_daemon_takes_its_own_leases_over_at_once(daemon):
    daemon.start()
    job_id = daemon.client().post("/v1/jobs", json={"spec": SLEEPER_SPEC})["id"]
    wait_until(lambda: daemon.job(job_id)["state"] == "running", 60, "the job running",
               detail=daemon.log_tail)
    client = EmbeddedRedis(daemon.home / "redis").client()
    old_holder, old_fence = _lease(client, job_id)
    assert old_holder.split(":")[1] == str(daemon.proc.pid)

    daemon.kill()  # SIGKILL: nothing released, its registration left to expire
    assert client.pttl(keys.job_lease(job_id)) > 0
    killed_at = time.monotonic()
    daemon.start()
    holder, fence = wait_until(lambda: (lease := _lease(client, job_id))[0].split(":")[1:2] == [
        str(daemon.proc.pid)] and lease, JOB_LEASE_TTL_S, "the new process to hold the lease",
        interval_s=0.05, detail=daemon.log_tail)
    taken_after_s = time.monotonic() - killed_at
    # Well within the old lease's TTL: it was taken over, not waited out.
    assert taken_after_s < JOB_LEASE_TTL_S / 2, taken_after_s
    assert fence > old_fence and holder != old_holder
    log = (daemon.home / "daemon-2.log").read_text(errors="replace")
    assert "took over" in log
    assert "other live replica" not in log
    assert daemon.job(job_id)["state"] == "running"
