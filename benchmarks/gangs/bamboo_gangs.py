"""Benchmark: gangs of N = 1, 2, 4, 8 nodes on Bamboo's AWS instance-count traces.

Data: ``$GA_DATA_DIR/traces/bamboo_aws_2020-11/*_scaled.csv`` and the p2.xlarge 3-day group
(``time_hours,running_spot_instances`` step traces, Nov 2020; the other files are the same
traces in seconds). A replayed market of one spot offer, whose availability trace is the CSV
itself (resampled onto 60 s ticks: the count in force at each minute), and one on-demand offer
of the same type in the same zone serves each trace. A gang of N nodes runs on spot only while ``k >= N`` and is preempted when the
count drops below N (:mod:`scheduler.simulator.simulate`); on-demand always has room.

Prices (constant, us-east-1 list prices of Nov 2020): g4dn.xlarge on-demand $0.526/h, spot
$0.158/h; p2.xlarge on-demand $0.90/h, spot $0.27/h. Costs are N × price × hours, normalised
to the all-on-demand cost of the same gang (so N cancels out of the on-demand column).

Job: 6 h of compute, deadline 9 h (1.5×), restart overhead 0.2 h, checkpoints every 0.5 h of
work, 60 s for a final checkpoint (AWS gives 120 s of notice: a warned reclaim loses only the
restart). The traces are 12.7 h to 88.7 h long, so 12 h of compute would loop the short ones
more than once; 6 h fits. Starts: every 30 min over one loop of each trace (a run that
passes the trace's end sees it loop, as the replayed market does). Tick 300 s.

Policies: ``arbiter`` (the daemon's :func:`policies.decisions.decide`), ``greedy`` and
``on-demand``. The omniscient optimum is not computed (its DP knows one node).

Run: ``python3 benchmarks/gangs/bamboo_gangs.py``; writes ``benchmarks/gangs/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from core.models import JobSpec  # noqa: E402
from providers.replay.market import load_market  # noqa: E402
from providers.replay.timeline import load_trace  # noqa: E402
from scheduler.simulator.market import build_sim_market  # noqa: E402
from scheduler.simulator.runner import compare, summary_row  # noqa: E402
from scheduler.simulator.simulate import SimJob  # noqa: E402

HERE = Path(__file__).resolve().parent
NODES = (1, 2, 4, 8)
POLICIES = ("arbiter", "greedy", "on-demand")
GAP_S = 60
TICK_S = 300.0
COMPUTE_H, DEADLINE_H = 6.0, 9.0
START_EVERY_H = 0.5
# (instance type, GPU, VRAM GiB, vCPUs, memory GiB, on-demand $/h, spot $/h)
TYPES = {
    "g4dn-xlarge": ("g4dn.xlarge", "T4", 16, 4, 16, 0.526, 0.158),
    "p2-xlarge": ("p2.xlarge", "K80", 12, 4, 61, 0.90, 0.27),
}


def read_counts(path: Path) -> list[int]:
    """Instance count at every minute of a ``time_hours,count`` step trace, as the replayed
    market reads it (:func:`providers.replay.timeline.load_trace`)."""
    return list(load_trace(path, time_unit="hours", gap_seconds=GAP_S).data)


def trace_files(folder: Path) -> list[Path]:
    """The hour-unit traces: every ``_scaled`` file and the p2.xlarge group file."""
    return sorted(p for p in folder.glob("*.csv")
                  if p.stem.endswith("_scaled") or "2020-11-20-to-2020-11-23" in p.stem)


def market_yaml(folder: Path, trace: Path) -> Path:
    """A market file in ``folder``: one spot offer whose availability is ``trace`` (the CSV
    itself, read as the benchmark reads it) and an on-demand offer of the same type."""
    name = trace.stem
    kind = next(k for k in TYPES if k in name)
    itype, gpu, vram, vcpus, mem, od, spot = TYPES[kind]
    zone = next((z for z in ("us-east-1a", "us-east-1c", "us-east-1d", "us-east-1e")
                 if z in name), "us-east-1x")
    # JSON-quoted: some trace names hold a ':' (a YAML flow mapping would split there).
    availability = (f"{{path: {json.dumps(str(trace))}, time_unit: hours, "
                    f"gap_seconds: {GAP_S}}}")
    offer = (f"{{provider: aws, region: us-east-1, zone: {zone}, instance_type: {itype}, "
             f"gpu_model: {gpu}, gpu_count: 1, vram_gib: {vram}, vcpus: {vcpus}, "
             f"memory_gib: {mem}, spot_price_usd_per_hour: {spot}, "
             f"on_demand_price_usd_per_hour: {od}, availability_trace: {availability}}}")
    path = folder / "market.yaml"
    path.write_text(f"name: {json.dumps(name)}\noffers:\n  - {offer}\n")
    return path


def below_share(path: Path) -> list[float]:
    """Per N, the share of the trace's minutes with fewer than N instances."""
    counts = np.array(read_counts(path))
    return [float(np.mean(counts < n)) for n in NODES]


def run_trace(path: Path) -> dict[int, dict[str, dict]]:
    """Summary rows per N and policy for one trace."""
    counts = read_counts(path)
    loop_h = len(counts) * GAP_S / 3600.0
    tick_h = TICK_S / 3600.0
    max_ticks = int(round(2 * DEADLINE_H / tick_h))
    starts = np.arange(0, max(int(loop_h / tick_h), 1), int(round(START_EVERY_H / tick_h)))
    with tempfile.TemporaryDirectory() as tmp:
        market_file = market_yaml(Path(tmp), path)
        replay = load_market(market_file)
        market = build_sim_market(replay, JobSpec(name="gang", command="true"),
                                  int(starts.max()) + max_ticks + 1, TICK_S)
    out: dict[int, dict[str, dict]] = {}
    for n in NODES:
        job = SimJob(COMPUTE_H, DEADLINE_H, 0.2, checkpoint_interval_h=0.5,
                     final_checkpoint_s=60.0, nodes=n)
        comp = compare(market, job, starts, POLICIES, max_ticks, with_optimum=False)
        out[n] = {p: summary_row(p, comp) for p in POLICIES}
    return out


def git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, text=True,
                              capture_output=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=os.environ.get("GA_DATA_DIR", "/work/shared/data"))
    parser.add_argument("--out", default=str(HERE / "RESULTS.md"))
    args = parser.parse_args()
    folder = Path(args.data) / "traces" / "bamboo_aws_2020-11"
    files = trace_files(folder)
    if not files:
        sys.exit(f"no Bamboo traces in {folder}")
    t0 = time.monotonic()
    per_trace = {p.name: run_trace(p) for p in files}
    runtime = time.monotonic() - t0
    lines = table(per_trace)
    text = report(files, per_trace, lines, runtime)
    Path(args.out).write_text(text)
    print(text)


def table(per_trace: dict[str, dict[int, dict[str, dict]]]) -> list[str]:
    """Pooled over every trace's runs: mean normalised cost, misses, mean preemptions."""
    lines = ["| N | policy | runs | mean cost (÷ all on-demand) | deadline misses | "
             "preemptions / run | spot h / run (per node) |",
             "|---|---|---|---|---|---|---|"]
    for n in NODES:
        for p in POLICIES:
            rows = [t[n][p] for t in per_trace.values()]
            runs = sum(r["runs"] for r in rows)
            mean = sum(r["cost_mean"] * r["runs"] for r in rows) / runs
            misses = sum(r["misses"] for r in rows)
            pre = sum(r["preemptions"] * r["runs"] for r in rows) / runs
            spot = sum(r["spot_h"] * r["runs"] for r in rows) / runs
            lines.append(f"| {n} | {p} | {runs} | {mean:.3f} | {misses} | {pre:.2f} | "
                         f"{spot:.2f} |")
    return lines


def report(files, per_trace, lines, runtime) -> str:
    per = ["| trace | hours | N | minutes with < N instances | arbiter cost | arbiter misses "
           "| greedy cost | greedy misses |", "|---|---|---|---|---|---|---|---|"]
    for path in files:
        t, shares = per_trace[path.name], below_share(path)
        hours = len(read_counts(path)) * GAP_S / 3600.0
        for n, share in zip(NODES, shares):
            a, g = t[n]["arbiter"], t[n]["greedy"]
            per.append(f"| {path.name} | {hours:.1f} | {n} | {share:.1%} | {a['cost_mean']:.3f} "
                       f"| {a['misses']}/{a['runs']} | {g['cost_mean']:.3f} | "
                       f"{g['misses']}/{g['runs']} |")
    return "\n".join([
        "# Gangs on Bamboo's instance-count traces",
        "",
        "Command: `python3 benchmarks/gangs/bamboo_gangs.py` (settings in its docstring: "
        f"{COMPUTE_H:g} h of compute, deadline {DEADLINE_H:g} h, restart 0.2 h, checkpoints "
        "every 0.5 h, 60 s final checkpoint under AWS's 120 s notice; starts every 30 min over "
        "one loop of each trace; 300 s ticks).",
        f"Machine: {platform.node()} ({platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}). Date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC. "
        f"Commit: {git_commit()} (plus this benchmark's working tree). Runtime: {runtime:.0f} s.",
        f"Traces ({len(files)}): " + ", ".join(f"`{p.name}`" for p in files) + ".",
        "",
        "Pooled over every trace's runs (cost: mean of each run's cost ÷ the all-on-demand "
        "cost of the same gang; a gang pays N × the price; preemptions: the gang's, i.e. the "
        "count fell below N while it ran):",
        "",
        *lines,
        "",
        "Per trace:",
        "",
        *per,
        "",
    ])


if __name__ == "__main__":
    main()
