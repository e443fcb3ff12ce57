"""``schedctl offers``: the latest offers, or with ``--at`` the market as it was then, from
the daemon's API (``GET /v1/offers``, :mod:`scheduler.api.offers`)."""

from __future__ import annotations

from pathlib import Path

import typer

from scheduler.cli import render
from scheduler.cli.app import HomeOption, app, client, console, err, fail
from scheduler.cli.client import CliError
from scheduler.cli.history import say_sources


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
    filters = dict(gpu=gpu, provider=provider, market=market, min_vram_gib=min_vram_gib)
    try:
        if at:
            rows = client(home).get("/v1/offers", at=at, source=source, **filters)
            say_sources(sorted({r.get("source", "real") for r in rows}), "table")
        else:
            rows = client(home).get("/v1/offers", **filters)
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
