"""``schedctl events``: what the scheduler did, newest last, optionally followed live.

Reads ``GET /v1/events`` (:mod:`scheduler.api.events`): first the most recent ``--limit``
events, then with ``--follow`` long-polls for new ones until interrupted (Ctrl-C).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape

from scheduler.cli.app import HomeOption, app, client, console, fail
from scheduler.cli.client import CliError
from scheduler.timing import EVENTS_MAX_WAIT_S


def format_event(event: dict[str, Any]) -> str:
    """One line (rich markup) per event: time, job, attempt, state, ``[kind]``, message,
    offer. The kind tag is left out when the message already names it ("budget exhausted"
    needs no ``[budget]`` before it)."""
    at = str(event.get("at", ""))[:19].replace("T", " ")
    message = str(event.get("message", ""))
    kind = ""
    if event.get("kind") and str(event["kind"]).lower() not in message.lower():
        kind = f" [magenta]{escape('[' + str(event['kind']) + ']')}[/]"
    offer = ""
    if event.get("offer"):
        price = event.get("price_usd_per_hour")
        offer = f" [dim]({escape(event['offer'])}" + (f" @ ${price:.4f}/h" if price is not None
                                                     else "") + ")[/]"
    return (f"{at} [bold]{escape(str(event.get('job_id', '?')))}[/]"
            f"#{event.get('attempt', '?')} [cyan]{escape(str(event.get('state', '?')))}[/]"
            f"{kind} {escape(message)}{offer}")


@app.command()
def events(home: Path | None = HomeOption,
           follow: bool = typer.Option(False, "--follow", "-f",
                                       help="keep printing new events until Ctrl-C"),
           job: str | None = typer.Option(None, "--job", help="only this job's events"),
           as_json: bool = typer.Option(False, "--json", help="one JSON object per line"),
           limit: int = typer.Option(50, min=1, max=1000,
                                     help="how many recent events to show first")) -> None:
    """Print the scheduler's recent job events (placements, launches, preemptions,
    migrations, budget alerts, ...); with --follow, keep streaming them."""
    try:
        api = client(home)
        page = api.get("/v1/events", limit=limit, job=job)
        _print(page["events"], as_json)
        while follow:
            page = api.get("/v1/events", after=page["next"], limit=1000, job=job,
                           wait_s=EVENTS_MAX_WAIT_S)
            _print(page["events"], as_json)
    except CliError as exc:
        fail(exc)
    except KeyboardInterrupt:
        raise typer.Exit(0) from None


def _print(items: list[dict[str, Any]], as_json: bool) -> None:
    for event in items:
        if as_json:
            typer.echo(json.dumps(event, separators=(",", ":")))
        else:
            console.print(format_event(event), highlight=False, soft_wrap=True)
