"""Long-polls vs. the rest of the API: ``--polls`` concurrent ``GET /v1/events?after=<a future
id>&wait_s=5`` against a real uvicorn server (own ``redis-server`` on a free port), then the
latency of ``/v1/health`` and ``/v1/jobs`` while they all wait, and how long the polls took.

Command: ``python -m benchmarks.observability.bench_longpoll [--polls 200]``."""

from __future__ import annotations

import argparse
import socket
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import redis
import uvicorn

from scheduler.api.app import create_app
from scheduler.checkpoints.local import LocalObjectStore
from scheduler.store import Store
from scheduler.store.agents import AgentTokens

TOKEN = "bench"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--polls", type=int, default=200)
    args = parser.parse_args()
    rport, port = _free_port(), _free_port()
    redis_proc = subprocess.Popen(["redis-server", "--port", str(rport), "--save", "",
                                   "--appendonly", "no"], stdout=subprocess.DEVNULL)
    try:
        client = redis.Redis(port=rport, decode_responses=True)
        for _ in range(100):
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
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
        redis_proc.terminate()
        redis_proc.wait(10)


if __name__ == "__main__":
    main()
