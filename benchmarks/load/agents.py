"""The node agents of the load benchmark: one heartbeat per job every ``AGENT_HEARTBEAT_S``
seconds, as ``POST /v1/agent/{instance}/report`` with the job's scoped agent token, spread evenly
over time and over the replicas' API URLs (agents fail over between replicas the same way).

Prints one JSON line at the end: requests sent, errors, and report latency p50/p99 (ms).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.load.market import instance_id, job_id
from scheduler.store.agents import AgentTokens
from scheduler.timing import AGENT_HEARTBEAT_S


async def run(urls: list[str], jobs: int, seconds: float, secret: bytes) -> dict:
    tokens = AgentTokens(secret)
    latencies: list[float] = []
    errors = 0
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
            except httpx.HTTPError:
                errors += 1
            latencies.append((time.perf_counter() - t0) * 1000)

        start = time.monotonic()
        tasks = set()
        i = 0
        while time.monotonic() - start < seconds:
            # job i beats at start + i * period/jobs (mod period): an even stream
            due = start + i * AGENT_HEARTBEAT_S / jobs
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            task = asyncio.create_task(beat(i % jobs))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            i += 1
        await asyncio.gather(*tasks)
    lat = np.array(latencies) if latencies else np.zeros(1)
    return {"sent": len(latencies), "errors": errors,
            "p50_ms": float(np.percentile(lat, 50)), "p99_ms": float(np.percentile(lat, 99))}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", action="append", required=True)
    parser.add_argument("--jobs", type=int, required=True)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--secret", required=True)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args.url, args.jobs, args.seconds, args.secret.encode()))))


if __name__ == "__main__":
    main()
