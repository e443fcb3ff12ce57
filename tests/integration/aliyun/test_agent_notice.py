"""An ECS spot instance's life, local: the REAL agent (``python -m scheduler.agent``) with
``GA_METADATA_FLAVOR=aliyun`` watches a fake ECS metadata server's
``instance/spot/termination-time``; when it appears, the job gets SIGTERM and its checkpoint
is committed to a real S3 server (SeaweedFS) well inside Alibaba's ~5-minute window. Then the
same through the adapter's user data script, which boots the agent from ECS metadata."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from core.models import Job, JobSpec
from providers.aliyun.launch import render_user_data
from scheduler.checkpoints import (
    latest_checkpoint_id,
    open_store,
    restore_latest,
    upload_workdir,
)
from scheduler.controller.context import AgentBootstrap
from scheduler.store.agents import AgentTokens
from tests.fixtures.waiting import file_tail, wait_until
from tests.integration.agent.fakes import (
    JOB_SCRIPT_DIR,
    REPO_ROOT,
    FakeDaemon,
    FakeImds,
    _ImdsHandler,
    job_spec,
)

NOTICE_WINDOW_S = 300  # ECS: the Recycling notice comes about five minutes before the release
TERMINATION_PATH = "/latest/meta-data/instance/spot/termination-time"
INSTANCE_ID = "i-bp1ga0000000000aliyun"


def _termination_in(seconds: int) -> tuple[str, datetime]:
    at = (datetime.now(UTC) + timedelta(seconds=seconds)).replace(microsecond=0)
    return at.strftime("%Y-%m-%dT%H:%M:%SZ"), at


def test_termination_time_stops_the_job_and_commits_its_checkpoint(
        s3_store_url: str, launch_agent, fake_daemon: FakeDaemon, fake_imds: FakeImds,
        tmp_path: Path) -> None:
    store = open_store(s3_store_url)
    upload_workdir(store, "job-ali", JOB_SCRIPT_DIR)
    agent = launch_agent(s3_store_url, "job-ali", 1, job_spec(), flavor="aliyun")
    agent.wait_for_output("step 10\n")
    wait_until(lambda: fake_imds.gets.count(TERMINATION_PATH) >= 2, 10, "notice polls (404)")
    assert fake_imds.token_puts == 0  # ECS metadata: no IMDSv2 session token

    noticed = time.monotonic()
    text, action_at = _termination_in(NOTICE_WINDOW_S)
    fake_imds.aliyun_termination_time = text
    assert agent.wait(NOTICE_WINDOW_S) == 0, agent.log()
    elapsed_s = time.monotonic() - noticed
    assert elapsed_s < NOTICE_WINDOW_S / 10, f"checkpoint took {elapsed_s:.1f} s"

    phases = fake_daemon.phases()
    assert phases[:3] == ["starting", "restoring", "running"]
    assert phases[-2:] == ["checkpointing", "checkpointed"]
    notice = fake_daemon.last("checkpointing")["notice"]
    assert notice["action"] == "terminate"
    assert datetime.fromisoformat(notice["action_at"]) == action_at
    final = fake_daemon.last("checkpointed")
    assert final["checkpoint_id"] == latest_checkpoint_id(store, "job-ali")
    assert datetime.fromisoformat(final["at"]) < action_at
    saved = [ln for ln in fake_daemon.log_lines() if ln.startswith("SIGTERM at step")]
    assert len(saved) == 1, fake_daemon.log_lines()
    step = int(saved[0].split("step ")[1].split(",")[0])
    assert restore_latest(store, "job-ali", tmp_path / "restored") is not None
    assert json.loads((tmp_path / "restored" / "state.json").read_text()) == {"step": step}


# ----- the user data script ---------------------------------------------------------------
class _EcsMetadataHandler(_ImdsHandler):
    def do_GET(self) -> None:
        if self.path != "/latest/meta-data/instance-id":
            return super().do_GET()
        with self.server_owner.lock:
            self.server_owner.gets.append(self.path)
        self.reply(200, INSTANCE_ID)  # ECS metadata (normal mode): no token needed


class EcsMetadata(FakeImds):
    """The agent tests' metadata fake, plus ECS's ``meta-data/instance-id``."""

    handler = _EcsMetadataHandler


@pytest.fixture
def ecs_metadata() -> Iterator[EcsMetadata]:
    server = EcsMetadata()
    yield server
    server.stop()


def _pids_under(base_dir: Path) -> list[int]:
    """Processes started through the detached script: their environment names ``base_dir``."""
    needle, pids = str(base_dir).encode(), []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if needle in (entry / "environ").read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


@pytest.fixture
def base_dir(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "ga"
    yield path
    for pid in _pids_under(path):  # only if the test failed midway
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _python_shim(tmp_path: Path) -> Path:
    """A ``python3`` on PATH: ``-m pip`` is a no-op (no network; the agent is this checkout),
    everything else runs with this interpreter and the repository importable."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "python3"
    shim.write_text(f"""#!/bin/sh
if [ "$1" = "-m" ] && [ "$2" = "pip" ]; then exit 0; fi
PYTHONPATH={REPO_ROOT} exec {sys.executable} "$@"
""")
    shim.chmod(0o755)
    return bin_dir


def test_user_data_boots_the_agent_from_ecs_metadata(
        tmp_path: Path, base_dir: Path, ecs_metadata: EcsMetadata, fake_daemon: FakeDaemon,
        s3_server, monkeypatch: pytest.MonkeyPatch) -> None:
    store_url = s3_server.store_url()
    for name, value in s3_server.credentials_env().items():
        monkeypatch.setenv(name, value)
    upload_workdir(open_store(store_url), "job-ecs", JOB_SCRIPT_DIR)
    now = datetime.now(UTC)
    job = Job(id="job-ecs", spec=JobSpec.model_validate(job_spec()), created_at=now,
              updated_at=now)
    bootstrap = AgentBootstrap(api_url=fake_daemon.base_url, store_url=store_url,
                               tokens=AgentTokens(b"daemon-secret"),
                               store_env=s3_server.credentials_env())
    agent_env = bootstrap.env_for(job, 1)
    fake_daemon.token = agent_env["GA_AGENT_TOKEN"]

    script = tmp_path / "user-data"
    script.write_text(render_user_data(agent_env, pip_spec="gpu-arbiter", venv=None,
                                       metadata_url=ecs_metadata.base_url,
                                       base_dir=str(base_dir), supervisor="nohup"))
    boot = subprocess.run(["bash", str(script)], timeout=60, check=False, env={
        "PATH": f"{_python_shim(tmp_path)}:/usr/bin:/bin", "HOME": str(tmp_path)})
    bootstrap_log, agent_log = base_dir / "bootstrap.log", base_dir / "agent.log"
    assert boot.returncode == 0, bootstrap_log.read_text()
    assert f"agent started for instance {INSTANCE_ID}" in bootstrap_log.read_text()

    env_file = base_dir / "agent.env"
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    sourced = subprocess.run(["sh", "-c", f"set -a; . {env_file}; env -0"], env={},
                             capture_output=True, check=True).stdout.decode()
    env = dict(item.split("=", 1) for item in sourced.split("\0") if "=" in item)
    assert {k: env[k] for k in agent_env} == agent_env
    assert (env["GA_INSTANCE_ID"], env["GA_METADATA_FLAVOR"], env["GA_METADATA_URL"]) == (
        INSTANCE_ID, "aliyun", ecs_metadata.base_url)

    job_log = base_dir / "work" / "job.log"
    wait_until(lambda: job_log.exists() and "step 10\n" in job_log.read_text(), 30, "step 10",
               detail=file_tail(agent_log))
    assert {r["_instance_id"] for r in fake_daemon.reports} == {INSTANCE_ID}
    wait_until(lambda: ecs_metadata.gets.count(TERMINATION_PATH) >= 2, 10, "notice polls",
               detail=file_tail(agent_log))

    text, action_at = _termination_in(NOTICE_WINDOW_S)
    ecs_metadata.aliyun_termination_time = text
    wait_until(lambda: "checkpointed" in fake_daemon.phases(), 60, "the checkpoint",
               detail=file_tail(agent_log))
    final = fake_daemon.last("checkpointed")
    assert final["checkpoint_id"] == latest_checkpoint_id(open_store(store_url), "job-ecs")
    assert datetime.fromisoformat(final["at"]) < action_at
    wait_until(lambda: not _pids_under(base_dir), 15, "the agent to exit",
               detail=file_tail(agent_log))
