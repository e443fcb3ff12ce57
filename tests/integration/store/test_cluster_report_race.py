"""An agent's heartbeat whose WATCH died in a failover of its slot's master, on the real
3-master cluster, must not be retried unwatched on the promoted master: it would replace the
final report another replica stored meanwhile (the job would look still running). The shared
cluster is made whole again."""

from __future__ import annotations

import pytest

from core.models.agents import AgentPhase, AgentReport
from scheduler.store import agents as agents_module
from scheduler.store import keys
from scheduler.store.agents import AgentStore
from scheduler.store.connection import connect
from tests.factories.offers import T0
from tests.fixtures.redis_cluster import wait_replicated

pytestmark = pytest.mark.slow


def test_a_heartbeat_whose_watch_died_in_a_failover_leaves_the_final_report(
        redis_cluster, monkeypatch):
    a, b = connect(redis_cluster.url), connect(redis_cluster.url)
    job_id = "report-race"
    try:
        AgentStore(a).save_report(AgentReport(job_id=job_id, attempt=1,
                                              phase=AgentPhase.RUNNING, at=T0))
        real, done = agents_module.parse_lenient, []

        def parse_lenient(model, raw):
            # a read the stored heartbeat under its WATCH; now its master dies, b stores the
            # final report on the promoted master
            if not done:
                done.append(True)
                for master in redis_cluster.masters():
                    wait_replicated(master)
                redis_cluster.kill_master_of(keys.agent_report(job_id, 1, 0))
                redis_cluster.wait_failover(timeout_s=60)
                AgentStore(b).save_report(AgentReport(
                    job_id=job_id, attempt=1, phase=AgentPhase.SUCCEEDED, exit_code=0, at=T0))
            return real(model, raw)

        monkeypatch.setattr(agents_module, "parse_lenient", parse_lenient)
        AgentStore(a).save_report(AgentReport(job_id=job_id, attempt=1,
                                              phase=AgentPhase.RUNNING, at=T0))
        assert done
        assert AgentStore(b).last_report(job_id, 1).phase is AgentPhase.SUCCEEDED
    finally:
        redis_cluster.restart_killed()
        a.close()
        b.close()
