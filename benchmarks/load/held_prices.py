"""What recording held prices costs a reconcile pass: the load benchmark's market (1,000 running
jobs on one offer, 100 offers whose prices move every second, polled every 2 s) driven in one
process on a private redis-server: the real offer poller, one agent heartbeat per job per
poll (written as the API writes them) and back-to-back reconcile passes, for ``--seconds``.

Prints pass count, p50 / mean / max pass time, the CPU time of the passes themselves (thread
CPU, so the poller, the heartbeats and other processes on the cores are left out), Redis's CPU
per second, and how many job writes the passes made (held-price records: each running job about
once per ``PRICE_CATCH_UP_S``).

Usage: ``python3 benchmarks/load/held_prices.py [--seconds 70]``; to compare with an older
commit, run the same file from a worktree of it (results in ``RESULTS.md``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import redis

from benchmarks.load.market import SteadyMarket, job_id
from benchmarks.load.run import OWNER, seed, start_redis
from core.models import utcnow
from core.models.agents import AgentPhase, AgentReport
from scheduler.controller.context import AgentBootstrap, Context, ProviderRegistry
from scheduler.controller.reconcile import reconcile_pass
from scheduler.poller.offers import OfferPoller
from scheduler.store import Store
from scheduler.store.agents import AgentTokens

JOBS, OFFERS, POLL_S = 1000, 100, 2.0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=70.0)
    args = parser.parse_args()
    proc, url = start_redis(Path(tempfile.mkdtemp()))
    try:
        seed(url, JOBS, OFFERS)
        client = redis.Redis.from_url(url, decode_responses=True)
        store = Store.over(client)
        market = SteadyMarket(JOBS, OFFERS, OWNER)
        ctx = Context(store=store, providers=ProviderRegistry([market]), owner=OWNER,
                      bootstrap=AgentBootstrap("http://127.0.0.1:9", "file:///nowhere",
                                               AgentTokens(b"s")))
        poller = OfferPoller(store, market)

        def heartbeats() -> None:
            now = utcnow()
            for n in range(JOBS):
                store.agents.save_report(AgentReport(job_id=job_id(n), attempt=1,
                                                     phase=AgentPhase.RUNNING, at=now,
                                                     received_at=now))

        def redis_cpu() -> float:
            info = client.info("cpu")
            return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])

        heartbeats()
        poller()
        times, cpu, writes = [], [], 0
        rcpu0 = redis_cpu()
        last_poll = time.monotonic()
        end = last_poll + args.seconds
        while time.monotonic() < end:
            if time.monotonic() - last_poll >= POLL_S:
                poller()
                heartbeats()
                last_poll = time.monotonic()
            t0, c0 = time.perf_counter(), time.thread_time()
            writes += reconcile_pass(ctx)
            times.append(time.perf_counter() - t0)
            cpu.append(time.thread_time() - c0)
        n = len(times)
        print(f"passes {n}, p50 {statistics.median(times) * 1000:.0f} ms, mean "
              f"{sum(times) / n * 1000:.0f} ms, max {max(times) * 1000:.0f} ms; CPU of the "
              f"passes: p50 {statistics.median(cpu) * 1000:.0f} ms, mean "
              f"{sum(cpu) / n * 1000:.0f} ms; Redis CPU per second "
              f"{(redis_cpu() - rcpu0) / args.seconds * 1000:.0f} ms; job writes {writes}")
    finally:
        proc.terminate()


if __name__ == "__main__":
    main()
