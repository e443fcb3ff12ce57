"""One daemon replica for the load benchmark: the real :class:`scheduler.daemon.Daemon` (API,
pollers, reconcile loop, orphan sweep) on the ``bench`` market, with every reconcile pass timed
into ``--passes`` (one ``start_epoch_s duration_s changed cpu_s`` line per pass; ``cpu_s``: the
pass thread's CPU time).

Run by ``benchmarks/load/run.py``; not meant to be started by hand.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.load import market
from scheduler import daemon as daemon_module


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--jobs", type=int, required=True)
    parser.add_argument("--offers", type=int, required=True)
    parser.add_argument("--owner", required=True)
    parser.add_argument("--passes", type=Path, required=True)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)

    out = args.passes.open("a", buffering=1)
    timed = daemon_module.reconcile_pass

    def reconcile_pass(ctx):
        start = time.time()
        t0, c0 = time.perf_counter(), time.thread_time()
        changed = timed(ctx)
        # The pass runs on one scheduler thread: its thread CPU is the pass's own, apart from
        # the API, the pollers and the other processes on the cores.
        out.write(f"{start:.3f} {time.perf_counter() - t0:.6f} {changed} "
                  f"{time.thread_time() - c0:.6f}\n")
        return changed

    daemon_module.reconcile_pass = reconcile_pass
    settings = daemon_module.DaemonSettings(
        home=args.home, redis_url=args.redis_url, port=args.port, owner=args.owner,
        providers=[{"kind": market.NAME, "jobs": args.jobs, "offers": args.offers,
                    "owner": args.owner}],
    )
    daemon_module.Daemon(settings).run()


if __name__ == "__main__":
    main()
