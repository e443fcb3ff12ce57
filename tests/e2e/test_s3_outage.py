"""The S3 checkpoint store down under a running job: a daemon whose checkpoint store is a real
S3 server (SeaweedFS), stopped while the job runs and syncs, kept down through the market's
preemption notice, then restarted on the same ports and data. The agent keeps the checkpoint
local and retries the upload; the controller does not move the job until the checkpoint taken
after the notice is committed; the job resumes from it and ends with the exact model of an
uninterrupted run.

The market is the demo market with a 60 s notice (AWS gives 120 s) instead of its 10 s, so the
instance outlives an outage that spans the notice plus the S3 server's restart (~15 s)."""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path

import pytest

from providers.replay.provider import ReplayProvider
from scheduler.checkpoints.urls import open_store
from core.config import examples_dir
from core.models import TAG_JOB
from tests.e2e.conftest import E2E_ENV
from tests.e2e.harness import TERMINAL, DaemonProcess
from tests.fixtures.waiting import wait_until
from tests.e2e.outcomes import (
    assert_final_model_is_the_reference,
    assert_resumed_from_the_committed_checkpoint,
)
from tests.fixtures.s3_server import start_s3

pytestmark = pytest.mark.e2e
JOB_SPEC = examples_dir() / "charlm-job.yaml"
# The S3 server stays down this long after the notice (the market's notice is 60 s), so the
# upload of the checkpoint taken after the notice is retried several times.
STILL_DOWN_AFTER_NOTICE_S = 10


@pytest.fixture
def market(tmp_path):
    text = (examples_dir() / "market.yaml").read_text()
    text = text.replace("notice_seconds: 10", "notice_seconds: 60").replace(
        "availability_trace: markets/", f"availability_trace: {examples_dir() / 'markets'}/")
    path = tmp_path / "market.yaml"
    path.write_text(text)
    return path


@pytest.fixture
def setup(tmp_path, market, monkeypatch):
    root = tmp_path / "weed"
    root.mkdir()
    s3 = start_s3(root)
    for name, value in s3.credentials_env().items():
        monkeypatch.setenv(name, value)  # for the test's own store client
    store_url = s3.store_url()
    daemon = DaemonProcess(tmp_path / "home", market,
                           env={**s3.credentials_env(), "GA_STORE_URL": store_url})
    yield daemon, s3, store_url
    daemon.stop()
    ReplayProvider(market, daemon.home / "replay").shutdown_cloud()
    s3.stop()


def _at(event) -> datetime:
    return datetime.fromisoformat(event["at"])


def test_job_finishes_exactly_through_an_s3_outage_spanning_its_preemption(
        setup, reference_model, tmp_path):
    daemon, s3, store_url = setup
    daemon.start()
    job_id = daemon.submit(JOB_SPEC, env=E2E_ENV)["id"]
    wait_until(lambda: daemon.job(job_id)["last_checkpoint_id"], 60, "a first checkpoint",
               detail=daemon.log_tail)

    s3.stop()  # uploads now fail; the agent retries and keeps the files local
    down_at = time.time()
    noticed = wait_until(lambda: (j := daemon.job(job_id))["state"] == "checkpointing" and j, 90,
                         "the preemption notice", detail=daemon.log_tail)
    time.sleep(STILL_DOWN_AFTER_NOTICE_S)  # the job stopped; its checkpoint cannot be uploaded
    during = daemon.job(job_id)
    assert during["state"] == "checkpointing", during["events"][-3:]  # the move waits
    assert len(during["placements"]) == len(noticed["placements"])
    (row,) = [r for r in ReplayProvider(daemon.market, daemon.home / "replay").describe_raw(
        {TAG_JOB: job_id}) if r["state"] == "running"]
    local = list(Path(row["work_dir"]).rglob("*.npz"))
    assert local, "the checkpoint stays on the instance until it lands"
    s3.start()  # same ports, same data
    up_at = time.time()

    done = wait_until(lambda: (j := daemon.job(job_id))["state"] in TERMINAL and j, 240,
                      "the job to finish", detail=daemon.log_tail)
    assert done["state"] == "succeeded", done["events"]
    assert_resumed_from_the_committed_checkpoint(done)
    moved = [e for e in done["events"] if "after the preemption notice; checkpoint" in e["message"]]
    assert moved and _at(moved[0]).timestamp() > up_at - 1, (moved, down_at, up_at)
    assert_final_model_is_the_reference(open_store(store_url), job_id, reference_model,
                                        tmp_path / "restored")
    # The agent retried: the periodic uploads, then the checkpoint taken after the notice.
    agent_log = (Path(row["work_dir"]) / "agent.log").read_text()
    assert "checkpoint upload failed (" in agent_log
    assert "checkpoint upload failed (try " in agent_log
