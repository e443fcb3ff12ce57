"""Steady-load benchmark of the daemon: 1,000 active jobs, 100 offers changing every second.

For each backend (``single``: one redis-server; ``cluster``: a real 3-master Redis Cluster of
redis-server processes, started as the tests start theirs, :mod:`tests.fixtures.redis_nodes`)
and for each replica count (sharing that Redis), it starts real daemon processes
(``replica.py``: the real ``Daemon`` on the in-process ``bench`` market), seeds ``--jobs`` running
jobs, drives one agent heartbeat per job every 2 s (``agents.py``: every ``--api-every``-th job
through the API, the others written to Redis as the API writes them), and after a warm-up
measures for ``--seconds``:

- reconcile pass latency p50/p99/max per replica (every pass timed in the process) and the
  pass thread's CPU time p50/p99,
- daemon CPU (% of one core, user+system, from /proc via psutil) and peak RSS per replica,
- agent report latency p50/p99 and errors,
- how the jobs split between replicas (per-job control leases held at the end),
- that the steady state held: every job still running, no launches,
- the Redis side: CPU of the redis-server processes (all nodes of a cluster together),
- errors: failed agent reports (by kind) and heartbeat writes, and ERROR/Traceback and
  WARNING lines in each replica's log (the first one shown).

Jobs are seeded through :class:`scheduler.store.Store` over the backend's URL, and the replicas
and the agents' load generator get that URL (``REDIS_URL``): on the cluster every store call
goes through the product's cluster client.

Usage: ``python3 benchmarks/load/run.py [--jobs 1000] [--offers 100] [--seconds 60]
[--replicas 1 2] [--backend single cluster] [--cluster-replicas 0] [--api-every 10]
[--out FILE]``. Prints Markdown tables (``--out``: also written to FILE; the notes in
``RESULTS.md`` are by hand) and the raw results as JSON on stderr.
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
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import psutil
import redis

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.load.market import SteadyMarket, instance_id, job_id
from core.models import Job, JobSpec, JobState, Placement
from scheduler.controller.transitions import client_token
from scheduler.replicas import home_replica_id
from scheduler.store import Store, keys
from scheduler.store.connection import connect
from scheduler.store.multi import mget
from tests.fixtures.redis_nodes import start_cluster

OWNER = "ga-bench"
HERE = Path(__file__).resolve().parent
# The tests' clusters fail a node after 1.5 s of silence, to fail over fast; here nothing is
# killed, and a redis-server starved of CPU on two loaded cores for 1.5 s must not be failed
# (the cluster would stop serving its slots mid-measurement). Redis's own default.
CLUSTER_NODE_TIMEOUT_MS = 15000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis(workdir: Path) -> tuple[subprocess.Popen, str]:
    workdir.mkdir(parents=True, exist_ok=True)
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


@dataclass
class Backend:
    """A running Redis setup: its ``REDIS_URL``, the ports of the redis-server processes that
    hold data (a cluster's masters and replicas), and how to empty and stop it."""

    name: str
    url: str
    ports: list[int]
    flush: Callable[[], None]
    stop: Callable[[], None]

    def cpu_s(self) -> float:
        """User + system CPU seconds of all its redis-server processes so far."""
        total = 0.0
        for port in self.ports:
            info = redis.Redis(port=port, decode_responses=True).info("cpu")
            total += float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
        return total


def start_backend(name: str, workdir: Path, cluster_replicas: int = 0) -> Backend:
    """``single``: one redis-server; ``cluster``: 3 masters (each with ``cluster_replicas``
    replicas) formed as the tests form theirs. Raises ``RuntimeError`` / ``AssertionError``
    when it does not come up."""
    if name == "single":
        proc, url = start_redis(workdir / "single")
        port = int(url.rsplit(":", 1)[1].split("/")[0])

        def stop() -> None:
            proc.terminate()
            proc.wait(10)

        return Backend(name, url, [port], redis.Redis(port=port).flushall, stop)
    servers = start_cluster(workdir / "cluster", masters=3, replicas_per_master=cluster_replicas,
                            node_timeout_ms=CLUSTER_NODE_TIMEOUT_MS)
    return Backend(name, servers.url, [n.port for n in servers.nodes], servers.flushall,
                   servers.stop)


def seed(url: str, jobs: int, offers: int) -> None:
    """``jobs`` running jobs on the market's first offer, written through the product's
    :class:`Store` over ``url`` (any form :func:`connect` takes)."""
    store = Store.over(connect(url))
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


def log_errors(log: Path) -> tuple[int, int, str]:
    """``(errors, warnings, first)``: the ERROR and Traceback lines of a replica's log, its
    WARNING lines, and the first of either."""
    lines = log.read_text(errors="replace").splitlines()
    bad = [line.strip() for line in lines if "ERROR" in line or line.startswith("Traceback")]
    warned = [line.strip() for line in lines if "WARNING" in line]
    first = (bad or warned or [""])[0]
    return len(bad), len(warned), first[:200]


def run_config(backend: Backend, replicas: int, args, workdir: Path) -> dict:
    """One measurement: ``replicas`` daemon processes on ``backend`` (flushed and seeded
    first). Returns the raw numbers :func:`render` tabulates."""
    loadavg_before = Path("/proc/loadavg").read_text().split()[:3]
    client = connect(backend.url)
    backend.flush()
    seed(backend.url, args.jobs, args.offers)
    env = {**os.environ, "GA_AGENT_SECRET": secrets.token_hex(16),
           "GA_API_TOKEN": secrets.token_hex(16), "PYTHONPATH": str(ROOT),
           "REDIS_URL": backend.url}
    procs, urls, pass_files, homes = [], [], [], []
    for r in range(replicas):
        home = workdir / f"{backend.name}-r{replicas}-{r}"
        home.mkdir()
        homes.append(home)
        port = free_port()
        pass_files.append(home / "passes.txt")
        log = (home / "daemon.log").open("w")
        procs.append(subprocess.Popen(
            [sys.executable, str(HERE / "replica.py"), "--home", str(home), "--redis-url",
             backend.url, "--port", str(port), "--jobs", str(args.jobs), "--offers",
             str(args.offers), "--owner", OWNER, "--passes", str(home / "passes.txt")],
            env=env, stdout=log, stderr=subprocess.STDOUT))
        urls.append(f"http://127.0.0.1:{port}")
    try:
        for r, proc in enumerate(procs):
            deadline = time.monotonic() + 120
            while not (homes[r] / "daemon.json").exists():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"replica {r} did not start; see {homes[r]}/daemon.log")
                time.sleep(0.2)
        holders = [home_replica_id(home) for home in homes]  # what their leases name
        agents = subprocess.Popen(
            [sys.executable, str(HERE / "agents.py"), "--jobs", str(args.jobs), "--seconds",
             str(args.warmup + args.seconds), "--secret", env["GA_AGENT_SECRET"],
             "--redis-url", backend.url, "--api-every", str(args.api_every),
             *[a for u in urls for a in ("--url", u)]],
            env=env, stdout=subprocess.PIPE, text=True)
        time.sleep(args.warmup)
        ps = [psutil.Process(p.pid) for p in procs]
        agents_ps = psutil.Process(agents.pid)
        cpu0 = [p.cpu_times() for p in ps]
        agents_cpu0 = agents_ps.cpu_times()
        redis_cpu0 = backend.cpu_s()
        t0 = time.time()
        peak_rss = [0] * replicas
        while time.time() - t0 < args.seconds:
            for i, p in enumerate(ps):
                peak_rss[i] = max(peak_rss[i], p.memory_info().rss)
            time.sleep(1)
        t1 = time.time()
        cpu1 = [p.cpu_times() for p in ps]
        agents_cpu1 = agents_ps.cpu_times()
        redis_cpu = (backend.cpu_s() - redis_cpu0) / (t1 - t0)
        lease_holders: dict[str, int] = {}
        ids = [job_id(n) for n in range(args.jobs)]
        for value in mget(client, [keys.job_lease(j) for j in ids]):
            # "<replica>:<pid>:<random>/<fence>": counted by replica identity
            holder = value.rpartition("/")[0].partition(":")[0] if value else "(none)"
            lease_holders[holder] = lease_holders.get(holder, 0) + 1
        states: dict[str, int] = {}
        unsteady: list[str] = []  # why a job left the steady state, if any did
        for raw in mget(client, [keys.job(j) for j in ids]):
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
        client.close()
    per_replica = []
    for i in range(replicas):
        rows = [line.split() for line in pass_files[i].read_text().splitlines()]
        window = [row for row in rows if t0 <= float(row[0]) <= t1]
        durations = np.array([float(row[1]) for row in window] or [np.nan])
        pass_cpu = np.array([float(row[3]) for row in window] or [np.nan])
        cpu = (cpu1[i].user + cpu1[i].system - cpu0[i].user - cpu0[i].system) / (t1 - t0)
        errors, warnings, first_error = log_errors(homes[i] / "daemon.log")
        per_replica.append({
            "passes": int(np.isfinite(durations).sum()),
            "pass_p50_ms": float(np.nanpercentile(durations, 50) * 1000),
            "pass_p99_ms": float(np.nanpercentile(durations, 99) * 1000),
            "pass_max_ms": float(np.nanmax(durations) * 1000),
            "pass_cpu_p50_ms": float(np.nanpercentile(pass_cpu, 50) * 1000),
            "pass_cpu_p99_ms": float(np.nanpercentile(pass_cpu, 99) * 1000),
            "cpu_pct": 100 * cpu, "peak_rss_mib": peak_rss[i] / 2**20,
            "jobs_leased": lease_holders.get(holders[i], 0),
            "log_errors": errors, "log_warnings": warnings, "first_error": first_error,
        })
    agents_cpu = (agents_cpu1.user + agents_cpu1.system - agents_cpu0.user
                  - agents_cpu0.system) / (t1 - t0)
    return {"backend": backend.name, "replicas": replicas, "per_replica": per_replica,
            "agents": agent_stats, "agents_cpu_pct": 100 * agents_cpu,
            "redis_cpu_pct": 100 * redis_cpu,
            "leased_by_others": sum(n for h, n in lease_holders.items()
                                    if h not in holders and h != "(none)"),
            "unleased": lease_holders.get("(none)", 0), "states": states,
            "unsteady": unsteady, "loadavg_before": " / ".join(loadavg_before),
            "loadavg_after": " / ".join(Path("/proc/loadavg").read_text().split()[:3])}


def render(results: list[dict], args, command: str, commit: str) -> str:
    """Markdown: the setup, then one table of passes per replica and one of the rest (rows by
    backend, then replica count; measured in the order of ``results``)."""
    results = sorted(results, key=lambda r: (args.backend.index(r["backend"]), r["replicas"]))
    lines = [
        f"- command: `{command}` at commit {commit}",
        (f"- machine: {os.cpu_count()} cores, {platform.processor() or platform.machine()}, "
         f"Python {platform.python_version()}. Everything (Redis, replicas, the agents' load "
         "generator) shares these cores."),
        (f"- {args.jobs} jobs running, {args.offers} offers (prices change every second, polled "
         "every 2 s as a replayed market is), one agent heartbeat per job every 2 s "
         f"(every {args.api_every}th job's through the API, the others' written to Redis as the "
         f"API writes them); {args.warmup:.0f} s warm-up, then {args.seconds:.0f} s measured. "
         "Real daemon processes (API, pollers, reconcile loop, orphan sweep); `single` = one "
         "redis-server, `cluster` = 3 masters"
         + (f" with {args.cluster_replicas} replica(s) each" if args.cluster_replicas else
            ", no replicas") + ", every store call through the product's cluster client. "
         "Measured alternately (for each replica count, each backend in turn), every backend "
         "up for the whole run."),
        "",
        ("| backend | replicas | replica | jobs leased | passes | pass p50 ms | pass p99 ms "
         "| pass max ms | pass CPU p50 / p99 ms | daemon CPU % of a core | peak RSS MiB "
         "| log errors / warnings |"),
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for res in results:
        for i, r in enumerate(res["per_replica"]):
            lines.append(
                f"| {res['backend']} | {res['replicas']} | {i + 1} | {r['jobs_leased']} "
                f"| {r['passes']} | {r['pass_p50_ms']:.0f} | {r['pass_p99_ms']:.0f} "
                f"| {r['pass_max_ms']:.0f} | {r['pass_cpu_p50_ms']:.0f} / "
                f"{r['pass_cpu_p99_ms']:.0f} | {r['cpu_pct']:.0f} | {r['peak_rss_mib']:.0f} "
                f"| {r['log_errors']} / {r['log_warnings']} |")
    lines += ["", ("| backend | replicas | Redis CPU % | agents CPU % | API reports | errors "
                   "| report p50 ms | report p99 ms | heartbeat write errors | jobs no replica held "
                   "| job states at the end | /proc/loadavg before → after |"),
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    for res in results:
        a = res["agents"]
        states = ", ".join(f"{k} {v}" for k, v in sorted(res["states"].items()))
        lines.append(
            f"| {res['backend']} | {res['replicas']} | {res['redis_cpu_pct']:.0f} "
            f"| {res['agents_cpu_pct']:.0f} | {a['sent']} | {a['errors']} | {a['p50_ms']:.0f} "
            f"| {a['p99_ms']:.0f} | {a.get('write_errors', 0)} "
            f"| {res['unleased'] + res['leased_by_others']} | {states} "
            f"| {res['loadavg_before']} → {res['loadavg_after']} |")
    firsts = [(res["backend"], res["replicas"], i + 1, r["first_error"])
              for res in results for i, r in enumerate(res["per_replica"]) if r["first_error"]]
    if firsts:
        lines += ["", "First error (else warning) line of each replica log that had one:", ""]
        lines += [f"- {b} × {n}, replica {i}: `{e}`" for b, n, i, e in firsts]
    kinds = [(res["backend"], res["replicas"], res["agents"].get("error_kinds", {}))
             for res in results if res["agents"].get("error_kinds")]
    if kinds:
        lines += ["", "Failed API reports by kind:", ""]
        lines += [f"- {b} × {n}: " + "; ".join(f"{v} × `{k}`" for k, v in sorted(k.items()))
                  for b, n, k in kinds]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--offers", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--warmup", type=float, default=15)
    parser.add_argument("--replicas", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--backend", nargs="+", choices=["single", "cluster"],
                        default=["single"],
                        help="single: one redis-server; cluster: a 3-master Redis Cluster")
    parser.add_argument("--cluster-replicas", type=int, default=0,
                        help="replicas per cluster master (they add replication work to the "
                             "same cores)")
    parser.add_argument("--api-every", type=int, default=10,
                        help="every N-th job's agent reports through the API, the others' "
                             "heartbeats are written to Redis directly (1: all through the API)")
    parser.add_argument("--out", type=Path, help="also write the Markdown tables here")
    args = parser.parse_args()
    command = "python3 benchmarks/load/run.py " + " ".join(sys.argv[1:])
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip() or "(unknown)"
    workdir = Path(tempfile.mkdtemp(prefix="ga-load-"))
    results, backends = [], []
    try:
        for name in args.backend:
            backends.append(start_backend(name, workdir, args.cluster_replicas))
        # Every backend is up for the whole run (an idle one costs next to no CPU), and the
        # measurements alternate between them: a change of the machine's load during the run
        # then falls on both sides of a comparison rather than on one backend's rows.
        for n in args.replicas:
            for backend in backends:
                results.append(run_config(backend, n, args, workdir))
                print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    finally:
        for backend in backends:
            backend.stop()
        text = render(results, args, command, commit) if results else ""
        print(text)
        if args.out and text:
            args.out.write_text(text)
    shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
