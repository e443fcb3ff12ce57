"""One full poll of N AWS regions by the adapter, against a local endpoint.

A "poll" is what the daemon's OfferPoller does each minute: ``list_offers()`` then
``poll_prices(since)``. Measured per N (1, 8, 30 regions by default):

- **cold**: a new adapter (empty caches: instance types, offerings, list prices, the Spot
  Advisor file) and ``poll_prices(None)`` (24 h of history) — a daemon's first poll;
- **warm**: the next poll (caches fresh, ``since`` = the previous poll) — the steady state;
- HTTP requests the adapter sent (botocore's ``before-send``, retries included), wall time,
  the benchmark process's CPU time (the adapter's own work; the endpoint runs in another
  process), and the peak Python heap of a cold poll (``tracemalloc``, a separate run).

The endpoint is ``tests/contract/providers/aws/fake_aws.py`` serving ``dataset.py`` (moto's
copies of AWS's instance-type and offering data) from a child process, with ``--latency-ms``
added to every answer to imitate AWS round trips.

    python -m benchmarks.aws.bench_poll [--regions 1 8 30] [--latency-ms 0 50]
        [--instance-types 'g*' 'p*' 'dl*']
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import resource
import tempfile
import time
import tracemalloc
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.aws.dataset import moto_regions

ADVISOR = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "spot_advisor" / \
    "spot-advisor-data.json"


def _serve(regions: list[str], latency_s: float, conn: Any) -> None:
    from benchmarks.aws.dataset import build
    from tests.contract.providers.aws.fake_aws import FakeAws

    fake = FakeAws(latency_s=latency_s, **build(regions, datetime.now(UTC)))
    conn.send(fake.url)
    conn.recv()  # until told to stop
    conn.send(dict((f"{r} {a}", n) for (r, a), n in fake.requests.items()))
    fake.stop()


def _provider(url: str, regions: list[str], cache_dir: Path,
              patterns: list[str] | None = None) -> Any:
    from providers.aws import AwsProvider, AwsSettings

    advisor = os.environ.get("GA_SPOT_ADVISOR_URL") or (
        ADVISOR.as_uri() if ADVISOR.is_file() else "file:///nonexistent")
    settings = AwsSettings(regions=regions, endpoint_url=url, pricing_endpoint_url=url,
                           spot_advisor_url=advisor, instance_types=patterns or [])
    return AwsProvider(settings, cache_dir)


def _poll(provider: Any, since: datetime | None) -> dict[str, Any]:
    provider.client.requests.reset()
    wall, cpu = time.perf_counter(), time.process_time()
    offers = provider.list_offers()
    observations = provider.poll_prices(since)
    return {"wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu,
            "requests": provider.client.requests.total(),
            "by_operation": provider.client.requests.snapshot(),
            "offers": len(offers), "observations": len(observations)}


def run(n: int, latency_ms: float, patterns: list[str] | None = None) -> dict[str, Any]:
    regions = moto_regions()[:n]
    parent, child = mp.Pipe()
    server = mp.Process(target=_serve, args=(regions, latency_ms / 1000, child), daemon=True)
    server.start()
    url = parent.recv()
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
    os.environ["AWS_EC2_METADATA_DISABLED"] = "true"
    try:
        with tempfile.TemporaryDirectory() as tmp:
            provider = _provider(url, regions, Path(tmp) / "a", patterns)
            started = datetime.now(UTC)
            cold = _poll(provider, None)
            warm = _poll(provider, started)
            provider.close()
            mem = _provider(url, regions, Path(tmp) / "b", patterns)
            tracemalloc.start()
            _poll(mem, None)
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            mem.close()
    finally:
        parent.send("stop")
        served = parent.recv()
        server.join(10)
    return {"regions": n, "latency_ms": latency_ms, "cold": cold, "warm": warm,
            "cold_peak_heap_mib": peak / 2**20, "served_requests": sum(served.values())}


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import boto3
    return (f"{cpu}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}, boto3 {boto3.__version__}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--regions", type=int, nargs="+", default=[1, 8, 30])
    parser.add_argument("--latency-ms", type=float, nargs="+", default=[0, 50])
    parser.add_argument("--instance-types", nargs="*", default=None,
                        help="instance_types patterns (default: every GPU type), e.g. 'g*' 'p*'")
    parser.add_argument("--json", action="store_true", help="print JSON lines only")
    args = parser.parse_args()
    if not args.json:
        print(f"machine: {machine()}")
        print("| regions | latency | poll | requests | wall s | CPU s | offers | observations |"
              " peak heap MiB (cold) |")
        print("|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    for latency in args.latency_ms:
        for n in args.regions:
            result = run(n, latency, args.instance_types)
            if args.json:
                print(json.dumps(result))
                continue
            for kind in ("cold", "warm"):
                r = result[kind]
                peak = f"{result['cold_peak_heap_mib']:.1f}" if kind == "cold" else ""
                print(f"| {n} | {latency:.0f} ms | {kind} | {r['requests']} | {r['wall_s']:.2f} |"
                      f" {r['cpu_s']:.2f} | {r['offers']} | {r['observations']} | {peak} |",
                      flush=True)
    if not args.json:
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"\nbenchmark process max RSS: {rss:.0f} MiB")


if __name__ == "__main__":
    main()
