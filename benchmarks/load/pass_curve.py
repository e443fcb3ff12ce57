"""What one reconcile pass costs per running job: 1,000, 2,000 and 5,000 running jobs (one
replica, one private redis-server), the load benchmark's market (100 offers whose prices move
every second, polled every 2 s; every job on the same offer), passes driven back to back in
one process with the real offer poller and one agent heartbeat per job per poll (written as
the API writes them).

Two kinds of pass are timed per size: plain passes (observe, held prices, budget; the reviews
not due), and review passes, where every job's price-move review is due (what the daemon's
pass does every ``MOVE_REVIEW_MIN_S`` for all jobs reviewed together, and at its first
pass): the review gate is emptied just before each. Wall time and the pass thread's CPU time.

Usage: ``python3 benchmarks/load/pass_curve.py [--jobs 1000 2000 5000] [--passes 8]
[--reviews 3] [--code DIR]``; ``--code`` runs the controller of another checkout (a
``git worktree`` of an older commit) for a side-by-side. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, nargs="+", default=[1000, 2000, 5000])
    parser.add_argument("--passes", type=int, default=8)
    parser.add_argument("--reviews", type=int, default=3)
    parser.add_argument("--code", type=Path, default=Path(__file__).resolve().parents[2])
    args = parser.parse_args()
    sys.path.insert(0, str(args.code.resolve()))

    import redis

    from benchmarks.load.market import SteadyMarket, job_id
    from benchmarks.load.run import OWNER, seed, start_redis
    from core.models import utcnow
    from core.models.agents import AgentPhase, AgentReport
    from scheduler.controller.context import AgentBootstrap, Context, ProviderRegistry
    from scheduler.controller.reconcile import reconcile_pass
    from scheduler.controller.throttle import Throttle
    from scheduler.poller.offers import OfferPoller
    from scheduler.store import Store
    from scheduler.store.agents import AgentTokens

    proc, url = start_redis(Path(tempfile.mkdtemp()))
    rows = []
    try:
        client = redis.Redis.from_url(url, decode_responses=True)
        for jobs in args.jobs:
            client.flushall()
            seed(url, jobs, 100)
            store = Store.over(client)
            market = SteadyMarket(jobs, 100, OWNER)
            ctx = Context(store=store, providers=ProviderRegistry([market]), owner=OWNER,
                          bootstrap=AgentBootstrap("http://127.0.0.1:9", "file:///nowhere",
                                                   AgentTokens(b"s")))
            poller = OfferPoller(store, market)

            def poll(jobs=jobs, store=store, poller=poller) -> None:
                poller()
                now = utcnow()
                for n in range(jobs):
                    store.agents.save_report(AgentReport(
                        job_id=job_id(n), attempt=1, phase=AgentPhase.RUNNING, at=now,
                        received_at=now))

            def timed(ctx=ctx) -> tuple[float, float]:
                t0, c0 = time.perf_counter(), time.thread_time()
                reconcile_pass(ctx)
                return time.perf_counter() - t0, time.thread_time() - c0

            poll()
            timed()  # the first pass: every review due, the catch-up gates learn their keys
            plain, review, last = [], [], time.monotonic()
            while len(plain) < args.passes:
                if time.monotonic() - last >= 2.0:
                    poll()
                    last = time.monotonic()
                plain.append(timed())
            for _ in range(args.reviews):
                poll()
                ctx.state.reviews = Throttle()
                review.append(timed())
            rows.append((jobs, plain, review))
    finally:
        proc.terminate()
    print("| running jobs | plain pass p50 ms | CPU ms | per job ms | review pass p50 ms "
          "| CPU ms | per job ms |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for jobs, plain, review in rows:
        p, pc = (statistics.median(x) * 1000 for x in zip(*plain))
        r, rc = (statistics.median(x) * 1000 for x in zip(*review))
        print(f"| {jobs} | {p:.0f} | {pc:.0f} | {p / jobs:.3f} | {r:.0f} | {rc:.0f} "
              f"| {r / jobs:.3f} |")


if __name__ == "__main__":
    main()
