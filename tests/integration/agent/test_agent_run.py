"""The REAL node agent (``python -m scheduler.agent``) end to end: a real job process, a real
S3 server (SeaweedFS), a fake IMDSv2 and a fake daemon endpoint (see conftest.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from scheduler.checkpoints import (
    latest_checkpoint_id,
    list_checkpoints,
    open_store,
    restore_latest,
)
from tests.integration.agent.fakes import (
    FakeDaemon,
    FakeImds,
    job_spec,
    with_job_bundles,
)


@pytest.fixture
def store_url(s3_store_url: str) -> str:
    """A fresh S3 bucket holding the test job's code bundle for every job id used here."""
    return with_job_bundles(s3_store_url, "job-notice", "job-ok", "job-fail", "job-stop",
                            "job-outage", "job-stubborn", "job-slow-save", "job-env")


def running(pid: int) -> bool:
    """Alive and not a zombie (an unreaped zombie is as dead as it gets)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in "ZX"
    except OSError:
        return False


def step_of(line: str) -> int:
    return int(line.split("step ")[1].split(",")[0].split()[0])


def test_notice_checkpoints_to_s3_then_next_attempt_resumes(
    store_url: str, launch_agent, fake_daemon: FakeDaemon, fake_imds: FakeImds, tmp_path: Path
) -> None:
    store = open_store(store_url)
    agent = launch_agent(store_url, "job-notice", 1, job_spec())
    agent.wait_for_output("step 10\n")
    action_at = fake_imds.set_notice("terminate")

    assert agent.wait(20) == 0, agent.log()
    phases = fake_daemon.phases()
    assert phases[:3] == ["starting", "restoring", "running"]
    assert phases[-2:] == ["checkpointing", "checkpointed"]
    checkpointing = fake_daemon.last("checkpointing")
    assert checkpointing["notice"]["action"] == "terminate"
    assert checkpointing["notice"]["action_at"].startswith(action_at.strftime("%Y-%m-%dT%H:%M:%S"))
    final = fake_daemon.last("checkpointed")
    assert final["checkpoint_id"] == latest_checkpoint_id(store, "job-notice")
    assert final["_instance_id"] == "i-job-notice-1" and final["attempt"] == 1
    saved = [line for line in fake_daemon.log_lines() if line.startswith("SIGTERM at step")]
    assert len(saved) == 1, fake_daemon.log_lines()
    stopped_at = step_of(saved[0])
    assert "agent variables visible: []" in "\n".join(fake_daemon.log_lines())
    assert fake_imds.token_puts >= 1  # IMDSv2: every read carried a session token

    # What landed in S3 is the state the job saved on SIGTERM.
    assert restore_latest(store, "job-notice", tmp_path / "check") is not None
    assert json.loads((tmp_path / "check" / "state.json").read_text()) == {"step": stopped_at}

    # A new attempt on a "new instance" restores it and the job resumes from there.
    fake_imds.notice = None
    second = launch_agent(store_url, "job-notice", 2, job_spec(JOB_STEPS=str(stopped_at + 5)))
    assert second.wait(20) == 0, second.log()
    running = fake_daemon.last("running")
    assert running["attempt"] == 2 and running["restored_from"] == final["checkpoint_id"]
    lines = fake_daemon.log_lines()
    assert f"resumed at step {stopped_at}" in lines
    assert f"done at step {stopped_at + 5}" in lines
    state = second.work_dir / "job" / "checkpoints" / "state.json"
    assert json.loads(state.read_text()) == {"step": stopped_at + 5}
    done = fake_daemon.last("succeeded")
    assert done["restored_from"] == final["checkpoint_id"]
    assert list_checkpoints(store, "job-notice")[0].final
    assert len(list_checkpoints(store, "job-notice")) <= 3  # pruned as it went


def test_success_commits_a_final_checkpoint(
    store_url: str, launch_agent, fake_daemon: FakeDaemon
) -> None:
    agent = launch_agent(store_url, "job-ok", 1, job_spec(JOB_STEPS="12"))
    assert agent.wait(20) == 0, agent.log()
    assert fake_daemon.phases()[-1] == "succeeded"
    report = fake_daemon.last("succeeded")
    assert report["exit_code"] == 0 and report["restored_from"] is None
    manifest = list_checkpoints(open_store(store_url), "job-ok")[0]
    assert manifest.checkpoint_id == report["checkpoint_id"] and manifest.final
    assert "fresh start" in fake_daemon.log_lines()
    assert (agent.work_dir / "job.log").read_text().endswith("done at step 12\n")


def test_command_does_not_see_the_store_credentials_the_agent_uses(
    store_url: str, launch_agent, fake_daemon: FakeDaemon
) -> None:
    # The agent got the S3 credentials (the daemon hands them over with its environment) and
    # needs them itself; a command printing its environment must not put them in the job's logs.
    spec = {**job_spec(AWS_REGION="set-by-the-job"), "command": "env"}
    agent = launch_agent(store_url, "job-env", 1, spec)
    assert agent.wait(20) == 0, agent.log()
    assert fake_daemon.phases()[-1] == "succeeded"  # the agent itself still read the bundle
    output = "\n".join(fake_daemon.log_lines())
    assert "SCHED_JOB_ID=job-env" in output
    assert os.environ["AWS_SECRET_ACCESS_KEY"] not in output
    assert "AWS_SECRET_ACCESS_KEY" not in output and "AWS_ACCESS_KEY_ID" not in output
    assert "AWS_REGION=set-by-the-job" in output  # the job's own spec.env still applies


def test_failure_reports_the_exit_code(store_url: str, launch_agent, fake_daemon: FakeDaemon) -> None:
    agent = launch_agent(store_url, "job-fail", 1, job_spec(JOB_STEPS="6", JOB_EXIT_CODE="3"))
    assert agent.wait(20) == 0, agent.log()
    report = fake_daemon.last("failed")
    assert fake_daemon.phases()[-1] == "failed" and report["exit_code"] == 3
    manifest = list_checkpoints(open_store(store_url), "job-fail")[0]
    assert report["checkpoint_id"] == manifest.checkpoint_id and not manifest.final


def test_stop_command_checkpoints_and_exits(
    store_url: str, launch_agent, fake_daemon: FakeDaemon
) -> None:
    agent = launch_agent(store_url, "job-stop", 1, job_spec())
    fake_daemon.wait_for(lambda: "running" in fake_daemon.phases())
    fake_daemon.command = {"action": "stop", "reason": "migrating to a cheaper offer"}
    assert agent.wait(20) == 0, agent.log()
    assert fake_daemon.phases()[-2:] == ["checkpointing", "checkpointed"]
    assert "migrating to a cheaper offer" in fake_daemon.last("checkpointing")["message"]
    assert fake_daemon.last("checkpointing")["notice"] is None
    assert any(line.startswith("SIGTERM at step") for line in fake_daemon.log_lines())
    assert fake_daemon.last("checkpointed")["checkpoint_id"] == latest_checkpoint_id(
        open_store(store_url), "job-stop")


def test_daemon_outage_does_not_stop_the_job_and_the_final_report_arrives(
    store_url: str, launch_agent, fake_daemon: FakeDaemon
) -> None:
    agent = launch_agent(store_url, "job-outage", 1, job_spec(JOB_STEPS="30"))
    fake_daemon.wait_for(lambda: "running" in fake_daemon.phases())
    fake_daemon.stop()  # connections refused from now on; the job finishes in ~1.5 s
    agent.wait_for_output("done at step 30")
    fake_daemon.wait_for(lambda: "final report succeeded failed" in agent.log(), timeout_s=10)
    assert agent.popen.poll() is None  # still trying
    fake_daemon.start()  # same port
    assert agent.wait(20) == 0, agent.log()
    assert fake_daemon.phases()[-1] == "succeeded"
    lines = fake_daemon.log_lines()
    assert "done at step 30" in lines and "step 25" in lines  # output from the outage kept
    assert fake_daemon.last("succeeded")["checkpoint_id"] is not None


def test_job_ignoring_the_signal_is_killed_after_grace(
    store_url: str, launch_agent, fake_daemon: FakeDaemon, fake_imds: FakeImds
) -> None:
    spec = job_spec(JOB_IGNORE_TERM="1")
    spec["checkpoint"]["grace_s"] = 1
    agent = launch_agent(store_url, "job-stubborn", 1, spec)
    agent.wait_for_output("step 5\n")
    job_pid = int(agent.job_output().split("pid ")[1].split()[0])
    fake_imds.set_notice()
    assert agent.wait(20) == 0, agent.log()
    assert not running(job_pid)  # SIGKILLed with its group after the grace
    assert "killing its process group" in agent.log()
    final = fake_daemon.last("checkpointed")
    assert final["exit_code"] != 0
    assert final["checkpoint_id"] is not None  # the periodic saves were still committed


def test_shell_wrapper_dying_first_does_not_cut_the_save_short(
    store_url: str, launch_agent, fake_daemon: FakeDaemon, fake_imds: FakeImds, tmp_path: Path
) -> None:
    """``sh -c 'a; b'`` dies on SIGTERM at once; the program it runs still gets its grace."""
    spec = job_spec(JOB_TERM_SAVE_S="1.5")
    spec["command"] = f"true; {spec['command']}"  # keeps the shell as the group leader
    agent = launch_agent(store_url, "job-slow-save", 1, spec)
    agent.wait_for_output("step 5\n")
    fake_imds.set_notice()
    assert agent.wait(20) == 0, agent.log()
    saved = [line for line in fake_daemon.log_lines() if line.startswith("SIGTERM at step")]
    assert saved, fake_daemon.log_lines()
    store = open_store(store_url)
    assert restore_latest(store, "job-slow-save", tmp_path / "check") is not None
    assert json.loads((tmp_path / "check" / "state.json").read_text()) == {"step": step_of(saved[0])}
