"""The job's command cannot get at its agent's token or the store's credentials: the REAL
agent (``python -m scheduler.agent``) reporting to the daemon's real API (uvicorn, real
Redis), checkpoints in a real S3 server (SeaweedFS), a real OS user created for the test, and
a job (``job_user_probe.py``) that tries every way in and writes what it found."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from core.models import Job, JobState, utcnow
from core.models.placements import Placement
from providers.bootstrap import JOB_USER_STEP, render_user_data
from scheduler.agent.job_user import JobUser
from scheduler.api.app import create_app
from scheduler.checkpoints import latest_checkpoint_id, open_store, upload_workdir
from scheduler.checkpoints.local import LocalObjectStore
from scheduler.store import Store
from scheduler.store.agents import AgentTokens
from tests.factories.jobs import spec
from tests.factories.offers import offer
from tests.fixtures.served_api import serve_api
from tests.integration.agent.fakes import REPO_ROOT

HERE = Path(__file__).parent
SECRET = b"agent-secret-for-isolation"
SYSTEM_PYTHON = "/usr/bin/python3"  # the job user cannot reach this venv's python under /root

needs_root = pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0 or shutil.which("useradd") is None,
    reason="creating a job user and switching to it needs root and useradd")


@pytest.fixture
def job_user() -> Iterator[JobUser]:
    """A real system user of its own (unique name), removed after the test."""
    name = f"gajob{secrets.token_hex(4)}"
    subprocess.run(["useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent",
                    "--shell", "/usr/sbin/nologin", "--user-group", name], check=True)
    try:
        user = JobUser.lookup(name)
        assert user is not None
        yield user
    finally:
        entry = JobUser.lookup(name)
        if entry is not None:  # userdel refuses while a process of the user is left
            for stat_file in Path("/proc").glob("[0-9]*/status"):
                try:
                    uids = next(li for li in stat_file.read_text().splitlines()
                                if li.startswith("Uid:")).split()[1:]
                except (OSError, StopIteration):
                    continue
                if str(entry.uid) in uids:
                    try:
                        os.kill(int(stat_file.parent.name), 9)
                    except ProcessLookupError:
                        pass
        subprocess.run(["userdel", name], check=False)


@pytest.fixture
def instance_dir() -> Iterator[Path]:
    """An instance's agent folder as the cloud bootstrap makes it: root's, mode 0711, outside
    pytest's 0700 temp root (which no other user can pass through)."""
    path = Path(tempfile.mkdtemp(prefix="ga-isolation-"))
    path.chmod(0o711)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@dataclass
class Served:
    store: Store
    url: str
    tokens: AgentTokens


@pytest.fixture
def served(redis_client, tmp_path, monkeypatch) -> Iterator[Served]:
    store = Store.over(redis_client)
    tokens = AgentTokens(SECRET)
    app = create_app(store, LocalObjectStore(tmp_path / "objects"), tokens, "admin-token")
    with serve_api(app, tmp_path / "home", "admin-token", monkeypatch) as url:
        yield Served(store, url, tokens)


def running_job(store: Store, job_id: str, attempt: int, command: str, **env: str) -> Job:
    """The job in Redis, running its ``attempt`` (so the API records that attempt's reports)."""
    now = utcnow()
    job = store.jobs.get(job_id)
    if job is None:
        job = Job(id=job_id, spec=spec(name="probe", command=command, env=env,
                                       checkpoint={"dir": "checkpoints", "sync_interval_s": 1}),
                  created_at=now, updated_at=now)
        job.record(JobState.PENDING, "submitted", at=now)
        job = store.jobs.create(job)
    job.attempt = attempt
    job.placement = Placement(attempt=attempt, offer=offer(), client_token=f"t-{attempt}",
                              decided_at=now, instance_id=f"i-{attempt}", started_at=now)
    job.record(JobState.RUNNING, "running", offer=job.placement.offer)
    return store.jobs.save(job)


def launch(served: Served, job: Job, instance: Path, store_url: str, job_user_name: str,
           argv_prefix: tuple[str, ...] = ()) -> tuple[subprocess.Popen, Path, str]:
    """Start the real agent for ``job``'s current attempt with its work folder in
    ``instance/work``; beside it an ``agent.env`` holding its token (0600, as the bootstrap
    writes it). Returns (process, work folder, token)."""
    attempt = job.placement.attempt
    token = served.tokens.issue(job.id, attempt)
    work = instance / f"work-{attempt}"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GA_")}
    env.update(
        PYTHONPATH=str(REPO_ROOT), GA_API_URL=served.url, GA_AGENT_TOKEN=token,
        GA_INSTANCE_ID=f"i-{attempt}", GA_JOB_ID=job.id, GA_ATTEMPT=str(attempt),
        GA_STORE_URL=store_url, GA_METADATA_FLAVOR="none", GA_WORK_DIR=str(work),
        GA_JOB_SPEC=job.spec.model_dump_json(), GA_JOB_USER=job_user_name,
    )
    env_file = instance / "agent.env"
    fd = os.open(env_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(f"GA_AGENT_TOKEN={token}\nAWS_SECRET_ACCESS_KEY="
                 f"{os.environ.get('AWS_SECRET_ACCESS_KEY', '')}\n")
    fd = os.open(instance / f"agent-{attempt}.log", os.O_WRONLY | os.O_CREAT, 0o600)
    with os.fdopen(fd, "wb") as log:
        popen = subprocess.Popen([*argv_prefix, sys.executable, "-m", "scheduler.agent"],
                                 cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT,
                                 start_new_session=True)
    return popen, work, token


def finish(popen: subprocess.Popen, instance: Path, attempt: int, timeout_s: float = 40) -> str:
    try:
        popen.wait(timeout_s)
    except subprocess.TimeoutExpired:
        popen.kill()
        popen.wait()
    log = (instance / f"agent-{attempt}.log").read_text(errors="replace")
    return log


def assert_found_nothing(found: dict, secrets_: list[str]) -> None:
    text = json.dumps(found)
    for value in secrets_:
        assert value and value not in text, "a secret reached the job"
    assert found["env_names"] == []
    assert found["agent_pid"] is not None  # it did find its agent, and tried
    assert "error" in found["agent_environ"]
    assert found["agent_ptrace"] is False


@needs_root
def test_the_job_runs_as_the_job_user_and_cannot_read_the_agents_secrets(
    served: Served, job_user: JobUser, instance_dir: Path, s3_store_url: str
) -> None:
    bundle = instance_dir / "bundle"
    bundle.mkdir()
    shutil.copy(HERE / "job_user_probe.py", bundle / "probe.py")
    upload_workdir(open_store(s3_store_url), "probe-0001", bundle)
    command = f"{SYSTEM_PYTHON} probe.py"
    store_secret = os.environ["AWS_SECRET_ACCESS_KEY"]
    probe_files = f"{instance_dir / 'agent.env'}:{instance_dir / 'agent-1.log'}"

    job = running_job(served.store, "probe-0001", 1, command, PROBE_FILES=probe_files)
    popen, work, token = launch(served, job, instance_dir, s3_store_url, job_user.name)
    log = finish(popen, instance_dir, 1)
    assert popen.returncode == 0, log
    assert f"job command runs as user {job_user.name}" in log

    found = json.loads((work / "job" / "found.json").read_text())
    assert found["uid"] == job_user.uid and found["gid"] == job_user.gid
    assert 0 not in found["groups"]  # none of root's groups
    assert found["home"] == str(work / "job") and found["user"] == job_user.name
    assert found["umask"] == 0o022  # the umask the agent was started with, not its 077
    assert_found_nothing(found, [token, store_secret])
    assert all("error" in r for r in found["files"].values()), found["files"]
    # The agent's own files stay root's and private.
    for path in (work / "job.log", instance_dir / "agent.env"):
        st = path.stat()
        assert st.st_uid == 0 and st.st_mode & 0o077 == 0, path
    # What the job writes is its own: the folder, the code unpacked, the checkpoint folder.
    for path in (work / "progress.jsonl", work / "job", work / "job" / "probe.py",
                 work / "job" / "checkpoints", work / "job" / "checkpoints" / "state.json"):
        assert path.stat().st_uid == job_user.uid, path

    report = served.store.agents.last_report("probe-0001", 1)
    assert report is not None and report.phase.value == "succeeded", log
    assert report.progress is not None and report.progress.done == 103  # the progress file works
    first_checkpoint = report.checkpoint_id
    assert first_checkpoint == latest_checkpoint_id(open_store(s3_store_url), "probe-0001")

    # The next attempt restores it into a folder the job user owns, and the job resumes.
    job = running_job(served.store, "probe-0001", 2, command)
    popen, work2, _ = launch(served, job, instance_dir, s3_store_url, job_user.name)
    log = finish(popen, instance_dir, 2)
    assert popen.returncode == 0, log
    found = json.loads((work2 / "job" / "found.json").read_text())
    assert found["attempt"] == 2 and found["restored_owner"] == job_user.uid
    report = served.store.agents.last_report("probe-0001", 2)
    assert report.phase.value == "succeeded" and report.restored_from == first_checkpoint
    assert report.progress.done == 203


@needs_root
def test_a_symlink_planted_in_the_checkpoint_folder_is_not_read_with_roots_rights(
    served: Served, job_user: JobUser, instance_dir: Path, s3_store_url: str
) -> None:
    bundle = instance_dir / "bundle"
    bundle.mkdir()
    shutil.copy(HERE / "job_user_probe.py", bundle / "probe.py")
    store = open_store(s3_store_url)
    upload_workdir(store, "plant-0001", bundle)
    job = running_job(served.store, "plant-0001", 1, f"{SYSTEM_PYTHON} probe.py",
                      PROBE_PLANT=str(instance_dir / "agent.env"))
    popen, work, token = launch(served, job, instance_dir, s3_store_url, job_user.name)
    log = finish(popen, instance_dir, 1)
    assert (work / "job" / "checkpoints" / "planted-0").is_symlink()
    # The commit read the link with the job user's rights: refused, so nothing of agent.env
    # (the token) went to the store, from where a later attempt would have restored it.
    for key in store.list_keys(""):
        assert token.encode() not in store.get_bytes(key), key
    report = served.store.agents.last_report("plant-0001", 1)
    assert report is not None and "checkpoint upload failed" in (report.message or ""), log


@pytest.mark.skipif(not sys.platform.startswith("linux")
                    or (os.geteuid() == 0 and shutil.which("setpriv") is None),
                    reason="needs Linux, and as root setpriv (util-linux) to drop capabilities")
def test_without_a_job_user_a_same_uid_job_cannot_read_the_non_dumpable_agent(
    served: Served, tmp_path: Path
) -> None:
    """The fallback: the agent cannot switch users (here: uid 0 with every capability dropped,
    as in a locked-down container; a non-root agent is the same case), so the job runs as its
    uid, and only the agent's non-dumpable flag keeps ``/proc/<agent>/environ`` shut."""
    no_caps = (("setpriv", "--inh-caps=-all", "--bounding-set=-all", "--")
               if os.geteuid() == 0 else ())
    marker = f"CONTROL_MARKER={secrets.token_hex(8)}"
    # A control of the same uid and (no) capabilities, left dumpable: the job can read it, so
    # the job's failure to read the agent is the agent's doing.
    control = subprocess.Popen([*no_caps, "env", marker, "sleep", "60"])
    instance = tmp_path / "instance"
    instance.mkdir()
    try:
        bundle = tmp_path / "bundle"
        bundle.mkdir()
        shutil.copy(HERE / "job_user_probe.py", bundle / "probe.py")
        store_url = str(tmp_path / "ckpt")
        upload_workdir(open_store(store_url), "fallback-0001", bundle)
        time.sleep(0.2)  # let env exec sleep
        job = running_job(served.store, "fallback-0001", 1, f"{sys.executable} probe.py",
                          PROBE_CONTROL_PID=str(control.pid))
        popen, work, token = launch(served, job, instance, store_url, "gpu-arbiter-job",
                                    argv_prefix=no_caps)
        log = finish(popen, instance, 1)
    finally:
        control.kill()
        control.wait()
    assert popen.returncode == 0, log
    assert "job isolation incomplete" in log and "without the right to switch users" in log
    found = json.loads((work / "job" / "found.json").read_text())
    assert found["uid"] == os.getuid()  # same uid: nothing else protects it
    assert found["control_environ"].get("read", "").find(marker) >= 0, found
    assert_found_nothing(found, [token])


@needs_root
def test_a_job_running_as_the_job_user_still_dies_with_its_agent(
    served: Served, job_user: JobUser, instance_dir: Path, s3_store_url: str
) -> None:
    # The death signal is set after the uid switch (which clears one set before it).
    job = running_job(served.store, "orphan-0001", 1, "echo job pid $$; exec sleep 60")
    popen, work, _ = launch(served, job, instance_dir, s3_store_url, job_user.name)
    log_path = work / "job.log"
    deadline = time.monotonic() + 20
    while not (log_path.exists() and "job pid" in log_path.read_text()):
        assert popen.poll() is None and time.monotonic() < deadline, finish(popen, instance_dir, 1)
        time.sleep(0.05)
    job_pid = int(log_path.read_text().split("job pid ")[1].split()[0])
    assert Path(f"/proc/{job_pid}").stat().st_uid == job_user.uid
    popen.kill()
    popen.wait()
    deadline = time.monotonic() + 5
    while alive(job_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    survived = alive(job_pid)
    if survived:
        os.kill(job_pid, 9)
    assert not survived


def alive(pid: int) -> bool:
    """Alive and not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in "ZX"
    except OSError:
        return False


@needs_root
def test_the_bootstrap_creates_the_job_user_once(tmp_path: Path) -> None:
    """The user data's job-user step, run twice as cloud-init would on a reboot."""
    name = f"gajob{secrets.token_hex(4)}"
    script = tmp_path / "step.sh"
    script.write_text(f"set -euo pipefail\nJOB_USER={name}\nMETA_HOST=\n{JOB_USER_STEP}")
    try:
        first = subprocess.run(["bash", str(script)], capture_output=True, text=True)
        second = subprocess.run(["bash", str(script)], capture_output=True, text=True)
        user = JobUser.lookup(name)
        entry = subprocess.run(["getent", "passwd", name], capture_output=True,
                               text=True).stdout.strip().split(":")
    finally:
        subprocess.run(["userdel", name], check=False)
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert user is not None and 0 < user.uid < 1000  # a system user
    assert entry[5:] == ["/nonexistent", "/usr/sbin/nologin"] and not Path("/nonexistent").exists()
    assert f"job user {name} exists" in second.stdout
    # The user data runs this step and tells the agent the same name.
    text = render_user_data({}, cloud="EC2", flavor="aws", metadata_url="http://169.254.169.254",
                            instance_id_step="INSTANCE_ID=i-1", pip_spec="x", venv=None,
                            stop_timeout_s=90, job_user=name)
    assert JOB_USER_STEP.strip() in text and f"JOB_USER={name}\n" in text
    assert "META_HOST=169.254.169.254\n" in text and 'chmod 711 "$GA_DIR"' in text
