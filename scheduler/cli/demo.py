"""``schedctl demo``: the whole job on the embedded default, in under three minutes.

Starts a daemon (embedded Redis, local checkpoint store, the replayed example market) in a
fresh state folder, submits the example character-level language model, shows its progress
live while the market preempts it and the scheduler migrates it, then prints the bill.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import typer
from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from core.config import examples_dir, home_dir
from scheduler.cli import render
from scheduler.cli.app import app, console, fail
from scheduler.cli.bundle import load_spec_file, pack_spec
from scheduler.cli.client import ApiClient, CliError

_TERMINAL = ("succeeded", "failed", "cancelled")
_DAEMON_START_TIMEOUT_S = 60.0


@app.command()
def demo(home: Path | None = typer.Option(None, help="where the demo keeps its state, "
                                             "wiped first (default: GA_HOME/demo)"),
         timeout_s: float = typer.Option(170.0, help="give up after this many seconds"),
         keep: bool = typer.Option(False, "--keep", help="keep the daemon and its dashboard "
                                   "running after the job, until Ctrl-C")) -> None:
    """Run the main job on the embedded default, preemption and migration included.

    Places the example training job on the replayed market, lets the market preempt it,
    checkpoints, migrates, resumes, finishes and reports the cost against on-demand. The
    daemon's dashboard can be watched meanwhile (its address is printed; ``--keep`` leaves it
    up afterwards)."""
    try:
        ok = run_demo(console, home, timeout_s, keep=keep)
    except CliError as exc:
        fail(exc)
    raise typer.Exit(0 if ok else 1)


def _terminated(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def _stop_pid(pid: int, timeout_s: float = 15.0) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _clean(home: Path, market: Path) -> None:
    """Stop what an earlier demo in ``home`` may have left running, then wipe it."""
    from providers.replay.provider import ReplayProvider
    from scheduler.daemon import read_daemon_info

    info = read_daemon_info(home)
    if info and info.get("pid"):
        _stop_pid(int(info["pid"]))
    if (home / "replay").exists():
        ReplayProvider(market, home / "replay").shutdown_cloud()
    from scheduler.store.connection import EmbeddedRedis
    EmbeddedRedis(home / "redis").stop()
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)


def start_daemon(home: Path, market: Path) -> subprocess.Popen:
    """Start ``schedctl daemon`` for ``home`` in the background and wait until it answers.

    Raises ``CliError`` (with the daemon's log path) when it does not come up.
    """
    from scheduler.daemon import read_daemon_info

    log = open(home / "daemon.log", "ab")
    proc = subprocess.Popen(
        [sys.executable, "-m", "scheduler", "daemon", "--home", str(home), "--market", str(market)],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        env={**os.environ, "GA_HOME": str(home)},
    )
    deadline = time.monotonic() + _DAEMON_START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise CliError(f"the daemon exited with code {proc.returncode}; see {home}/daemon.log")
        info = read_daemon_info(home)
        if info and info.get("pid") == proc.pid:
            try:
                if ApiClient(home, timeout_s=2).get("/v1/offers"):  # first poll done
                    return proc
            except CliError:
                pass
        time.sleep(0.2)
    proc.kill()
    raise CliError(f"the daemon did not start within {_DAEMON_START_TIMEOUT_S:.0f} s; "
                   f"see {home}/daemon.log")


def run_demo(console: Console, home: Path | None, timeout_s: float, keep: bool = False) -> bool:
    """Run the demo; returns ``True`` when the job succeeded after at least one migration.
    ``keep``: leave the daemon running after the report until interrupted (Ctrl-C)."""
    home = (home or home_dir() / "demo").resolve()
    market = examples_dir() / "market.yaml"
    spec_path = examples_dir() / "charlm-job.yaml"
    console.rule("[bold]gpu-arbiter demo")
    console.print(f"state folder: {home}\nmarket: {market} (a replayed spot market)")
    _clean(home, market)
    daemon = start_daemon(home, market)
    # A plain `kill` of the demo must stop its daemon and replayed cloud too, as Ctrl-C does.
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminated) if main else None
    try:
        client = ApiClient(home)
        console.print(f"dashboard: {client.base_url}/ui/ (log in with the token in "
                      f"{home / 'api-token'})")
        console.print(render.offers_table(client.get("/v1/offers")))
        raw = load_spec_file(spec_path)
        job = client.post("/v1/jobs", json={"spec": raw, "bundle_b64": pack_spec(raw)})
        console.print(f"submitted [bold]{job['id']}[/]: {raw['command']} "
                      f"(needs {raw['resources']['gpu_count']} GPU with "
                      f">= {raw['resources']['min_vram_gib']} GiB)")
        job = _follow(console, client, job["id"], timeout_s)
        ok = _report(console, client, job)
        if keep:
            console.print(f"the daemon keeps running: dashboard at {client.base_url}/ui/; "
                          "Ctrl-C stops it")
            try:
                while daemon.poll() is None:
                    time.sleep(1)
            except KeyboardInterrupt:
                pass
        return ok
    finally:
        console.print("stopping the demo daemon and its replayed market ...", style="dim")
        _stop_pid(daemon.pid)
        from providers.replay.provider import ReplayProvider
        ReplayProvider(market, home / "replay").shutdown_cloud()
        if main:
            signal.signal(signal.SIGTERM, previous)


def _follow(console: Console, client: ApiClient, job_id: str, timeout_s: float) -> dict:
    """Show the job until it ends: a live panel on a terminal, plain lines otherwise."""
    deadline = time.monotonic() + timeout_s
    if not console.is_terminal:
        return _follow_plain(console, client, job_id, deadline)
    progress = Progress(TextColumn("training"), BarColumn(), TextColumn("{task.description}"),
                        TimeElapsedColumn(), console=console)
    task = progress.add_task("waiting for the first step", total=None)
    lines: list[str] = []
    with Live(console=console, refresh_per_second=4) as live:
        while True:
            job = client.get(f"/v1/jobs/{job_id}")
            lines.extend(client.get(f"/v1/jobs/{job_id}/logs", start=len(lines))["lines"])
            parsed = render.latest_progress(lines)
            if parsed:
                step, total, loss = parsed
                progress.update(task, completed=step, total=total,
                                description=f"step {step}/{total} loss {loss}")
            # Short enough for a 24-line terminal: the last events and the progress bar (the
            # placements are printed at the end).
            live.update(Group(render.job_panel(job, last_events=4, with_placements=False),
                              progress))
            if job["state"] in _TERMINAL:
                return job
            _check_deadline(deadline, job)
            time.sleep(0.5)


def _follow_plain(console: Console, client: ApiClient, job_id: str, deadline: float) -> dict:
    seen_events = 0
    lines: list[str] = []
    last_progress = 0.0
    while True:
        job = client.get(f"/v1/jobs/{job_id}")
        for ev in job["events"][seen_events:]:
            console.print(f"{ev['at'][11:19]}  {ev['state']:<13} {ev['message']}", soft_wrap=True)
        seen_events = len(job["events"])
        lines.extend(client.get(f"/v1/jobs/{job_id}/logs", start=len(lines))["lines"])
        parsed = render.latest_progress(lines)
        if parsed and time.monotonic() - last_progress > 10:
            last_progress = time.monotonic()
            console.print(f"          training step {parsed[0]}/{parsed[1]}, loss {parsed[2]}")
        if job["state"] in _TERMINAL:
            return job
        _check_deadline(deadline, job)
        time.sleep(0.5)


def _check_deadline(deadline: float, job: dict) -> None:
    if time.monotonic() > deadline:
        raise CliError(f"the job did not finish in time (state {job['state']}); "
                       f"see `schedctl status {job['id']}`")


def _report(console: Console, client: ApiClient, job: dict) -> bool:
    lines = client.get(f"/v1/jobs/{job['id']}/logs")["lines"]
    done = next((line for line in reversed(lines) if line.startswith("done ")), None)
    d = job["derived"]
    console.print()
    console.rule("[bold]result")
    console.print(render.placements(job))
    console.print(f"job {job['id']}: {job['state']}, {render.plural(d['migrations'], 'migration')}"
                  f" over {render.plural(len(job['placements']), 'placement')}")
    if done:
        console.print(f"training: {done}", soft_wrap=True)
    console.print(render.money_line(job))
    work = render.work_line(job)
    if work is not None:
        console.print(work)
    ok = job["state"] == "succeeded" and d["migrations"] >= 1
    if job["state"] == "succeeded" and d["migrations"] == 0:
        console.print("[yellow]the market did not preempt the job this time[/]")
    return ok
