"""A job migrates across providers, end to end: a real daemon on a replayed market holding AWS
and Alibaba Cloud offers (examples/markets/aws-aliyun.yaml), real agents running the real
training job, the checkpoint in a neutral S3 store (a real SeaweedFS server). The job starts
on AWS spot, is preempted, resumes on Alibaba Cloud from its checkpoint and finishes with the
same model as an uninterrupted run; the timeline and the bill show both providers in USD."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from providers.replay.provider import ReplayProvider
from scheduler.checkpoints.checkpoints import list_checkpoints, restore_latest
from scheduler.checkpoints.urls import open_store
from core.config import examples_dir
from tests.e2e.conftest import E2E_ENV, load_params
from tests.e2e.harness import TERMINAL, DaemonProcess
from tests.fixtures.waiting import wait_until

pytestmark = pytest.mark.e2e
JOB_SPEC = examples_dir() / "charlm-job.yaml"
MARKET = examples_dir() / "markets" / "aws-aliyun.yaml"


@pytest.fixture
def daemon(tmp_path, s3_server):
    store_url = s3_server.store_url(prefix="neutral")
    d = DaemonProcess(tmp_path / "home", MARKET,
                      env={"GA_STORE_URL": store_url, **s3_server.credentials_env()})
    d.store_url = store_url
    yield d
    d.stop()
    ReplayProvider(d.market, d.home / "replay").shutdown_cloud()


def test_job_preempted_on_aws_resumes_on_aliyun(daemon, reference_model, tmp_path,
                                                s3_server, monkeypatch) -> None:
    daemon.start()
    job = daemon.submit(JOB_SPEC, env=E2E_ENV)
    done = wait_until(lambda: (j := daemon.job(job["id"]))["state"] in TERMINAL and j, 240,
                      "the job to finish", detail=daemon.log_tail)
    assert done["state"] == "succeeded", done["events"]

    # Where it ran: AWS spot first, preempted; then Alibaba Cloud, where it finished.
    placements = [*done["placements"], *([done["placement"]] if done["placement"] else [])]
    where = [(p["offer"]["provider"], p["offer"]["zone"], p["offer"]["market"],
              p.get("end_reason")) for p in placements]
    assert where[0][:3] == ("aws", "us-east-1a", "spot") and where[0][3] == "preempted", where
    assert where[-1][:3] == ("aliyun", "cn-hangzhou-h", "spot"), where
    assert done["derived"]["migrations"] >= 1
    prices = [p["offer"]["price_usd_per_hour"] for p in placements]
    assert prices[0] == 0.158 and prices[-1] == 0.241  # both in USD

    # The checkpoint committed on AWS after the notice is the one restored on Alibaba.
    committed = [e["message"] for e in done["events"]
                 if "job stopped after the preemption notice; checkpoint" in e["message"]]
    resumed = [e for e in done["events"] if "resumed from checkpoint" in e["message"]]
    assert committed and resumed, [e["message"] for e in done["events"]]
    ckpt = committed[0].split("; checkpoint ")[1].split(" committed")[0]
    assert ckpt in resumed[0]["message"]
    assert resumed[0]["offer"].startswith("aliyun/cn-hangzhou/cn-hangzhou-h/")
    # Timeline events carry their offer's series key and its USD price.
    priced = {e["offer"].split("/")[0]: e["price_usd_per_hour"] for e in done["events"]
              if e.get("offer") and e.get("price_usd_per_hour") is not None}
    assert priced == {"aws": 0.158, "aliyun": 0.241}, done["events"]

    # The neutral store holds the job's checkpoints; the final model equals an uninterrupted run.
    for name, value in s3_server.credentials_env().items():
        monkeypatch.setenv(name, value)
    store = open_store(daemon.store_url)
    assert list_checkpoints(store, job["id"])[0].final
    manifest = restore_latest(store, job["id"], tmp_path / "restored")
    assert manifest is not None and manifest.final
    got, want = load_params(tmp_path / "restored" / "final_model.npz"), load_params(reference_model)
    assert set(got) == set(want)
    assert all(np.array_equal(got[k], want[k]) for k in want)

    # What a user sees: one timeline and one bill, both providers, dollars.
    shown = subprocess.run(
        [sys.executable, "-m", "scheduler", "status", job["id"], "--home", str(daemon.home)],
        env={**daemon.env, "COLUMNS": "160"}, capture_output=True, text=True, timeout=60, check=False)
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    assert "aws/us-east-1a g4dn.xlarge" in text and "aliyun/cn-hangzhou-h" in text, text
    assert "$0.158" in text and "$0.241" in text and "¥" not in text and "CNY" not in text
    assert done["derived"]["cost_usd"] < done["derived"]["on_demand_cost_usd"]
