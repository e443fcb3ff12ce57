"""The REAL node agent (``python3 -m scheduler.agent`` of this project) started over SSH on a
fleet host: it restores the job's code bundle from the checkpoint store, runs the job with the
slot's GPUs and reports to the daemon (a fake daemon endpoint) as on a cloud instance."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import psutil

from core.models import InstanceState
from scheduler.checkpoints import latest_checkpoint_id, open_store, upload_workdir
from tests.fixtures.waiting import wait_until
from tests.integration.agent.fakes import JOB_SCRIPT_DIR, FakeDaemon, job_spec
from tests.integration.fleet.conftest import FleetEnv, request, slot


def test_the_real_agent_runs_a_job_on_a_fleet_slot(fleet_env: FleetEnv, tmp_path: Path) -> None:
    daemon = FakeDaemon()
    store_url = (tmp_path / "store").as_uri()
    upload_workdir(open_store(store_url), "job-real", JOB_SCRIPT_DIR)
    adapter = fleet_env.provider(agent={"python": sys.executable})
    try:
        offer = slot(adapter, "gpu-a", 2)
        inst = adapter.launch(request(
            offer, "job-real-1", GA_API_URL=daemon.base_url, GA_AGENT_TOKEN=daemon.token,
            GA_JOB_ID="job-real", GA_ATTEMPT="1", GA_STORE_URL=store_url,
            GA_JOB_SPEC=json.dumps(job_spec(JOB_STEPS="80"))))
        daemon.wait_for(lambda: "running" in daemon.phases(), 60)
        assert daemon.last("running")["_instance_id"] == inst.id == "gpu-a.job-real-1"

        # The job runs in the agent's process group with the slot's GPUs.
        pid = int((fleet_env.work_root("gpu-a") / "job-real-1" / "agent.pid").read_text().split()[0])
        def job_env() -> dict[str, str] | None:
            for proc in psutil.Process(pid).children(recursive=True):
                cmdline = " ".join(proc.cmdline())
                if "ckpt_job.py" in cmdline:
                    return proc.environ()
            return None
        env = wait_until(job_env, 30, "the job process")
        assert env["CUDA_VISIBLE_DEVICES"] == "0,1" and env["SCHED_JOB_ID"] == "job-real"

        daemon.wait_for(lambda: "succeeded" in daemon.phases(), 60)
        assert daemon.last("succeeded")["checkpoint_id"] == latest_checkpoint_id(
            open_store(store_url), "job-real")
        wait_until(lambda: not psutil.pid_exists(pid)
                   or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, 30, "the agent's exit")
        [ended] = adapter.describe({"gpu-arbiter:job": "job-real-1"})
        assert ended.state is InstanceState.TERMINATED
        assert fleet_env.ledger().allocations() == {}
    finally:
        daemon.stop()


def test_a_drain_makes_the_real_agent_checkpoint_and_stop(fleet_env: FleetEnv,
                                                          tmp_path: Path) -> None:
    daemon = FakeDaemon()
    store_url = (tmp_path / "store").as_uri()
    store = open_store(store_url)
    upload_workdir(store, "job-drain", JOB_SCRIPT_DIR)
    adapter = fleet_env.provider(agent={"python": sys.executable})
    try:
        inst = adapter.launch(request(
            slot(adapter, "gpu-b", 1), "job-drain-1", GA_API_URL=daemon.base_url,
            GA_AGENT_TOKEN=daemon.token, GA_JOB_ID="job-drain", GA_ATTEMPT="1",
            GA_STORE_URL=store_url, GA_JOB_SPEC=json.dumps(job_spec())))  # runs until stopped
        daemon.wait_for(lambda: "running" in daemon.phases(), 60)
        fleet_env.ledger().drain("gpu-b")
        [noticed] = [i for i in adapter.describe() if i.id == inst.id]
        assert noticed.notice is not None and noticed.state is InstanceState.RUNNING

        daemon.wait_for(lambda: "checkpointed" in daemon.phases(), 60)
        saved = daemon.last("checkpointed")["checkpoint_id"]
        assert saved is not None and saved == latest_checkpoint_id(store, "job-drain")
        pid = int((fleet_env.work_root("gpu-b") / "job-drain-1" / "agent.pid").read_text().split()[0])
        wait_until(lambda: not psutil.pid_exists(pid)
                   or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, 30, "the agent's exit")
        [ended] = [i for i in adapter.describe() if i.id == inst.id]
        assert ended.state is InstanceState.TERMINATED and fleet_env.ledger().allocations() == {}
        assert [line[1] for line in fleet_env.allocation_log("gpu-b")] == ["start", "end"]
    finally:
        daemon.stop()


def test_a_shipped_agent_is_not_installed_again_where_its_venv_has_it(fleet_env: FleetEnv) -> None:
    """``agent: {pip_spec, venv}``: a venv whose python imports the agent already (this
    project's) is kept; the agent runs from it (here it stops at once: no daemon variables)."""
    venv = str(Path(sys.executable).parent.parent)
    adapter = fleet_env.provider(agent={"pip_spec": "gpu-arbiter==0.0.0-not-on-any-index",
                                        "venv": venv})
    inst = adapter.launch(request(slot(adapter, "gpu-c", 1), "job-venv-1"))
    log = fleet_env.work_root("gpu-c") / "job-venv-1" / "agent.log"
    wait_until(lambda: "GA_API_URL is not set" in log.read_text(), 20, "the agent's refusal")
    assert "GA_INSTANCE_ID is not set" not in log.read_text()
    wait_until(lambda: adapter.describe()[0].state is InstanceState.TERMINATED, 20,
               "the agent's exit seen")
    assert inst.id == "gpu-c.job-venv-1" and fleet_env.ledger().allocations() == {}
