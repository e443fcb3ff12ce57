"""Job commands, all through the daemon's API (:mod:`scheduler.api.jobs`): ``submit``,
``status``, ``list``, ``cancel``, ``logs``."""

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
              limit: int = typer.Option(50, min=1, max=1000),
              owner: str | None = typer.Option(None, "--owner", help="only this user's jobs "
                                               "(a plain user sees only their own anyway)")) -> None:
    """The jobs you may see (an admin: everyone's), newest first."""
    try:
        console.print(render.jobs_table(client(home).get("/v1/jobs", limit=limit, owner=owner)))
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
