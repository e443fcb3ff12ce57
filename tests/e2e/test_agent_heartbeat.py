"""An agent that stops heartbeating (SIGSTOP: the process lives, the instance still runs, but
nothing is reported) is presumed lost once AGENT_LOST_AFTER_S (6 s here, through
GA_AGENT_LOST_AFTER_S) has passed: its instance is terminated and the job relaunched from its
latest committed checkpoint; it finishes with the exact model of an uninterrupted run."""

from __future__ import annotations

import os
import signal

import pytest

from core.config import examples_dir
from core.models import TAG_ATTEMPT, TAG_JOB
from providers.replay.provider import ReplayProvider
from scheduler.checkpoints.keys import created_ms_of
from scheduler.checkpoints.urls import open_store
from tests.e2e.conftest import SHORT_E2E_ENV
from tests.e2e.harness import TERMINAL, DaemonProcess
from tests.e2e.outcomes import assert_final_model_is_the_reference
from tests.fixtures.waiting import wait_until

pytestmark = pytest.mark.e2e
MARKET = examples_dir() / "market.yaml"
JOB_SPEC = examples_dir() / "charlm-job.yaml"
LOST_AFTER_S = 6


@pytest.fixture
def daemon(tmp_path):
    d = DaemonProcess(tmp_path / "home", MARKET,
                      env={"GA_AGENT_LOST_AFTER_S": str(LOST_AFTER_S)})
    yield d
    d.stop()
    ReplayProvider(MARKET, d.home / "replay").shutdown_cloud()


def test_a_silent_agent_is_presumed_lost_and_its_job_resumes_elsewhere(
        daemon, reference_models, tmp_path):
    # The agent is lost seconds after the first checkpoint, well before the market's first
    # reclaim: the shorter job settings do.
    reference_model = reference_models(SHORT_E2E_ENV)
    daemon.start()
    job_id = daemon.submit(JOB_SPEC, env=SHORT_E2E_ENV)["id"]
    recorded = wait_until(lambda: daemon.job(job_id)["last_checkpoint_id"], 60,
                          "a first checkpoint", detail=daemon.log_tail)
    cloud = ReplayProvider(MARKET, daemon.home / "replay")
    (row,) = cloud.describe_raw({TAG_JOB: job_id})
    os.kill(row["pid"], signal.SIGSTOP)  # the agent freezes; its instance keeps running

    done = wait_until(lambda: (j := daemon.job(job_id))["state"] in TERMINAL and j, 240,
                      "the job to finish", detail=daemon.log_tail)
    assert done["state"] == "succeeded", done["events"]
    messages = [e["message"] for e in done["events"]]
    lost = [i for i, m in enumerate(messages) if f"agent silent for over {LOST_AFTER_S} s" in m]
    assert lost, messages
    # The next attempt resumed from a committed checkpoint at least as new as the one recorded
    # before the agent froze.
    resumed = [m for m in messages[lost[0]:] if "resumed from checkpoint " in m]
    assert resumed, messages
    resumed_id = resumed[0].split("resumed from checkpoint ")[1].split()[0]
    assert created_ms_of(resumed_id) >= created_ms_of(recorded)
    assert done["placements"][0]["end_reason"] == "lost"
    # The frozen agent's instance was terminated (one instance per attempt, none left).
    rows = wait_until(lambda: (r := cloud.describe_raw({TAG_JOB: job_id})) and all(
        x["state"] == "terminated" for x in r) and r, 30, "every instance terminated")
    assert len({x["tags"][TAG_ATTEMPT] for x in rows}) == len(rows) == len(done["placements"])
    assert_final_model_is_the_reference(
        open_store((daemon.home / "checkpoints").resolve().as_uri()), job_id, reference_model,
        tmp_path / "restored")
