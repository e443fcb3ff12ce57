"""``schedctl offers``: the offers table, with the age of each price."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from scheduler.cli.render.tables import new_table, usd


def offers_table(rows: list[dict[str, Any]], market: str | None = None) -> Table:
    table = new_table("offers, USD/hour (risk: monthly interruption frequency; age: since "
                      "the price started)", expand=False)
    table.add_column("GPU", no_wrap=True)
    table.add_column("VRAM", justify="right", no_wrap=True)
    table.add_column("provider/zone", no_wrap=True)
    table.add_column("instance type", no_wrap=True)
    if market != "spot":
        table.add_column("on-demand", justify="right", no_wrap=True)
    if market != "on-demand":
        table.add_column("spot", justify="right", no_wrap=True)
        table.add_column("risk", justify="right", no_wrap=True)
    table.add_column("age", justify="right", no_wrap=True)  # of the price: since it started
    for r in rows:
        cells = [f"{r['gpu_count']}x {r['gpu_model']}", f"{r['vram_gib']:.4g}G",
                 f"{r['provider']}/{r['zone']}", r["instance_type"]]
        if market != "spot":
            cells.append(usd(r["on_demand_usd_per_hour"], 3))
        if market != "on-demand":
            risk = "-" if r["interruption_risk"] is None else f"{100 * r['interruption_risk']:.0f}%"
            cells += [usd(r["spot_usd_per_hour"], 3), risk]
        cells.append(price_age(r.get("price_age_s")))
        table.add_row(*cells)
    return table


def price_age(seconds: float | None) -> str:
    """How long a price has been in force: ``45s``, ``12m``, ``3h``, ``5d``, ``2y`` (``-``
    when unknown)."""
    if seconds is None:
        return "-"
    seconds = max(0.0, float(seconds))
    for unit, size in (("y", 365 * 86400), ("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size:.0f}{unit}"
    return f"{seconds:.0f}s"
