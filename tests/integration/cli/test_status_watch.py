"""``schedctl status JOB --watch`` with stdout a pipe (CI logs, ``| tee``, a file): each new
event is printed as a line when it happens, not only when the job ends."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta

from core.models import JobState, PlacementEnd, utcnow
from core.models.placements import Placement
from tests.factories.offers import offer
from tests.integration.cli.conftest import line_reader, new_job


def _until(lines, text: str, timeout_s: float = 30.0) -> list[str]:
    """Lines read until one containing ``text`` (the one included)."""
    seen = []
    while True:
        line = lines.get(timeout=timeout_s)
        assert line is not None, f"output ended before {text!r}: {seen}"
        seen.append(line)
        if text in line:
            return seen


def test_piped_watch_prints_each_event_as_it_happens(served):
    store = served.store
    job = new_job(store)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env.update(GA_HOME=str(served.home), COLUMNS="120")
    proc = subprocess.Popen([sys.executable, "-m", "scheduler.cli.main", "status", job.id,
                             "--watch"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    lines = line_reader(proc.stdout)
    try:
        assert "pending submitted" in _until(lines, "submitted")[-1]
        job = store.jobs.get(job.id)
        job.waiting_reason = "15 offers, 0 eligible: min_vram_gib rejects 15"
        store.jobs.save(job)
        assert _until(lines, "waiting:")[-1].strip() == f"waiting: {job.waiting_reason}"

        # Placed and running: the line comes while the job still runs.
        job = store.jobs.get(job.id)
        chosen = offer(price_usd_per_hour=0.5)
        now = utcnow()
        job.attempt = 1
        job.placement = Placement(attempt=1, offer=chosen, client_token="t-1", decided_at=now,
                                  instance_id="i-1", started_at=now - timedelta(hours=1))
        job.record(JobState.RUNNING, "running on the cheapest offer", offer=chosen)
        store.jobs.save(job)
        line = _until(lines, "running on the cheapest offer")[-1]
        assert "running" in line and "aws/us-west-2/us-west-2a/p3.2xlarge/spot @ $0.5000/h" in line
        assert proc.poll() is None

        job = store.jobs.get(job.id)
        job.placement.ended_at, job.placement.end_reason = utcnow(), PlacementEnd.SUCCEEDED
        job.placements.append(job.placement)
        job.placement = None
        job.record(JobState.SUCCEEDED, "finished")
        store.jobs.save(job)
        rest = "".join(_until(lines, "finished"))
        assert "succeeded finished" in rest
        tail = []
        while (line := lines.get(timeout=30)) is not None:
            tail.append(line)
        assert proc.wait(30) == 0, proc.stderr.read()
        summary = "".join(tail)
        # the final summary: the job panel with its cost and placements
        assert job.id in summary and "cost $0.5" in summary and "placements" in summary
        # each event printed once as a line (the panel's timeline shows it again)
        assert (rest + summary).count("running on the cheapest offer") == 1
        assert rest.count("finished") == 1
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
