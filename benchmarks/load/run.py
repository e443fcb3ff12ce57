"""Steady-load benchmark of the daemon: 1,000 active jobs, 100 offers changing every second.

For one replica and then two (sharing one Redis), it starts real daemon processes
(``replica.py``: the real ``Daemon`` on the in-process ``bench`` market), seeds ``--jobs`` running
jobs, drives one agent heartbeat per job every 2 s (``agents.py``: every ``--api-every``-th job
through the API, the others written to Redis as the API writes them), and after a warm-up
measures for ``--seconds``:

- reconcile pass latency p50/p99/max per replica (every pass timed in the process),
- daemon CPU (% of one core, user+system, from /proc via psutil) and peak RSS per replica,
- agent report latency p50/p99 and errors,
- how the jobs split between replicas (per-job control leases held at the end),
- that the steady state held: every job still running, no launches.

Usage: ``python3 benchmarks/load/run.py [--jobs 1000] [--offers 100] [--seconds 60]
[--replicas 1 2] [--api-every 10] [--write]`` (``--write`` records ``benchmarks/load/RESULTS.md``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import psutil
import redis

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.load.market import SteadyMarket, instance_id, job_id
from scheduler.controller.transitions import client_token
from core.models import Job, JobSpec, JobState, Placement
from scheduler.store import Store, keys

OWNER = "ga-bench"
HERE = Path(__file__).resolve().parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis(workdir: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                             "--save", "", "--appendonly", "no", "--dir", str(workdir)],
                            stdout=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url)
    for _ in range(100):
        try:
            client.ping()
            return proc, url
        except redis.ConnectionError:
            time.sleep(0.05)
    raise RuntimeError("redis-server did not start")


def seed(url: str, jobs: int, offers: int) -> None:
    store = Store.over(redis.Redis.from_url(url, decode_responses=True))
    market = SteadyMarket(jobs, offers, OWNER)
    offer = market.list_offers()[0]
    now = datetime.now(UTC)
    spec = JobSpec(name="bench", command="python train.py")
    for n in range(jobs):
        jid = job_id(n)
        placement = Placement(attempt=1, offer=offer, client_token=client_token(jid, 1),
                              decided_at=now, instance_id=instance_id(n), started_at=now)
        store.jobs.create(Job(id=jid, spec=spec, state=JobState.RUNNING, created_at=now,
                              updated_at=now, attempt=1, placement=placement,
                              on_demand_reference_usd_per_hour=offer.on_demand_price_usd_per_hour))


def run_config(replicas: int, args, redis_url: str, workdir: Path) -> dict:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    client.flushall()
    seed(redis_url, args.jobs, args.offers)
    env = {**os.environ, "GA_AGENT_SECRET": secrets.token_hex(16),
           "GA_API_TOKEN": secrets.token_hex(16), "PYTHONPATH": str(ROOT)}
    procs, urls, pass_files = [], [], []
    for r in range(replicas):
        home = workdir / f"r{replicas}-{r}"
        home.mkdir()
        port = free_port()
        pass_files.append(home / "passes.txt")
        log = (home / "daemon.log").open("w")
        procs.append(subprocess.Popen(
            [sys.executable, str(HERE / "replica.py"), "--home", str(home), "--redis-url",
             redis_url, "--port", str(port), "--jobs", str(args.jobs), "--offers",
             str(args.offers), "--owner", OWNER, "--passes", str(home / "passes.txt")],
            env=env, stdout=log, stderr=subprocess.STDOUT))
        urls.append(f"http://127.0.0.1:{port}")
    for r, proc in enumerate(procs):
        deadline = time.monotonic() + 60
        while not (workdir / f"r{replicas}-{r}" / "daemon.json").exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"replica {r} did not start; see its daemon.log")
            time.sleep(0.2)
    try:
        agents = subprocess.Popen(
            [sys.executable, str(HERE / "agents.py"), "--jobs", str(args.jobs), "--seconds",
             str(args.warmup + args.seconds), "--secret", env["GA_AGENT_SECRET"],
             "--redis-url", redis_url, "--api-every", str(args.api_every),
             *[a for u in urls for a in ("--url", u)]],
            env=env, stdout=subprocess.PIPE, text=True)
        time.sleep(args.warmup)
        ps = [psutil.Process(p.pid) for p in procs]
        cpu0 = [p.cpu_times() for p in ps]
        t0 = time.time()
        peak_rss = [0] * replicas
        while time.time() - t0 < args.seconds:
            for i, p in enumerate(ps):
                peak_rss[i] = max(peak_rss[i], p.memory_info().rss)
            time.sleep(1)
        t1 = time.time()
        cpu1 = [p.cpu_times() for p in ps]
        lease_holders: dict[str, int] = {}
        for n in range(args.jobs):
            value = client.get(keys.job_lease(job_id(n)))  # "<holder>/<fence>"
            holder = value.rpartition("/")[0] if value else "(none)"
            lease_holders[holder] = lease_holders.get(holder, 0) + 1
        states: dict[str, int] = {}
        unsteady: list[str] = []  # why a job left the steady state, if any did
        for raw in client.mget([keys.job(job_id(n)) for n in range(args.jobs)]):
            job = json.loads(raw) if raw else {"state": "missing", "events": []}
            states[job["state"]] = states.get(job["state"], 0) + 1
            if job["events"] and len(unsteady) < 3:
                unsteady.append(job["events"][0]["message"])
        # Only now: the job states above are those of the measured window.
        agent_stats = json.loads(agents.communicate()[0].strip().splitlines()[-1])
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
    per_replica = []
    for i in range(replicas):
        rows = [line.split() for line in pass_files[i].read_text().splitlines()]
        durations = np.array([float(d) for s, d, _ in rows if t0 <= float(s) <= t1] or [np.nan])
        cpu = (cpu1[i].user + cpu1[i].system - cpu0[i].user - cpu0[i].system) / (t1 - t0)
        per_replica.append({
            "passes": int(np.isfinite(durations).sum()),
            "pass_p50_ms": float(np.nanpercentile(durations, 50) * 1000),
            "pass_p99_ms": float(np.nanpercentile(durations, 99) * 1000),
            "pass_max_ms": float(np.nanmax(durations) * 1000),
            "cpu_pct": 100 * cpu, "peak_rss_mib": peak_rss[i] / 2**20,
        })
    held = sorted((n for h, n in lease_holders.items() if h != "(none)"), reverse=True)
    return {"replicas": replicas, "per_replica": per_replica, "agents": agent_stats,
            "leases_held": held, "unleased": lease_holders.get("(none)", 0), "states": states,
            "unsteady": unsteady}


def render(results: list[dict], args, command: str) -> str:
    load = os.getloadavg()
    lines = [
        "# Steady load: 1,000 active jobs, 100 offers changing every second",
        "",
        "Tables generated by `benchmarks/load/run.py` (`--write`); notes below them by hand.",
        "",
        f"- command: `{command}`",
        (f"- machine: {os.cpu_count()} cores, {platform.processor() or platform.machine()}, "
        f"Python {platform.python_version()}; load average at the end {load[0]:.1f} / "
        f"{load[1]:.1f} / {load[2]:.1f}. Everything (Redis, replicas, the agents' load "
        "generator) shares these cores."),
        (f"- {args.jobs} jobs running, {args.offers} offers (prices change every second, polled "
        "every 2 s as a replayed market is), one agent heartbeat per job every 2 s "
        f"(every {args.api_every}th job's through the API, the others' written to Redis as the "
        f"API writes them); {args.warmup:.0f} s warm-up, then {args.seconds:.0f} s measured. Real daemon "
        "processes (API, pollers, reconcile loop, orphan sweep) on one private redis-server."),
        "",
        ("| replicas | replica | passes | pass p50 ms | pass p99 ms | pass max ms | CPU % of a core "
        "| peak RSS MiB |"),
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for res in results:
        for i, r in enumerate(res["per_replica"]):
            lines.append(f"| {res['replicas']} | {i + 1} | {r['passes']} | {r['pass_p50_ms']:.0f} "
                         f"| {r['pass_p99_ms']:.0f} | {r['pass_max_ms']:.0f} | {r['cpu_pct']:.0f} "
                         f"| {r['peak_rss_mib']:.0f} |")
    lines += ["", ("| replicas | API reports sent | errors | report p50 ms | report p99 ms "
              "| jobs per replica (leases held at the end) | job states at the end |"),
              "|---:|---:|---:|---:|---:|---|---|"]
    for res in results:
        a = res["agents"]
        states = ", ".join(f"{k} {v}" for k, v in sorted(res["states"].items()))
        unleased = f" (+{res['unleased']} unleased)" if res["unleased"] else ""
        lines.append(f"| {res['replicas']} | {a['sent']} | {a['errors']} | {a['p50_ms']:.0f} | "
                     f"{a['p99_ms']:.0f} | {' / '.join(map(str, res['leases_held']))}"
                     f"{unleased} "
                     f"| {states} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--offers", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--warmup", type=float, default=15)
    parser.add_argument("--replicas", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--api-every", type=int, default=10,
                        help="every N-th job's agent reports through the API, the others' "
                             "heartbeats are written to Redis directly (1: all through the API)")
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    command = "python3 benchmarks/load/run.py " + " ".join(sys.argv[1:])
    workdir = Path(tempfile.mkdtemp(prefix="ga-load-"))
    redis_proc, url = start_redis(workdir)
    try:
        results = [run_config(n, args, url, workdir) for n in args.replicas]
    finally:
        redis_proc.terminate()
        redis_proc.wait(10)
    text = render(results, args, command)
    print(text)
    print(json.dumps(results, indent=1), file=sys.stderr)
    if args.write:
        (HERE / "RESULTS.md").write_text(text)
    shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
