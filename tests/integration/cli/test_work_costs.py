"""Cost per unit of work in ``schedctl status``, ``list`` and ``cost-report``, through the real
API app served on a port over a real Redis: a job record with progress and a measured rate
shows what 1,000 samples cost on its offer and what the work done cost; its checkpoints'
storage and transfer are in the cost report; a job that reports no progress shows as before.

The job, worked by hand: 1M samples in all; attempt 1 ran 1 h on a $2.00/h A100 and was
reclaimed; attempt 2 runs on the same kind of offer since just after the job's two
checkpoints. Its progress points: 0 samples at t, 200,000 one hour later: 200,000 samples/h
measured on 1x A100-80GB. So $2.00 × 1,000 ÷ 200,000 = $0.01 per 1k samples; 800,000 left:
4.0 h and $8.00 to finish; $2.00 billed so far for 200,000 done: $0.01 per 1k done.
"""

from __future__ import annotations

import json
import os
from datetime import timedelta

import pytest
from typer.testing import CliRunner

from core.models import Job, JobState, Placement, PlacementEnd
from core.models.jobs import JobProgress
from core.models.work import ProgressPoint
from scheduler.checkpoints.checkpoints import commit_checkpoint
from scheduler.checkpoints.local import LocalObjectStore
from scheduler.cli.main import app as cli
from tests.factories.jobs import spec
from tests.factories.offers import offer
from tests.integration.cli.conftest import new_job

A100 = offer(instance_type="a100", market="on-demand", gpu_model="A100-80GB", vram_gib=80,
             price_usd_per_hour=2.00, interruption_risk=0.0)
MIB = 1 << 20


def _job(store, objects_dir) -> Job:
    objects = LocalObjectStore(objects_dir)
    src = objects_dir.parent / "ckpt"
    src.mkdir()
    # Random bytes: zstd would not save 10 %, so they are stored as they are.
    (src / "model.bin").write_bytes(os.urandom(MIB))
    commit_checkpoint(objects, "bert-1", src, attempt=1)
    (src / "opt.bin").write_bytes(os.urandom(MIB // 2))
    second = commit_checkpoint(objects, "bert-1", src, attempt=1)
    c = second.created_at
    job = Job(id="bert-1", spec=spec(name="bert", work={"unit": "samples", "total": 1e6}),
              created_at=c - timedelta(hours=3), updated_at=c, state=JobState.RUNNING,
              attempt=2)
    job.placements = [Placement(attempt=1, offer=A100, client_token="a",
                                decided_at=c - timedelta(hours=3), instance_id="i-1",
                                started_at=c - timedelta(hours=2),
                                ended_at=c - timedelta(hours=1),
                                end_reason=PlacementEnd.PREEMPTED)]
    job.placement = Placement(attempt=2, offer=A100, client_token="b", decided_at=c,
                              instance_id="i-2", started_at=c + timedelta(milliseconds=1))
    t = c - timedelta(hours=1)
    job.progress = JobProgress(
        latest=ProgressPoint(unit="samples", done=200_000, total=1e6, at=t + timedelta(hours=1)),
        attempt=2, gpu_model="A100-80GB", gpu_count=1,
        start=ProgressPoint(unit="samples", done=0, at=t))
    return store.jobs.create(job)


@pytest.fixture
def env(served, monkeypatch, tmp_path):
    monkeypatch.setenv("GA_HOME", str(served.home))
    monkeypatch.setenv("COLUMNS", "200")
    job = _job(served.store, tmp_path / "objects")  # the served app's checkpoint store
    plain = new_job(served.store, "plain")
    return served, job, plain


def run(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return " ".join(result.output.split())


def test_status_shows_cost_per_1k_samples(env):
    _, job, plain = env
    out = run("status", job.id)
    assert "($0.01 per 1k samples done)" in out
    assert ("work: 200k of 1M samples · 200k samples/h on 1x A100-80GB (measured) at "
            "$2.0000/h = $0.01 per 1k samples · 4.0 h, $8.00 to finish") in out
    before = run("status", plain.id)
    assert "work:" not in before and "per 1k" not in before


def test_the_job_summary_has_the_work_figures(env):
    import httpx

    served, job, plain = env
    headers = {"Authorization": "Bearer user-token"}
    w = httpx.get(f"{served.url}/v1/jobs/{job.id}", headers=headers).json()["derived"]["work"]
    assert (w["unit"], w["done"], w["total"], w["remaining"]) == ("samples", 2e5, 1e6, 8e5)
    assert (w["rate_source"], w["gpu_model"], w["gpu_count"]) == ("measured", "A100-80GB", 1)
    assert w["rate_units_per_h"] == pytest.approx(2e5)
    assert w["cost_per_1k_usd"] == pytest.approx(0.01)
    assert w["hours_to_finish"] == pytest.approx(4.0)
    assert w["cost_to_finish_usd"] == pytest.approx(8.0)
    assert w["cost_so_far_usd"] == pytest.approx(2.0, abs=0.01)  # + seconds of attempt 2
    assert w["cost_so_far_per_1k_usd"] == pytest.approx(0.01, abs=1e-4)
    other = httpx.get(f"{served.url}/v1/jobs/{plain.id}", headers=headers).json()
    assert other["derived"]["work"] is None


def test_list_shows_cost_per_1k_samples_next_to_the_price(env):
    result = CliRunner().invoke(cli, ["list"], catch_exceptions=False)
    rows = {line.split()[0]: line.split()[1:] for line in result.output.splitlines()
            if line.startswith(("plain-0001", "bert-1"))}
    # state, tries, last offer (provider/zone, type), $/h, cost, $/1k units, on-demand, created
    # The running attempt's seconds add to the cost as the test runs (about $0.0006 a second).
    bert = rows["bert-1"]
    assert bert[:5] + bert[6:8] == ["running", "2", "aws/us-west-2a", "a100", "2",
                                     "$0.01/1k", "samples"]
    assert float(bert[5].lstrip("$")) == pytest.approx(2.0, abs=0.01)
    assert rows["plain-0001"][:6] == ["pending", "0", "-", "-", "$0.0000", "-"]


def test_cost_report_shows_cost_per_1k_and_checkpoint_costs(env):
    report = json.loads(run("cost-report", "bert-1", "--format", "json"))
    [row] = report["jobs"]
    assert row["work_unit"] == "samples" and row["work_done"] == 2e5
    assert row["usd_per_1k_units"] == pytest.approx(0.01, abs=1e-4)
    assert row["offer_usd_per_1k_units"] == pytest.approx(0.01)
    assert row["rate_source"] == "measured"
    ck = row["checkpoints"]
    # Two checkpoints: 1 MiB, then the same file and 0.5 MiB more; one restore (attempt 2)
    # downloads the newest (1.5 MiB). Transfer: 3 MiB at $0.09/GiB.
    assert (ck["checkpoints"], ck["stored_bytes"], ck["uploaded_bytes"],
            ck["restored_bytes"]) == (2, 3 * MIB // 2, 3 * MIB // 2, 3 * MIB // 2)
    assert row["transfer_usd"] == pytest.approx(3 / 1024 * 0.09)
    # Stored 1.5 MiB for well under an hour at $0.023/GiB-month (730 h).
    assert 0 < row["storage_usd"] < 1.5 / 1024 / 730 * 0.023
    assert row["total_usd"] == pytest.approx(row["compute_usd"] + row["storage_usd"]
                                             + row["transfer_usd"])
    csv = CliRunner().invoke(cli, ["cost-report", "--format", "csv"], catch_exceptions=False)
    header = csv.output.splitlines()[0].split(",")
    assert {"usd_per_1k_units", "work_unit", "storage_usd", "transfer_usd"} <= set(header)
    table = run("cost-report")
    assert "$0.01/1k samples" in table and "$0.0003" in table  # transfer, 4 decimals
