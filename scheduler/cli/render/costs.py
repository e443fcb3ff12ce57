"""``schedctl cost-report``: jobs and totals, compute, storage, transfer and savings."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.text import Text

from scheduler.cli.render.tables import (
    Column,
    fitted_table,
    per_1k,
    percent,
    usd,
    usd_cents,
)


def cost_report(report: dict[str, Any], width: int | None = None) -> Group:
    """Jobs and totals of ``GET /v1/cost-report``; the job id is never cut. Compute on owned
    machines (the fleet) and rented compute get their own columns and a totals line when the
    report has them (a daemon before the fleet answered without)."""
    cols = [Column("job", "left"), Column("state", "left", drop=3), Column("compute", drop=5),
            Column("owned", drop=10), Column("rented", drop=11),
            Column("storage", drop=7), Column("transfer", drop=6), Column("total"),
            Column("GPU-h", drop=4), Column("$/GPU-h", drop=9), Column("$/1k units", drop=8),
            Column("on-demand", drop=2), Column("saved", drop=1)]
    rows = []
    for r in report["jobs"] + [dict(report["totals"], job="all", state="")]:
        saved = percent(r.get("savings_pct"))
        rows.append([r["job"], r["state"], usd_cents(r["compute_usd"]),
                     usd_cents(r.get("owned_compute_usd")), usd_cents(r.get("rented_compute_usd")),
                     usd(r["storage_usd"], 4), usd(r["transfer_usd"], 4),
                     usd_cents(r["total_usd"]), f"{r['gpu_hours']:.2f}",
                     usd(r["usd_per_gpu_hour"], 3), _per_1k(r), usd_cents(r["on_demand_usd"]),
                     saved])
    table = fitted_table("cost report (USD; compute in market hours)", cols, rows, width,
                         expand=True)
    p = report["prices"]
    note = Text(f"storage ${p['storage_usd_per_gb_month']}/GB-month, transfer "
                f"${p['transfer_usd_per_gb']}/GB, estimated from checkpoint manifests (stored, "
                f"compressed sizes); $/1k units: compute per 1,000 units of work done",
                style="dim")
    return Group(table, *_owned_line(report), note)


def _per_1k(row: dict[str, Any]) -> str:
    """``$0.42/1k samples``: compute per 1,000 units done; ``-`` without units done (and on
    the totals row, whose jobs may count different units)."""
    value = row.get("usd_per_1k_units")
    return "-" if value is None else f"{per_1k(value)}/1k {row['work_unit']}"


def _owned_line(report: dict[str, Any]) -> list[Text]:
    """``compute on owned machines (fleet): $x over n GPU-h · rented: $y over m GPU-h``."""
    t = report["totals"]
    if t.get("owned_compute_usd") is None:
        return []
    owners = ", ".join(report.get("owned_providers") or []) or "no fleet configured"
    return [Text(f"compute on owned machines ({owners}): {usd_cents(t['owned_compute_usd'])} "
                 f"over {t['owned_gpu_hours']:.2f} GPU-h at their amortised cost · rented: "
                 f"{usd_cents(t['rented_compute_usd'])} over {t['rented_gpu_hours']:.2f} GPU-h")]
