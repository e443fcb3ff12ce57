"""An EC2 instance's life, end to end but local: the AWS adapter's user data script boots the
REAL agent (``python -m scheduler.agent``) against a local IMDSv2, a fake daemon and a real S3
server (SeaweedFS); then AWS's notices arrive through IMDS.

What the existing agent tests (test_agent_run.py, test_agent_notices.py) do not cover and this
does: the user data (IMDSv2 token → instance id → root-only env file → pip → detached start),
the environment the controller builds (``AgentBootstrap.env_for``) reaching the agent through
it, ``spot/instance-action`` 404 while there is no notice, a rebalance recommendation reported
without stopping the job, and the checkpoint committed well inside AWS's 2-minute window.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from core.models import Job, JobSpec
from providers.aws.launch import render_user_data
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

INSTANCE_ID = "i-0a1b2c3d4e5f60718"
NOTICE_WINDOW_S = 120  # AWS: two minutes between the interruption notice and the action
INSTANCE_ACTION = "/latest/meta-data/spot/instance-action"


class _Ec2ImdsHandler(_ImdsHandler):
    def do_GET(self) -> None:
        if self.path != "/latest/meta-data/instance-id":
            return super().do_GET()
        imds = self.server_owner
        with imds.lock:
            imds.gets.append(self.path)
            expiry = imds.tokens.get(self.headers.get("X-aws-ec2-metadata-token", ""))
        if expiry is None or expiry < time.monotonic():
            return self.reply(401)
        self.reply(200, INSTANCE_ID)


class Ec2Imds(FakeImds):
    """The agent tests' IMDSv2 fake, plus ``meta-data/instance-id`` (token required)."""

    handler = _Ec2ImdsHandler


@pytest.fixture
def imds() -> Iterator[Ec2Imds]:
    server = Ec2Imds()
    yield server
    server.stop()


def _pids_under(base_dir: Path) -> list[int]:
    """Processes this test started through the detached script: their environment names
    ``base_dir`` (GA_WORK_DIR for the agent, SCHED_CHECKPOINT_DIR for the job)."""
    needle = str(base_dir).encode()
    pids = []
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


def _python_shim(tmp_path: Path) -> tuple[Path, Path]:
    """A ``python3`` on PATH that records ``-m pip`` calls (no network in tests; the agent is
    this checkout) and runs everything else with this interpreter and the repo importable."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "pip-calls.txt"
    bin_dir.mkdir()
    shim = bin_dir / "python3"
    shim.write_text(f"""#!/bin/sh
if [ "$1" = "-m" ] && [ "$2" = "pip" ]; then echo "$*" >> {calls}; exit 0; fi
PYTHONPATH={REPO_ROOT} exec {sys.executable} "$@"
""")
    shim.chmod(0o755)
    return bin_dir, calls


def test_user_data_boots_the_agent_and_a_spot_notice_commits_in_time(
        tmp_path: Path, base_dir: Path, imds: Ec2Imds, fake_daemon: FakeDaemon, s3_server,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The controller's side: the job, its attempt's token and the agent environment.
    store_url = s3_server.store_url()
    for name, value in s3_server.credentials_env().items():
        monkeypatch.setenv(name, value)
    upload_workdir(open_store(store_url), "job-aws", JOB_SCRIPT_DIR)
    now = datetime.now(UTC)
    job = Job(id="job-aws", spec=JobSpec.model_validate(job_spec()), created_at=now,
              updated_at=now)
    bootstrap = AgentBootstrap(api_url=fake_daemon.base_url, store_url=store_url,
                               tokens=AgentTokens(b"daemon-secret"),
                               store_env=s3_server.credentials_env())
    agent_env = bootstrap.env_for(job, 1)
    fake_daemon.token = agent_env["GA_AGENT_TOKEN"]

    # The instance's side: cloud-init runs the user data with a bare environment.
    script = tmp_path / "user-data"
    script.write_text(render_user_data(agent_env, pip_spec="gpu-arbiter", venv=None,
                                       imds_url=imds.base_url, base_dir=str(base_dir),
                                       supervisor="nohup"))
    bin_dir, pip_calls = _python_shim(tmp_path)
    boot = subprocess.run(["bash", str(script)], env={"PATH": f"{bin_dir}:/usr/bin:/bin",
                                                      "HOME": str(tmp_path)}, timeout=60, check=False)
    bootstrap_log = base_dir / "bootstrap.log"
    assert boot.returncode == 0, bootstrap_log.read_text()
    assert f"agent started for instance {INSTANCE_ID}" in bootstrap_log.read_text()
    assert pip_calls.read_text().split() == ["-m", "pip", "install", "--quiet",
                                             "--disable-pip-version-check", "gpu-arbiter"]

    # The env file: root-only, exactly the controller's environment plus the instance's own.
    env_file = base_dir / "agent.env"
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    sourced = subprocess.run(["sh", "-c", f"set -a; . {env_file}; env -0"], env={},
                             capture_output=True, check=True).stdout.decode()
    env = dict(item.split("=", 1) for item in sourced.split("\0") if "=" in item)
    assert {k: env[k] for k in agent_env} == agent_env
    assert (env["GA_INSTANCE_ID"], env["GA_METADATA_FLAVOR"], env["GA_METADATA_URL"],
            env["GA_WORK_DIR"]) == (INSTANCE_ID, "aws", imds.base_url, f"{base_dir}/work")

    # Running: the agent polls spot/instance-action and gets 404 (no notice).
    agent_log, job_log = base_dir / "agent.log", base_dir / "work" / "job.log"
    wait_until(lambda: job_log.exists() and "step 10\n" in job_log.read_text(), 30, "step 10",
               detail=file_tail(agent_log))
    assert fake_daemon.phases()[:3] == ["starting", "restoring", "running"]
    assert {r["_instance_id"] for r in fake_daemon.reports} == {INSTANCE_ID}  # from IMDS
    wait_until(lambda: imds.gets.count(INSTANCE_ACTION) >= 2, 10, "instance-action polls",
               detail=file_tail(agent_log))
    assert imds.notice is None and imds.token_puts >= 2  # curl's token, then the agent's

    # A rebalance recommendation is reported; the job keeps running.
    imds.rebalance = {"noticeTime": "2026-11-30T12:00:00Z"}
    wait_until(lambda: any("rebalance recommendation" in (r.get("message") or "")
                           for r in fake_daemon.reports), 15, "the rebalance note",
                           detail=file_tail(agent_log))
    assert "checkpointing" not in fake_daemon.phases()

    # The interruption notice: SIGTERM, checkpoint committed to S3, well inside 2 minutes.
    noticed = time.monotonic()
    action_at = imds.set_notice("terminate", in_s=NOTICE_WINDOW_S)
    wait_until(lambda: "checkpointed" in fake_daemon.phases(), NOTICE_WINDOW_S, "the checkpoint",
               detail=file_tail(agent_log))
    elapsed_s = time.monotonic() - noticed
    print(f"notice → checkpoint committed and reported: {elapsed_s:.2f} s")
    final = fake_daemon.last("checkpointed")
    assert elapsed_s < NOTICE_WINDOW_S / 4, f"checkpoint took {elapsed_s:.1f} s"
    assert datetime.fromisoformat(final["at"]) < action_at
    assert fake_daemon.last("checkpointing")["notice"]["action"] == "terminate"
    store = open_store(store_url)
    assert final["checkpoint_id"] == latest_checkpoint_id(store, "job-aws")
    saved = [ln for ln in fake_daemon.log_lines() if ln.startswith("SIGTERM at step")]
    assert len(saved) == 1
    assert restore_latest(store, "job-aws", tmp_path / "restored") is not None
    step = int(saved[0].split("step ")[1].split(",")[0])
    assert json.loads((tmp_path / "restored" / "state.json").read_text()) == {"step": step}
    wait_until(lambda: not _pids_under(base_dir), 15, "the agent to exit",
               detail=file_tail(agent_log))
