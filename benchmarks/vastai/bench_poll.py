"""Vast.ai adapter: one offer and price poll of a marketplace of N asks, through the real
``vastai`` SDK against the local fake of Vast's API (served by a child process, so the
adapter's time and memory are measured alone).

A poll is what the daemon's poller does each cycle: ``list_offers()`` (one ``bid`` and one
``on-demand`` search, each returning the N rows; ``max_offers`` 20,000) then ``poll_prices``
(which reuses that search). Reported: the median wall and CPU time of ``--runs`` polls,
offers and observations made, requests sent, and the ``tracemalloc`` peak of a separate poll.

Usage: ``python -m benchmarks.vastai.bench_poll [--asks 1000 5000 10000] [--runs 5]``
(``GA_DATA_DIR`` names the shared data folder with the observed search row).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import statistics
import time
import tracemalloc
from typing import Any

KEY = "bench-key-0000000000000000"


def _serve(n: int, conn: Any) -> None:
    from tests.contract.providers.vastai.data import catalogue
    from tests.contract.providers.vastai.fake_vast import FakeVast

    fake = FakeVast(catalogue(n), api_key=KEY)
    conn.send(fake.url)
    conn.recv()  # until told to stop
    fake.stop()


def _provider(url: str, n: int) -> Any:
    from providers.vastai import VastProvider, VastSettings

    return VastProvider(VastSettings(server_url=url, max_offers=20_000, min_reliability=0.0,
                                     launch={"image": "pytorch/pytorch", "disk_gib": 40}))


def _poll(provider: Any) -> dict[str, Any]:
    provider.client.requests.reset()
    wall, cpu = time.perf_counter(), time.process_time()
    offers = provider.list_offers()
    observations = provider.poll_prices(None)
    return {"wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu,
            "offers": len(offers), "observations": len(observations),
            "requests": provider.client.requests.total()}


def run(n: int, runs: int) -> dict[str, Any]:
    parent, child = mp.Pipe()
    server = mp.Process(target=_serve, args=(n, child), daemon=True)
    server.start()
    url = parent.recv()
    os.environ["VAST_API_KEY"] = KEY
    try:
        provider = _provider(url, n)
        _poll(provider)  # warm the imports and the fake's first answers
        polls = [_poll(provider) for _ in range(runs)]
        fresh = _provider(url, n)
        tracemalloc.start()
        _poll(fresh)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    finally:
        parent.send("stop")
        server.join(10)
    return {"asks": n, "runs": runs,
            "median_wall_s": statistics.median(p["wall_s"] for p in polls),
            "median_cpu_s": statistics.median(p["cpu_s"] for p in polls),
            "offers": polls[-1]["offers"], "observations": polls[-1]["observations"],
            "requests": polls[-1]["requests"], "peak_heap_mib": peak / 2**20}


def machine() -> str:
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as info:
            cpu = next((ln.split(":", 1)[1].strip() for ln in info
                        if ln.startswith("model name")), cpu)
    except OSError:
        pass
    from importlib.metadata import version
    return (f"{cpu}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}, vastai {version('vastai')}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--asks", type=int, nargs="+", default=[1000, 5000, 10000])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    print(f"machine: {machine()}")
    print(f"load average before: {os.getloadavg()}")
    print("| asks | offers | observations | requests | median poll s | median CPU s | "
          "peak heap MiB |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    results = []
    for n in args.asks:
        r = run(n, args.runs)
        results.append(r)
        print(f"| {n:,} | {r['offers']:,} | {r['observations']:,} | {r['requests']} | "
              f"{r['median_wall_s']:.2f} | {r['median_cpu_s']:.2f} | {r['peak_heap_mib']:.1f} |",
              flush=True)
    print(f"load average after: {os.getloadavg()}")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
