"""Markets that warn differently, end to end: a real daemon on a replayed market holding Vast.ai,
Azure and GCP offers (examples/markets/vast-azure-gcp.yaml), real agents running the real
training job, the checkpoint in a neutral S3 store (a real SeaweedFS server).

The job starts on Vast.ai's interruptible offer, which is outbid without any notice: its
instance just stops, and the job resumes on Azure from its last periodic checkpoint. Azure then
evicts it with a Scheduled Events Preempt 30 s ahead: the agent takes its final checkpoint
within the notice and approves the event; the job resumes on GCP from that checkpoint and
finishes with the same model as an uninterrupted run. One run serves every test here."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pytest

from core.config import examples_dir
from core.models import TAG_ATTEMPT, TAG_JOB
from providers.replay.provider import ReplayProvider
from scheduler.checkpoints.urls import open_store
from tests.e2e.conftest import E2E_ENV
from tests.e2e.harness import TERMINAL, DaemonProcess
from tests.e2e.outcomes import assert_final_model_is_the_reference
from tests.fixtures.waiting import wait_until

pytestmark = pytest.mark.e2e
JOB_SPEC = examples_dir() / "charlm-job.yaml"
MARKET = examples_dir() / "markets" / "vast-azure-gcp.yaml"
# A 2 ms pause per step keeps the job running past both reclaims (market minutes 30 and 70)
# however fast the machine; the model does not depend on it.
JOB_ENV = {**E2E_ENV, "CHARLM_STEP_SLEEP_S": "0.002"}
CHECKPOINT_EVERY = int(E2E_ENV["CHARLM_CHECKPOINT_EVERY"])


@dataclass
class Run:
    """What the one run left behind: the finished job (API view), its instances by attempt
    (the replay cloud's view), the job's output lines, and the daemon."""

    job: dict[str, Any]
    instances: dict[int, dict[str, Any]]
    lines: list[str]
    daemon: DaemonProcess
    store_url: str


def _all_lines(daemon: DaemonProcess, job_id: str) -> list[str]:
    lines: list[str] = []
    while True:
        page = daemon.client().get(f"/v1/jobs/{job_id}/logs", start=len(lines))
        if not page["lines"]:
            return lines
        lines.extend(page["lines"])


@pytest.fixture(scope="module")
def run(tmp_path_factory, s3_server) -> Iterator[Run]:
    home = tmp_path_factory.mktemp("no-notice") / "home"
    store_url = s3_server.store_url(prefix="neutral")
    daemon = DaemonProcess(home, MARKET, env={"GA_STORE_URL": store_url,
                                              **s3_server.credentials_env()})
    try:
        daemon.start()
        job_id = daemon.submit(JOB_SPEC, env=JOB_ENV)["id"]
        done = wait_until(lambda: (j := daemon.job(job_id))["state"] in TERMINAL and j, 360,
                          "the job to finish", detail=daemon.log_tail)
        rows = ReplayProvider(MARKET, home / "replay").describe_raw({TAG_JOB: job_id})
        instances = {int(r["tags"][TAG_ATTEMPT]): r for r in rows}
        yield Run(done, instances, _all_lines(daemon, job_id), daemon, store_url)
    finally:
        daemon.stop()
        ReplayProvider(MARKET, home / "replay").shutdown_cloud()


def _placements(job: dict[str, Any]) -> list[dict[str, Any]]:
    return [*job["placements"], *([job["placement"]] if job["placement"] else [])]


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text)


def test_the_job_moved_vast_then_azure_then_gcp_and_finished(run: Run) -> None:
    assert run.job["state"] == "succeeded", run.job["events"]
    where = [(p["offer"]["provider"], p["offer"]["market"], p.get("end_reason"))
             for p in _placements(run.job)]
    assert where[0] == ("vastai", "spot", "preempted"), where
    assert where[1] == ("azure", "spot", "preempted"), where
    assert where[-1][:2] == ("gcp", "spot"), where
    assert [run.instances[a]["notice_style"] for a in sorted(run.instances)][:3] == \
        ["none", "azure", "gcp"]


def test_outbid_on_vast_resumes_from_its_last_periodic_checkpoint(
        run: Run, s3_server, reference_model, monkeypatch, tmp_path) -> None:
    vast = run.instances[1]
    # No notice of any kind: the instance was simply stopped, agent and job with it.
    assert (vast["state"], vast["terminated_reason"], vast["notice"]) == \
        ("terminated", "preempted", None)
    first_resume = next(i for i, line in enumerate(run.lines) if "resumed from step " in line)
    before = run.lines[:first_resume]
    assert not [line for line in before if "after SIGTERM" in line], before[-5:]
    step = int(run.lines[first_resume].split("resumed from step ")[1].split()[0])
    periodic = [int(line.split("at step ")[1].split()[0]) for line in before
                if "checkpoint saved at step " in line]
    # The job came back at one of the periodic checkpoints it had saved on Vast.
    assert step > 0 and step % CHECKPOINT_EVERY == 0 and step in periodic, (step, periodic)
    events = [e["message"] for e in run.job["events"]]
    resumed = [m for m in events if "resumed from checkpoint " in m]
    assert resumed and resumed[0].split("resumed from checkpoint ")[1].split()[0].rstrip(
        ",;").endswith("-a1"), events
    assert not [m for m in events if "job stopped after the preemption notice" in m
                and events.index(m) < events.index(resumed[0])]
    # ... and still finished with exactly the model of an uninterrupted run.
    for name, value in s3_server.credentials_env().items():
        monkeypatch.setenv(name, value)
    assert_final_model_is_the_reference(open_store(run.store_url), run.job["id"],
                                        reference_model, tmp_path / "restored")


def test_evicted_on_azure_checkpoints_within_the_notice_and_approves_it(run: Run) -> None:
    azure = run.instances[2]
    notice = azure["notice"]
    # (the daemon terminates it once the checkpoint is in: it need not wait for the eviction)
    assert notice is not None and azure["state"] == "terminated"
    received, action = _at(notice["received_at"]), _at(notice["action_at"])
    assert (action - received).total_seconds() == pytest.approx(30, abs=0.01)
    # The agent approves the Preempt event only after its final checkpoint was committed:
    # the approval inside the notice window means the checkpoint made it in time.
    assert azure["notice_approved_at"] is not None, azure
    approved = _at(azure["notice_approved_at"])
    assert received < approved < action, (received, approved, action)
    events = [e["message"] for e in run.job["events"]]
    stopped = [m for m in events if "job stopped after the preemption notice; checkpoint " in m]
    assert len(stopped) == 1, events
    checkpoint = stopped[0].split("; checkpoint ")[1].split(" committed")[0]
    assert checkpoint.endswith("-a2")
    resumed = [m for m in events if "resumed from checkpoint " in m]
    assert checkpoint in resumed[-1]
    saved = [line for line in run.lines if "after SIGTERM" in line]
    assert len(saved) == 1, saved
    step = int(saved[0].split("at step ")[1].split()[0])
    assert f"resumed from step {step} " in "\n".join(run.lines) + " "

