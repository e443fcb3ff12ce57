"""With REDIS_URL the daemon keeps its state in that server, not in an embedded one."""

import pytest

from providers.replay.provider import ReplayProvider
from core.config import examples_dir
from tests.e2e.harness import DaemonProcess
from tests.fixtures.waiting import wait_until

pytestmark = pytest.mark.e2e


def test_daemon_uses_the_redis_named_by_redis_url(tmp_path, redis_server, redis_client):
    market = examples_dir() / "market.yaml"
    daemon = DaemonProcess(tmp_path / "home", market, env={"REDIS_URL": redis_server.url})
    try:
        daemon.start()
        job = daemon.submit(examples_dir() / "charlm-job.yaml", resources={"gpu_count": 64})
        wait_until(lambda: redis_client.get(f"ga:job:{{{job['id']}}}"), 10, "the job in Redis")
        assert not (tmp_path / "home" / "redis").exists()
        waiting = wait_until(lambda: daemon.job(job["id"])["waiting_reason"], 10,
                             "a waiting reason")
        assert "gpu_count rejects" in waiting
    finally:
        daemon.stop()
        ReplayProvider(market, tmp_path / "home" / "replay").shutdown_cloud()
