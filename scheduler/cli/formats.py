"""``--format table|json|csv``: checking the option, and printing an answer in it."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable
from typing import Any

import typer

from scheduler.cli.app import console, err

FORMATS = ("table", "json", "csv")


def check_format(fmt: str) -> None:
    """Exit 2 naming ``--format`` when ``fmt`` is not one of :data:`FORMATS`."""
    if fmt not in FORMATS:
        err.print(f"[bold red]error:[/] --format: got {fmt!r}; allowed: {', '.join(FORMATS)}")
        raise typer.Exit(2)


def emit(rows: list[dict[str, Any]], fmt: str, whole: Any, table: Callable[[], Any]) -> None:
    """Print ``whole`` as JSON, ``rows`` as CSV (nested values as JSON), or ``table()`` with
    rich."""
    if fmt == "json":
        typer.echo(json.dumps(whole, indent=2, default=str))
    elif fmt == "csv":
        buf = io.StringIO()
        if rows:
            writer = csv.DictWriter(buf, fieldnames=list(rows[0]), extrasaction="ignore")
            writer.writeheader()
            writer.writerows({k: (json.dumps(v) if isinstance(v, (dict, list)) else v)
                              for k, v in r.items()} for r in rows)
        typer.echo(buf.getvalue(), nl=False)
    else:
        console.print(table())
