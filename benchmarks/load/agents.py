"""The node agents of the load benchmark: one heartbeat per job every ``AGENT_HEARTBEAT_S``
seconds, spread evenly over time.

Every ``--api-every``-th job reports as a real agent does, ``POST /v1/agent/{instance}/report``
with its scoped agent token, spread over the replicas' API URLs: that measures report latency
under load. The other jobs' heartbeats are written straight to Redis as the API would write them
(:meth:`AgentStore.save_report`), so the reconcile loop sees 1,000 live agents without the API
also having to serve 500 requests a second on the same two cores (measured apart: see
RESULTS.md).

Prints one JSON line at the end: API requests sent, errors (and how many of each kind),
report latency p50/p99 (ms),
heartbeats written to Redis and the writes that failed. ``--redis-url`` is any form
:func:`scheduler.store.connection.connect` takes (one server or a cluster).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import numpy as np
import redis

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.load.market import instance_id, job_id
from core.models.agents import AgentPhase, AgentReport
from scheduler.store.agents import AgentStore, AgentTokens
from scheduler.store.connection import connect
from scheduler.timing import AGENT_HEARTBEAT_S

writer_count = [0]
write_errors = [0]


def schedule(numbers: list[int], jobs: int, start: float, seconds: float):
    """``(job number, seconds to wait)`` of each heartbeat of the jobs in ``numbers`` until
    ``seconds`` after ``start``: job ``n`` beats at ``start + n × period / jobs`` (mod the
    period), so all jobs' heartbeats make one even stream."""
    i = 0
    while numbers and time.monotonic() - start < seconds:
        n = numbers[i % len(numbers)]
        due = start + (i // len(numbers)) * AGENT_HEARTBEAT_S + n * AGENT_HEARTBEAT_S / jobs
        yield n, max(0.0, due - time.monotonic())
        i += 1


def write_directly(agents: AgentStore, numbers: list[int], jobs: int, start: float,
                   seconds: float) -> None:
    """Heartbeats of the jobs in ``numbers``, paced like the API ones, written to Redis the way
    the API handler writes them."""
    for n, delay in schedule(numbers, jobs, start, seconds):
        time.sleep(delay)
        now = datetime.now(UTC)
        try:
            agents.save_report(AgentReport(job_id=job_id(n), attempt=1,
                                           phase=AgentPhase.RUNNING, at=now, received_at=now))
        except redis.RedisError:  # counted, not fatal: one failed write must not end the run
            write_errors[0] += 1
            continue
        writer_count[0] += 1


async def run(urls: list[str], jobs: int, seconds: float, secret: bytes, redis_url: str,
              api_every: int) -> dict:
    tokens = AgentTokens(secret)
    agents = AgentStore(connect(redis_url))  # one server or a cluster, as the API's
    latencies: list[float] = []
    errors = 0
    error_kinds: dict[str, int] = {}  # "HTTP <status>: <body head>" or the exception's name
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    async with httpx.AsyncClient(timeout=10, limits=limits) as client:
        async def beat(n: int) -> None:
            nonlocal errors
            url = f"{urls[n % len(urls)]}/v1/agent/{instance_id(n)}/report"
            body = {"job_id": job_id(n), "attempt": 1, "phase": "running",
                    "at": datetime.now(UTC).isoformat(), "checkpoint_id": None}
            t0 = time.perf_counter()
            try:
                r = await client.post(url, json=body, headers={
                    "Authorization": f"Bearer {tokens.issue(job_id(n), 1)}"})
                if r.status_code != 200:
                    errors += 1
                    kind = f"HTTP {r.status_code}: {r.text[:120]}"
                    error_kinds[kind] = error_kinds.get(kind, 0) + 1
            except httpx.HTTPError as exc:
                errors += 1
                kind = type(exc).__name__
                error_kinds[kind] = error_kinds.get(kind, 0) + 1
            latencies.append((time.perf_counter() - t0) * 1000)

        start = time.monotonic()
        # Heartbeats written straight to Redis go from a thread of their own: a blocking
        # write on this event loop would delay reading the API's answers and inflate them.
        writer = threading.Thread(target=write_directly, args=(
            agents, [n for n in range(jobs) if n % api_every], jobs, start, seconds))
        writer.start()
        tasks = set()
        api_jobs = [n for n in range(jobs) if n % api_every == 0]
        for n, delay in schedule(api_jobs, jobs, start, seconds):
            await asyncio.sleep(delay)
            task = asyncio.create_task(beat(n))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        writer.join()
        written = writer_count[0]
        unanswered = 0
        if tasks:
            _, pending = await asyncio.wait(set(tasks), timeout=5)
            unanswered = len(pending)
            for task in pending:
                task.cancel()
    lat = np.array(latencies) if latencies else np.zeros(1)
    return {"sent": len(latencies) + unanswered, "errors": errors + unanswered,
            "unanswered": unanswered, "written": written, "write_errors": write_errors[0],
            "error_kinds": error_kinds,
            "p50_ms": float(np.percentile(lat, 50)), "p99_ms": float(np.percentile(lat, 99))}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", action="append", required=True)
    parser.add_argument("--jobs", type=int, required=True)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--secret", required=True)
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--api-every", type=int, default=10,
                        help="every N-th job reports through the API (1: all of them)")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args.url, args.jobs, args.seconds, args.secret.encode(),
                                     args.redis_url, args.api_every))))


if __name__ == "__main__":
    main()
