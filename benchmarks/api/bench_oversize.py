"""Oversized and malformed submissions against a real daemon API: a uvicorn server in its own
process (so its memory is measured alone) over its own ``redis-server`` on a free port.

Sends ``--count`` job specs with a ``--command-mib`` MiB ``command``, one spec of 100,000
tiny ``env`` values (1.3 MB) and one truncated gzip bundle, then reports each answer's status
and time, the server's RSS before, after and at its peak, and Redis ``used_memory`` (what
the stored jobs hold).

Command: ``python -m benchmarks.api.bench_oversize [--count 6] [--command-mib 60]``."""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import redis

from tests.fixtures.redis_server import free_port, start_redis

TOKEN = "bench"


def _rss_mb(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("VmRSS:")[1].split()[0]) // 1024


def serve(redis_url: str, port: int, folder: Path) -> None:
    """The server process: the real app; SIGUSR1 prints its peak RSS and exits."""
    import uvicorn

    from scheduler.api.app import create_app
    from scheduler.checkpoints.local import LocalObjectStore
    from scheduler.store import Store
    from scheduler.store.agents import AgentTokens

    app = create_app(Store.over(redis.Redis.from_url(redis_url)),
                     LocalObjectStore(folder / "objects"), AgentTokens(b"bench"), TOKEN)

    def report(*_: object) -> None:
        print(f"peak {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}", flush=True)
        os._exit(0)

    signal.signal(signal.SIGUSR1, report)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="error")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=6)
    parser.add_argument("--command-mib", type=int, default=60)
    parser.add_argument("--serve", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve[0], int(args.serve[1]), Path(args.serve[2]))
        return
    folder = Path(tempfile.mkdtemp(prefix="ga-bench-oversize-"))
    port = free_port()
    redis_server = start_redis(folder / "redis")
    server = None
    try:
        client = redis_server.client()
        server = subprocess.Popen([sys.executable, "-m", "benchmarks.api.bench_oversize",
                                   "--serve", redis_server.url, str(port),
                                   str(folder)], stdout=subprocess.PIPE, text=True)
        base = f"http://127.0.0.1:{port}"
        for _ in range(200):
            try:
                httpx.get(f"{base}/v1/health")
                break
            except httpx.TransportError:
                time.sleep(0.1)
        headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
        start_rss = _rss_mb(server.pid)
        big = json.dumps({"spec": {"name": "big", "command": "x" * (args.command_mib * 2**20)}})
        tiny = json.dumps({"spec": {"name": "tiny", "command": "true",
                                    "env": {f"a{i}": "" for i in range(100_000)}}})
        truncated = json.dumps({"spec": {"name": "gz", "command": "true"},
                                "bundle_b64": "H4sIAAAAAAAA"})
        bodies = [(f"{args.command_mib} MiB command", big)] * args.count + [
            ("100,000 tiny env values", tiny), ("truncated gzip bundle", truncated)]
        for label, body in bodies:
            began = time.perf_counter()
            answer = httpx.post(f"{base}/v1/jobs", content=body.encode(), headers=headers,
                                timeout=300)
            print(f"- {label}: {answer.status_code} in {time.perf_counter() - began:.2f} s")
        print(f"- server RSS: {start_rss} MB at start, {_rss_mb(server.pid)} MB after")
        print(f"- Redis used_memory: {client.info('memory')['used_memory'] / 2**20:.1f} MiB")
        os.kill(server.pid, signal.SIGUSR1)
        peak = server.communicate(timeout=30)[0].split()[-1]
        print(f"- server peak RSS: {peak} MB")
    finally:
        if server is not None and server.poll() is None:
            server.kill()
        redis_server.stop()


if __name__ == "__main__":
    main()
