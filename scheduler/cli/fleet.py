"""``schedctl fleet list|drain|undrain``: the team's own machines (``kind: fleet`` providers),
through the daemon's API (:mod:`scheduler.api.fleet`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote

import typer

from scheduler.cli import render
from scheduler.cli.app import HomeOption, app, client, console, err, fail
from scheduler.cli.client import CliError
from scheduler.cli.formats import check_format, emit

fleet_app = typer.Typer(help="Your own GPU machines over SSH: hosts, slots, drain.",
                        no_args_is_help=True)
app.add_typer(fleet_app, name="fleet")

FleetOption = typer.Option(None, "--fleet", help="the fleet provider's name, when two fleets "
                                                 "have a host of that name")


@fleet_app.command("list")
def list_hosts(fmt: str = typer.Option("table", "--format", help="table, json or csv"),
               home: Path | None = HomeOption) -> None:
    """Hosts: GPUs, used and free slots, the jobs on them, drained or not, last seen."""
    check_format(fmt)
    try:
        hosts = client(home).get("/v1/fleet")["hosts"]
    except CliError as exc:
        fail(exc)
    if not hosts and fmt == "table":
        err.print("no fleet hosts: the daemon's config has no `kind: fleet` entry (see the "
                  "README, \"Your own machines\")")
        raise typer.Exit(1)
    emit(hosts, fmt, {"hosts": hosts}, lambda: render.fleet_table(hosts))


def _change(action: str, host: str, fleet: str | None, home: Path | None) -> dict[str, Any]:
    path = f"/v1/fleet/{quote(host, safe='')}/{action}"
    try:
        return client(home).request("POST", path, params={"fleet": fleet} if fleet else None)
    except CliError as exc:
        fail(exc)


@fleet_app.command("drain")
def drain(host: str = typer.Argument(..., help="host name, as `schedctl fleet list` shows it"),
          fleet: str | None = FleetOption, home: Path | None = HomeOption) -> None:
    """Take HOST out of service: its jobs get a preemption notice (checkpoint, then move
    elsewhere) and no new job starts there until `schedctl fleet undrain`."""
    row = _change("drain", host, fleet, home)
    jobs = [j["job"] or j["instance_id"] for j in row["jobs"]]
    console.print(f"{row['fleet']}/{row['host']} drained; "
                  + (f"moving {', '.join(jobs)} (checkpoint, then relaunch elsewhere)" if jobs
                     else "no job runs there"))


@fleet_app.command("undrain")
def undrain(host: str = typer.Argument(..., help="host name, as `schedctl fleet list` shows it"),
            fleet: str | None = FleetOption, home: Path | None = HomeOption) -> None:
    """Return HOST to service: its free slots are offered again."""
    row = _change("undrain", host, fleet, home)
    console.print(f"{row['fleet']}/{row['host']} back in service: its free GPUs are offered "
                  "from the next offer poll")
