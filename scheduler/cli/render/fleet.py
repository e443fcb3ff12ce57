"""``schedctl fleet list``: the team's own hosts, their GPUs and slots, the jobs on them."""

from __future__ import annotations

from typing import Any

from rich.text import Text

from scheduler.cli.render.offers import price_age
from scheduler.cli.render.tables import Column, fitted_table, usd


def _gpus(host: dict[str, Any]) -> str:
    return " + ".join(f"{g['count']}x {g['model']} {g['vram_gib']:.4g}G"
                      for g in host["gpus"]) or "none known"


def _state(host: dict[str, Any]) -> Text:
    if host["drained"]:
        return Text("drained", style="bold yellow")
    if not host["reachable"]:
        return Text("never seen" if host["last_seen_at"] is None else "unreachable",
                    style="bold red")
    return Text("ready", style="green")


def _jobs(host: dict[str, Any]) -> str:
    shown = [f"{j['job'] or j['instance_id']} ({','.join(map(str, j['gpus']))})"
             for j in host["jobs"]]
    return "\n".join(shown) or "-"


def fleet_table(hosts: list[dict[str, Any]], width: int | None = None):
    """The hosts of ``GET /v1/fleet`` (:func:`scheduler.services.fleet.hosts`), one row each:
    state, GPUs, GPUs used by jobs and free (a GPU busy with a process gpu-arbiter did not
    start is neither), each job with its GPU indices. Job ids and
    numbers are never cut; when the table is too wide the address goes first, then the
    labels, the price, the last contact and the GPU models."""
    cols = [Column("host", "left"), Column("state", "left"), Column("GPUs", "left", drop=1),
            Column("used"), Column("free"), Column("jobs (GPUs)", "left"),
            Column("last seen", drop=2), Column("$/GPU-h", drop=3),
            Column("site/rack", "left", drop=4), Column("address", "left", drop=5)]
    rows = [[f"{h['fleet']}/{h['host']}", _state(h), _gpus(h), str(h["gpus_used"]),
             str(h["gpus_free"]), _jobs(h),
             "-" if h["last_seen_age_s"] is None else f"{price_age(h['last_seen_age_s'])} ago",
             usd(h["cost_per_gpu_hour_usd"], 3),
             f"{h['labels'].get('site', '-')}/{h['labels'].get('rack', '-')}",
             f"{h['address']}:{h['port']}"] for h in hosts]
    return fitted_table("fleet hosts (used, free: whole GPUs)", cols, rows, width)
