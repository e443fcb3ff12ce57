"""``schedctl cost-report``: jobs and totals, compute, storage, transfer and savings."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.text import Text

from scheduler.cli.render.tables import Column, fitted_table, usd, usd_cents


def cost_report(report: dict[str, Any], width: int | None = None) -> Group:
    """Jobs and totals of ``GET /v1/cost-report``; the job id is never cut."""
    cols = [Column("job", "left"), Column("state", "left", drop=3), Column("compute", drop=5),
            Column("storage", drop=7), Column("transfer", drop=6), Column("total"),
            Column("GPU-h", drop=4), Column("$/GPU-h", drop=8), Column("on-demand", drop=2),
            Column("saved", drop=1)]
    rows = []
    for r in report["jobs"] + [dict(report["totals"], job="all", state="")]:
        saved = "-" if r.get("savings_pct") is None else f"{r['savings_pct']:.1f}%"
        rows.append([r["job"], r["state"], usd_cents(r["compute_usd"]), usd(r["storage_usd"], 4),
                     usd(r["transfer_usd"], 4), usd_cents(r["total_usd"]),
                     f"{r['gpu_hours']:.2f}", usd(r["usd_per_gpu_hour"], 3),
                     usd_cents(r["on_demand_usd"]), saved])
    table = fitted_table("cost report (USD; compute in market hours)", cols, rows, width,
                         expand=True)
    p = report["prices"]
    note = Text(f"storage ${p['storage_usd_per_gb_month']}/GB-month, transfer "
                f"${p['transfer_usd_per_gb']}/GB, estimated from checkpoint manifests", style="dim")
    return Group(table, note)
