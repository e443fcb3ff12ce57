"""``schedctl``: the gpu-arbiter command line."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from scheduler.cli import render
from scheduler.cli.bundle import load_spec_file, pack_spec
from scheduler.cli.client import ApiClient, CliError

app = typer.Typer(help="gpu-arbiter: run GPU jobs on the cheapest offer that fits, across "
                       "clouds and spot markets, and move them when the market moves.",
                  no_args_is_help=True, pretty_exceptions_enable=False)
console = Console()
err = Console(stderr=True)

HomeOption = typer.Option(None, "--home", envvar="GA_HOME",
                          help="state directory of the daemon to talk to")


def _client(home: Optional[Path]) -> ApiClient:
    return ApiClient(home)


def _fail(exc: CliError) -> None:
    if exc.problems:
        err.print(render.problems_table(exc.problems))
    else:
        err.print(f"[bold red]error:[/] {exc}")
    raise typer.Exit(2)


@app.command()
def daemon(
    home: Optional[Path] = HomeOption,
    market: Optional[Path] = typer.Option(None, help="replayed market YAML (default: the example market)"),
    host: str = typer.Option("127.0.0.1", help="API bind address"),
    port: int = typer.Option(0, help="API port (0: reuse the last one or pick a free one)"),
    log_level: str = typer.Option("INFO", help="DEBUG, INFO, WARNING or ERROR"),
) -> None:
    """Run the scheduler service (pollers, reconcile loop, API) in the foreground."""
    from scheduler.daemon import Daemon, DaemonSettings

    logging.basicConfig(level=log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # Routine per-second chatter of the scheduler and HTTP client hides what matters.
    for noisy in ("apscheduler", "httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLogger().level))
    settings = DaemonSettings(host=host, port=port)
    if home:
        settings.home = home
        settings.home.mkdir(parents=True, exist_ok=True)
    if market:
        if not market.is_file():
            err.print(f"[bold red]error:[/] --market: {market} is not a file")
            raise typer.Exit(2)
        settings.market = market.resolve()
    Daemon(settings).run()


@app.command()
def submit(spec_file: Path = typer.Argument(..., help="job spec YAML"),
           home: Optional[Path] = HomeOption) -> None:
    """Submit a job. An invalid spec is refused with every bad field listed."""
    try:
        raw = load_spec_file(spec_file)
        bundle = pack_spec(raw)
        job = _client(home).post("/v1/jobs", json={"spec": raw, "bundle_b64": bundle})
    except CliError as exc:
        _fail(exc)
    console.print(f"submitted [bold]{job['id']}[/] ({job['state']})")
    console.print(f"follow it with: schedctl status {job['id']}")


@app.command()
def status(job_id: str, home: Optional[Path] = HomeOption,
           watch: bool = typer.Option(False, "--watch", "-w", help="refresh until the job ends")) -> None:
    """Timeline, placements, cost so far and what all-on-demand would have cost."""
    try:
        client = _client(home)
        if not watch:
            console.print(render.job_panel(client.get(f"/v1/jobs/{job_id}")))
            return
        from rich.live import Live
        with Live(console=console, refresh_per_second=4) as live:
            while True:
                job = client.get(f"/v1/jobs/{job_id}")
                live.update(render.job_panel(job, last_events=15))
                if job["state"] in ("succeeded", "failed", "cancelled"):
                    break
                time.sleep(1)
    except CliError as exc:
        _fail(exc)


@app.command("list")
def list_jobs(home: Optional[Path] = HomeOption,
              limit: int = typer.Option(50, min=1, max=1000)) -> None:
    """All jobs, newest first."""
    try:
        console.print(render.jobs_table(_client(home).get("/v1/jobs", limit=limit)))
    except CliError as exc:
        _fail(exc)


@app.command()
def cancel(job_id: str, home: Optional[Path] = HomeOption) -> None:
    """Cancel a job: its agent checkpoints and stops, then the instance is terminated."""
    try:
        job = _client(home).post(f"/v1/jobs/{job_id}/cancel")
    except CliError as exc:
        _fail(exc)
    console.print(f"{job['id']}: cancel requested (state {job['state']})")


@app.command()
def logs(job_id: str, home: Optional[Path] = HomeOption,
         follow: bool = typer.Option(False, "--follow", "-f", help="keep printing new lines")) -> None:
    """The job's output, across all its placements."""
    try:
        client = _client(home)
        start = 0
        while True:
            page = client.get(f"/v1/jobs/{job_id}/logs", start=start)
            for line in page["lines"]:
                console.print(line, markup=False, highlight=False)
            start = page["next"]
            if not follow:
                return
            job = client.get(f"/v1/jobs/{job_id}")
            if job["state"] in ("succeeded", "failed", "cancelled") and not page["lines"]:
                return
            time.sleep(1)
    except CliError as exc:
        _fail(exc)


@app.command()
def offers(home: Optional[Path] = HomeOption,
           gpu: Optional[str] = typer.Option(None, help="GPU model, e.g. V100"),
           provider: Optional[str] = typer.Option(None),
           market: Optional[str] = typer.Option(None, help="spot or on-demand"),
           min_vram_gib: float = typer.Option(0, help="minimum VRAM per GPU, GiB")) -> None:
    """Latest offers: GPU, count, VRAM, provider, zone, on-demand and spot $/h, risk."""
    if market not in (None, "spot", "on-demand"):
        err.print(f"[bold red]error:[/] --market: got {market!r}; allowed: spot, on-demand")
        raise typer.Exit(2)
    try:
        rows = _client(home).get("/v1/offers", gpu=gpu, provider=provider, market=market,
                                 min_vram_gib=min_vram_gib)
    except CliError as exc:
        _fail(exc)
    console.print(render.offers_table(rows))


@app.command()
def demo(home: Optional[Path] = typer.Option(None, help="where the demo keeps its state "
                                             "(default: a fresh folder under the data dir)"),
         timeout_s: float = typer.Option(170.0, help="give up after this many seconds")) -> None:
    """Run the whole job on the embedded default: place, run, get preempted, checkpoint,
    migrate, resume, finish, and report the cost against on-demand."""
    from scheduler.cli.demo import run_demo

    try:
        ok = run_demo(console, home, timeout_s)
    except CliError as exc:
        _fail(exc)
    raise typer.Exit(0 if ok else 1)


if __name__ == "__main__":
    app()
