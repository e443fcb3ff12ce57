"""Where a reconcile pass's extra cost on a Redis Cluster goes: plain passes (reviews not due)
on one redis-server, on a 3-master cluster, and on the same cluster with redis-py told the keys
of an EVAL/EVALSHA from the command itself, in one process, alternating.

Why the third: redis-py's cluster pipeline (8.x) asks a node ``COMMAND GETKEYS`` for every
queued command it has no routing flag for, and EVALSHA is one; that is one synchronous round
trip per queued script call, before the pipeline is sent. The store pipelines a script call per
job (lease acquire/renew, ``scheduler.store.multi.run_script_many``) and several per job write
(the job outbox, ``scheduler.store.outbox``), so a pass pays one extra round trip per job and
per side write. ``RedisCluster.determine_slot`` already reads an EVALSHA's keys from its
``numkeys`` argument; the third variant does the same for the pipeline's lookup (a patch of
this process's redis-py only, to measure what the lookup costs; the product is not changed).

Same market, seeding and heartbeats as ``pass_curve.py``. Prints one line per run: pass p50
wall time and the pass thread's CPU time, and how many COMMAND GETKEYS lookups a pass made.

Usage: ``python3 benchmarks/load/cluster_keys.py [--jobs 1000] [--passes 8] [--rounds 2]``.
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

from redis._parsers.commands import CommandsParser
from redis.cluster import RedisCluster

from benchmarks.load.market import SteadyMarket, job_id
from benchmarks.load.run import OWNER, seed, start_backend
from core.models import utcnow
from core.models.agents import AgentPhase, AgentReport
from scheduler.controller.context import AgentBootstrap, Context, ProviderRegistry
from scheduler.controller.reconcile import reconcile_pass
from scheduler.poller.offers import OfferPoller
from scheduler.store import Store
from scheduler.store.agents import AgentTokens
from scheduler.store.connection import connect

_server_lookup = RedisCluster._get_command_keys
_moveable = CommandsParser._get_moveable_keys
lookups = [0]


def _local_script_keys(self, *args):
    """An EVAL/EVALSHA's keys from its own arguments (``name, script, numkeys, keys...``)."""
    if str(args[0]).upper() in ("EVAL", "EVALSHA"):
        return list(args[3:3 + int(args[2])])
    return _server_lookup(self, *args)


def _counted(self, *args):
    lookups[0] += 1
    return _moveable(self, *args)


def measure(backend_name: str, local_keys: bool, jobs: int, passes: int,
            workdir: Path) -> tuple[float, float, float]:
    """``(pass p50 ms, pass thread CPU p50 ms, GETKEYS lookups per pass)`` of ``passes`` plain
    passes over ``jobs`` running jobs on a fresh ``backend_name`` (``single``/``cluster``)."""
    RedisCluster._get_command_keys = _local_script_keys if local_keys else _server_lookup
    backend = start_backend(backend_name, workdir)
    try:
        seed(backend.url, jobs, 100)
        store = Store.over(connect(backend.url))
        market = SteadyMarket(jobs, 100, OWNER)
        ctx = Context(store=store, providers=ProviderRegistry([market]), owner=OWNER,
                      bootstrap=AgentBootstrap("http://127.0.0.1:9", "file:///nowhere",
                                               AgentTokens(b"s")))
        poller = OfferPoller(store, market)

        def poll() -> None:
            poller()
            now = utcnow()
            for n in range(jobs):
                store.agents.save_report(AgentReport(job_id=job_id(n), attempt=1,
                                                     phase=AgentPhase.RUNNING, at=now,
                                                     received_at=now))

        poll()
        reconcile_pass(ctx)  # the first pass: every review due, leases taken
        wall, cpu, last = [], [], time.monotonic()
        lookups[0] = 0
        while len(wall) < passes:
            if time.monotonic() - last >= 2.0:
                poll()
                last = time.monotonic()
            t0, c0 = time.perf_counter(), time.thread_time()
            reconcile_pass(ctx)
            wall.append(time.perf_counter() - t0)
            cpu.append(time.thread_time() - c0)
        return (statistics.median(wall) * 1000, statistics.median(cpu) * 1000,
                lookups[0] / passes)
    finally:
        backend.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--passes", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    CommandsParser._get_moveable_keys = _counted
    workdir = Path(tempfile.mkdtemp(prefix="ga-cluster-keys-"))
    print("| variant | round | pass p50 ms | pass CPU p50 ms | COMMAND GETKEYS per pass |")
    print("|---|---:|---:|---:|---:|")
    for round_ in range(1, args.rounds + 1):
        for name, local_keys in (("single", False), ("cluster", False), ("cluster", True)):
            wall, cpu, per_pass = measure(name, local_keys, args.jobs, args.passes,
                                          workdir / f"{round_}-{name}-{local_keys}")
            variant = f"{name}, script keys read locally" if local_keys else name
            print(f"| {variant} | {round_} | {wall:.0f} | {cpu:.0f} | {per_pass:.0f} |",
                  flush=True)


if __name__ == "__main__":
    main()
