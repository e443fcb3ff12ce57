"""Job output printed while the daemon (its API) is down reaches ``schedctl logs`` once the API
answers again, every line once and in order, also when the instance is reclaimed meanwhile:
a real agent process and job, the real API (uvicorn) over a real Redis, stopped and started
again on the same port, and a spot notice from a local IMDSv2."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
import uvicorn

from core.models import Job, JobState, utcnow
from core.models.agents import AgentPhase, AgentReport
from core.models.placements import Placement
from scheduler.agent.reporter import Reporter
from scheduler.api.app import create_app
from scheduler.checkpoints.local import LocalObjectStore
from scheduler.store import Store
from scheduler.store.agents import AgentTokens
from scheduler.store.jobs import cap_log_line
from tests.factories.jobs import spec
from tests.factories.offers import offer
from tests.fixtures.redis_server import free_port
from tests.fixtures.waiting import file_tail, wait_until
from tests.integration.agent.fakes import REPO_ROOT, FakeImds

SECRET = b"agent-secret"
JOB_ID = "talker-0001"
# Prints numbered lines every 5 ms until SIGTERM, then one last line and exits 0.
TALKER = (f"{sys.executable} -u -c \"import signal, sys, time\n"
          "stop = []\n"
          "signal.signal(signal.SIGTERM, lambda *_: stop.append(1))\n"
          "n = 0\n"
          "while not stop:\n"
          "    print(f'line {n:06d}'); n += 1; time.sleep(0.005)\n"
          "print(f'stopped after {n} lines')\"")


class Api:
    """The daemon's real API on a fixed port, which can be stopped and started again."""

    def __init__(self, store: Store, objects: Path) -> None:
        self.app = create_app(store, LocalObjectStore(objects), AgentTokens(SECRET), "api-token")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._server = uvicorn.Server(uvicorn.Config(self.app, host="127.0.0.1", port=self.port,
                                                     log_level="warning", lifespan="off"))
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        wait_until(lambda: self._server.started, 10, "the API to start")

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
            self._thread.join(10)
            self._server = None


@pytest.fixture
def store(redis_client) -> Store:
    return Store.over(redis_client)


@pytest.fixture
def api(store, tmp_path):
    served = Api(store, tmp_path / "objects")
    served.start()
    yield served
    served.stop()


def _running_job(store: Store, command: str) -> Job:
    now = utcnow()
    job = Job(id=JOB_ID, spec=spec(name="talker", command=command), created_at=now,
              updated_at=now)
    job.record(JobState.PENDING, "submitted", at=now)
    job = store.jobs.create(job)
    job.attempt = 1
    job.placement = Placement(attempt=1, offer=offer(), client_token="t-1", decided_at=now,
                              instance_id="i-1", started_at=now)
    job.record(JobState.RUNNING, "running", offer=job.placement.offer)
    return store.jobs.save(job)


def _launch_agent(tmp_path: Path, api: Api, imds: FakeImds, job: Job) -> subprocess.Popen:
    work_dir = tmp_path / "instance"
    work_dir.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GA_")}
    env.update(
        PYTHONPATH=str(REPO_ROOT), GA_API_URL=api.url,
        GA_AGENT_TOKEN=AgentTokens(SECRET).issue(job.id, 1), GA_INSTANCE_ID="i-1",
        GA_JOB_ID=job.id, GA_ATTEMPT="1", GA_STORE_URL=(tmp_path / "ckpt").as_uri(),
        GA_METADATA_FLAVOR="aws", GA_METADATA_URL=imds.base_url, GA_WORK_DIR=str(work_dir),
        GA_JOB_SPEC=job.spec.model_dump_json(),
    )
    with open(tmp_path / "agent.log", "wb") as log:
        return subprocess.Popen([sys.executable, "-m", "scheduler.agent"], cwd=work_dir, env=env,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def _printed(tmp_path: Path) -> list[str]:
    path = tmp_path / "instance" / "job.log"
    return path.read_text().splitlines() if path.exists() else []


@pytest.fixture
def imds():
    server = FakeImds()
    yield server
    server.stop()


def test_output_printed_while_the_api_was_down_is_delivered_once_in_order_before_the_reclaim(
        tmp_path, store, api, imds):
    job = _running_job(store, TALKER)
    agent = _launch_agent(tmp_path, api, imds, job)
    log = tmp_path / "agent.log"
    try:
        wait_until(lambda: len(store.jobs.logs(job.id)) > 20, 30, "output delivered",
                   detail=file_tail(log))
        api.stop()
        printed_before = len(_printed(tmp_path))
        # Several reports' worth of output while nobody answers ...
        wait_until(lambda: len(_printed(tmp_path)) > printed_before + 2500, 60,
                   "output during the outage", detail=file_tail(log))
        # ... then the reclaim notice, still during the outage: the agent stops the job and
        # keeps retrying its final report.
        imds.set_notice("terminate", in_s=120)
        wait_until(lambda: any(line.startswith("stopped after") for line in _printed(tmp_path)), 30,
                   "the job to stop on the notice", detail=file_tail(log))
        time.sleep(1.0)
        api.start()
        assert agent.wait(60) == 0, log.read_text(errors="replace")[-4000:]
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
    printed = _printed(tmp_path)
    assert len(printed) > 2500
    assert store.jobs.logs(job.id) == printed  # every line once, in order, nothing else
    assert store.agents.last_report(job.id, 1).phase is AgentPhase.CHECKPOINTED


def test_a_full_spool_keeps_the_newest_lines_and_the_log_says_how_many_were_dropped(
        store, api):
    job = _running_job(store, "true")
    api.stop()
    reporter = Reporter(api.url, AgentTokens(SECRET).issue(job.id, 1), "i-1", job.id, 1,
                        max_queued_lines=10)
    for n in range(30):
        reporter.add_line(f"line {n}")
    assert reporter.send(AgentPhase.RUNNING) is None  # the API is down
    api.start()
    assert reporter.send(AgentPhase.RUNNING) is not None
    logs = store.jobs.logs(job.id)
    assert "20 output line(s)" in logs[0] and "dropped" in logs[0]
    assert logs[1:] == [f"line {n}" for n in range(20, 30)]


def test_a_report_sent_again_adds_its_lines_once(store, api):
    job = _running_job(store, "true")
    body = AgentReport(job_id=job.id, attempt=1, phase=AgentPhase.RUNNING, at=utcnow(),
                       log_lines=["a", "b"], log_seq=0).model_dump(mode="json")
    headers = {"Authorization": f"Bearer {AgentTokens(SECRET).issue(job.id, 1)}"}
    for _ in range(2):  # the answer to the first was lost: the agent sends it again
        assert httpx.post(f"{api.url}/v1/agent/i-1/report", json=body, headers=headers).is_success
    more = {**body, "log_lines": ["b", "c"], "log_seq": 1}
    assert httpx.post(f"{api.url}/v1/agent/i-1/report", json=more, headers=headers).is_success
    assert store.jobs.logs(job.id) == ["a", "b", "c"]
    # The next attempt's agent numbers its output from 0 again.
    job = store.jobs.get(job.id)
    job.attempt = 2
    job.placement = job.placement.model_copy(update={"attempt": 2, "client_token": "t-2"})
    store.jobs.save(job)
    headers = {"Authorization": f"Bearer {AgentTokens(SECRET).issue(job.id, 2)}"}
    second = {**body, "attempt": 2, "log_lines": ["x"], "log_seq": 0}
    assert httpx.post(f"{api.url}/v1/agent/i-1/report", json=second, headers=headers).is_success
    assert store.jobs.logs(job.id) == ["a", "b", "c", "x"]


def test_long_non_ascii_lines_go_in_reports_the_api_accepts(store, api):
    job = _running_job(store, "true")
    reporter = Reporter(api.url, AgentTokens(SECRET).issue(job.id, 1), "i-1", job.id, 1)
    # 500 lines of 3,990 three-byte characters (a progress bar): 12 KB each, 6 MB in all,
    # more than one report may carry.
    lines = [f"{n:03d} " + "\u2588" * 3990 for n in range(500)]
    for line in lines:
        reporter.add_line(line)
    assert reporter.send(AgentPhase.RUNNING) is not None
    assert reporter.queued_lines() == 0
    assert store.jobs.logs(job.id) == [cap_log_line(line) for line in lines]  # stored cut
