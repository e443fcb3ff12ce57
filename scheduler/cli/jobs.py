"""Daemon, job and offer commands: ``daemon``, ``submit``, ``status``, ``list``, ``cancel``,
``logs``, ``offers``, ``demo``."""

from __future__ import annotations

import time
from pathlib import Path

import typer
from rich.markup import escape

from scheduler.cli import render
from scheduler.cli.app import HomeOption, app, client, console, err, fail
from scheduler.cli.bundle import load_spec_file, pack_spec
from scheduler.cli.client import ApiClient, CliError


@app.command()
def daemon(
    home: Path | None = typer.Option(None, "--home", envvar="GA_HOME",
                                        help="state directory (embedded Redis, checkpoints, ...)"),
    config: Path | None = typer.Option(
        None, help="daemon config YAML with a 'providers' list (default: GA_HOME/config.yaml "
                   "if present, else the replayed example market)"),
    market: Path | None = typer.Option(None, help="run just this replayed market YAML "
                                                     "(instead of the config's providers)"),
    host: str = typer.Option("127.0.0.1", help="API bind address"),
    port: int = typer.Option(0, help="API port (0: reuse the last one or pick a free one)"),
    log_level: str = typer.Option("INFO", help="DEBUG, INFO, WARNING or ERROR"),
    log_format: str = typer.Option("text", envvar="GA_LOG_FORMAT",
                                   help="text, or json: one JSON object per line"),
) -> None:
    """Run the scheduler service (pollers, reconcile loop, API) in the foreground."""
    from scheduler.daemon import Daemon, DaemonAlreadyRunning, DaemonSettings
    from scheduler.observability.logs import configure as configure_logs
    from scheduler.provider_setup import ProviderConfigError, load_config_file
    from scheduler.replicas import ReplicaConfigError

    try:
        configure_logs(log_level, log_format)
    except ValueError as exc:
        err.print(f"[bold red]error:[/] {exc}")
        raise typer.Exit(2) from None
    settings = DaemonSettings(host=host, port=port)
    if home:
        settings.home = home
        settings.home.mkdir(parents=True, exist_ok=True)
    config = config or (settings.home / "config.yaml" if (settings.home / "config.yaml").is_file() else None)
    try:
        if market:
            if not market.is_file():
                raise ProviderConfigError(f"--market: {market} is not a file")
            settings.providers = [{"kind": "replay", "market": str(market.resolve())}]
        elif config:
            settings.providers = load_config_file(config)
            settings.config_dir = config.resolve().parent
            settings.config_file = config.resolve()
        daemon_ = Daemon(settings)
    except (ProviderConfigError, DaemonAlreadyRunning, ReplicaConfigError) as exc:
        err.print(f"[bold red]error:[/] {exc}")
        raise typer.Exit(2)
    daemon_.run()


@app.command()
def submit(spec_file: Path = typer.Argument(..., help="job spec YAML"),
           home: Path | None = HomeOption) -> None:
    """Submit a job. An invalid spec is refused with every bad field listed."""
    try:
        raw = load_spec_file(spec_file)
        bundle = pack_spec(raw)
        job = client(home).post("/v1/jobs", json={"spec": raw, "bundle_b64": bundle})
    except CliError as exc:
        fail(exc)
    console.print(f"submitted [bold]{job['id']}[/] ({job['state']})")
    for warning in job.get("warnings") or []:
        err.print(f"[bold yellow]{escape(warning)}[/]")
    console.print(f"follow it with: schedctl status {job['id']}")


@app.command()
def status(job_id: str, home: Path | None = HomeOption,
           watch: bool = typer.Option(False, "--watch", "-w", help="refresh until the job ends")) -> None:
    """Timeline, placements, cost so far and what all-on-demand would have cost. With
    --watch, a live view on a terminal; piped or redirected, one line per new event as it
    happens, then the final summary."""
    try:
        api = client(home)
        if not watch:
            console.print(render.job_panel(api.get(f"/v1/jobs/{job_id}")))
            return
        if not console.is_terminal:
            _watch_lines(api, job_id)
            return
        from rich.live import Live
        with Live(console=console, refresh_per_second=4) as live:
            while True:
                job = api.get(f"/v1/jobs/{job_id}")
                live.update(render.job_panel(job, last_events=15))
                if job["state"] in render.TERMINAL_STATES:
                    break
                time.sleep(1)
    except CliError as exc:
        fail(exc)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


def _watch_lines(api: ApiClient, job_id: str) -> None:
    """``status --watch`` into a pipe or a file: a live view draws nothing there until it
    stops, so print each timeline event (and each new waiting reason) once, as a line, as
    soon as a poll sees it; when the job ends, print its summary."""
    printed, reason = 0, None
    while True:
        job = api.get(f"/v1/jobs/{job_id}")
        events = job["events"]
        for event in events[printed:]:
            console.print(render.event_line(event), highlight=False, soft_wrap=True)
        printed = len(events)
        ended = job["state"] in render.TERMINAL_STATES
        if not ended and job.get("waiting_reason") and job["waiting_reason"] != reason:
            console.print(f"waiting: {job['waiting_reason']}", markup=False, highlight=False,
                          soft_wrap=True)
        reason = job.get("waiting_reason")
        if ended:
            console.print(render.job_panel(job))
            return
        time.sleep(1)


@app.command("list")
def list_jobs(home: Path | None = HomeOption,
              limit: int = typer.Option(50, min=1, max=1000)) -> None:
    """All jobs, newest first."""
    try:
        console.print(render.jobs_table(client(home).get("/v1/jobs", limit=limit)))
    except CliError as exc:
        fail(exc)


@app.command()
def cancel(job_id: str, home: Path | None = HomeOption) -> None:
    """Cancel a job: its agent checkpoints and stops, then the instance is terminated."""
    try:
        job = client(home).post(f"/v1/jobs/{job_id}/cancel")
    except CliError as exc:
        fail(exc)
    if job["state"] in render.TERMINAL_STATES:
        console.print(f"{job['id']} already ended ({job['state']}); nothing to cancel")
        return
    console.print(f"{job['id']}: cancel requested (state {job['state']}); the job checkpoints "
                  "and stops, follow it with `schedctl status`")


@app.command()
def logs(job_id: str, home: Path | None = HomeOption,
         follow: bool = typer.Option(False, "--follow", "-f", help="keep printing new lines")) -> None:
    """The job's output, across all its placements."""
    try:
        api = client(home)
        start = 0
        while True:
            page = api.get(f"/v1/jobs/{job_id}/logs", start=start)
            for line in page["lines"]:
                console.print(line, markup=False, highlight=False, soft_wrap=True)
            start = page["next"]
            if not follow:
                return
            job = api.get(f"/v1/jobs/{job_id}")
            if job["state"] in render.TERMINAL_STATES and not page["lines"]:
                return
            time.sleep(1)
    except CliError as exc:
        fail(exc)


@app.command()
def offers(home: Path | None = HomeOption,
           gpu: str | None = typer.Option(None, help="GPU model, e.g. V100"),
           provider: str | None = typer.Option(None),
           market: str | None = typer.Option(None, help="spot or on-demand"),
           min_vram_gib: float = typer.Option(0, min=0, help="minimum VRAM per GPU, GiB"),
           at: str | None = typer.Option(None, help="the market as it was then, from price "
                                            "history (ISO date-time or a duration ago: 3d)"),
           source: str = typer.Option("auto", help="history read by --at: auto (real when it "
                                                   "covers that time, else replayed markets'), "
                                                   "real, replay, replay:MARKET or all")) -> None:
    """Latest offers: GPU, count, VRAM, provider, zone, on-demand and spot $/h, risk."""
    if market not in (None, "spot", "on-demand"):
        err.print(f"[bold red]error:[/] --market: got {market!r}; allowed: spot, on-demand")
        raise typer.Exit(2)
    try:
        if at:
            from scheduler.cli.history import offers_at
            rows = offers_at(home, at, source=source, gpu=gpu, provider=provider,
                             market=market, min_vram_gib=min_vram_gib)
        else:
            rows = client(home).get("/v1/offers", gpu=gpu, provider=provider, market=market,
                                    min_vram_gib=min_vram_gib)
    except CliError as exc:
        fail(exc)
    if not rows:
        if gpu or provider or market or min_vram_gib:
            err.print("no offers match these filters (see `schedctl offers` for all)")
        else:
            err.print("no offers" + (f" in price history at {at}" if at else
                                     ": no provider has listed any yet (see "
                                     "`schedctl providers check`)"))
        raise typer.Exit(1)
    console.print(render.offers_table(rows, market))
    if at:
        err.print(f"(prices in force at {at}, from price history; risk not recorded)")


@app.command()
def demo(home: Path | None = typer.Option(None, help="where the demo keeps its state, "
                                             "wiped first (default: GA_HOME/demo)"),
         timeout_s: float = typer.Option(170.0, help="give up after this many seconds")) -> None:
    """Run the main job on the embedded default, preemption and migration included.

    Places the example training job on the replayed market, lets the market preempt it,
    checkpoints, migrates, resumes, finishes and reports the cost against on-demand."""
    from scheduler.cli.demo import run_demo

    try:
        ok = run_demo(console, home, timeout_s)
    except CliError as exc:
        fail(exc)
    raise typer.Exit(0 if ok else 1)

