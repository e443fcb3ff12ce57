"""Long-polls vs. the rest of the API: ``--polls`` concurrent ``GET /v1/events?after=<a future
id>&wait_s=5`` against a real uvicorn server (own ``redis-server`` on a free port), then the
latency of ``/v1/health`` and ``/v1/jobs`` while they all wait, and how long the polls took.

Command: ``python -m benchmarks.observability.bench_longpoll [--polls 200]``."""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import uvicorn

from scheduler.api.app import create_app
from scheduler.checkpoints.local import LocalObjectStore
from scheduler.store import Store
from scheduler.store.agents import AgentTokens
from tests.fixtures.redis_server import free_port, start_redis

TOKEN = "bench"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--polls", type=int, default=200)
    args = parser.parse_args()
    port = free_port()
    redis_server = start_redis(Path(tempfile.mkdtemp(prefix="ga-bench-longpoll-")))
    try:
        client = redis_server.client()
        app = create_app(Store.over(client), LocalObjectStore(Path(tempfile.mkdtemp())),
                         AgentTokens(b"s"), TOKEN)
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                               log_level="warning", lifespan="off"))
        threading.Thread(target=server.run, daemon=True).start()
        while not server.started:
            time.sleep(0.02)
        url, headers = f"http://127.0.0.1:{port}", {"Authorization": f"Bearer {TOKEN}"}
        future_id = f"{(time.time() + 3600) * 1000:.0f}-0"

        def poll() -> float:
            started = time.monotonic()
            httpx.get(f"{url}/v1/events", params={"after": future_id, "wait_s": 5},
                      headers=headers, timeout=60)
            return time.monotonic() - started

        with ThreadPoolExecutor(args.polls) as pool:
            polls = [pool.submit(poll) for _ in range(args.polls)]
            time.sleep(1)
            started = time.monotonic()
            httpx.get(f"{url}/v1/health", timeout=60).raise_for_status()
            health_s = time.monotonic() - started
            started = time.monotonic()
            httpx.get(f"{url}/v1/jobs", headers=headers, timeout=60).raise_for_status()
            jobs_s = time.monotonic() - started
            took = sorted(p.result() for p in polls)
        print(f"{args.polls} long-polls (wait_s=5): /v1/health {health_s * 1000:.0f} ms, "
              f"/v1/jobs {jobs_s * 1000:.0f} ms; polls p50 {took[len(took) // 2]:.1f} s, "
              f"max {took[-1]:.1f} s")
        server.should_exit = True
    finally:
        redis_server.stop()


if __name__ == "__main__":
    main()
