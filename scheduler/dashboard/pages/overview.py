"""The Overview page (``GET /ui/``): what runs now, what it cost, what it saved, budgets, and
the latest events, all limited to the jobs the user may see (an admin: every job).

- **Active jobs**: every job not finished (state, owner, where, $/h, cost so far), the
  figures of the job summary (:func:`scheduler.services.jobs.summary`).
- **Paying now**: the latest recorded prices of the running placements, summed (USD/h).
- **Spend**: what was billed since 00:00 UTC today and since the first of the month
  (:func:`scheduler.services.costs.billed_since`, ``GET /v1/spend?since=``), whenever the
  jobs were created: compute USD, and what the same hours would have cost all on-demand.
- **Budgets**: each per-user budget (:func:`scheduler.budgets.budget_settings`: a user's own
  ``budget_usd``, else the daemon config's entry) against the owner's spend ledger (:attr:`Store.spend <scheduler.store.Store.spend>`,
  what the controller stops jobs by), with the 80/90/100 % alert levels of
  :mod:`policies.budget`; a user sees only their own line.
- **Recent events**: the event stream's newest events of the visible jobs (newest first),
  followed live by ``static/dashboard.js``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse

from core.models import Job, utcnow
from policies.budget import THRESHOLDS, budget_level
from scheduler.budgets import budget_settings
from scheduler.checkpoints.objectstore import ObjectStore
from scheduler.dashboard.pages.jobs import events_context, job_row
from scheduler.dashboard.render import page_user, render
from scheduler.services import costs as cost_service
from scheduler.services import jobs as job_service
from scheduler.store import Store
from scheduler.store.users import Principal

# The budget bars span 0-110 % of the limit, so spend past the limit still shows.
BAR_MAX_FRACTION = 1.1


def spend(store: Store, principal: Principal, since: datetime, now: datetime) -> dict[str, Any]:
    """What was billed from ``since`` to ``now`` over the jobs ``principal`` may see (``GET
    /v1/spend?since=``, :func:`scheduler.services.costs.billed_since`): ``compute_usd``,
    ``on_demand_usd``, ``savings_usd``, ``savings_pct`` (``None`` without a reference),
    ``jobs`` (jobs billed in the window)."""
    owner = None if principal.is_admin else principal.user
    return cost_service.billed_since(store, since, owner=owner, now=now)


def budget_lines(store: Store, principal: Principal) -> list[dict[str, Any]]:
    """One line per budget ``principal`` may see: ``user``, ``limit_usd``, ``spent_usd``,
    ``pct`` (of the limit), ``level`` (highest alert level reached: 0, 80, 90 or 100) and
    ``bar`` (the spend on the bar's 0-110 % scale, in USD)."""
    limits = budget_settings(store).users
    names = sorted(limits) if principal.is_admin else [n for n in limits if n == principal.user]
    lines = []
    for name in names:
        limit = limits[name]
        spent = store.spend.owner_total(name)
        lines.append({"user": name, "limit_usd": limit, "spent_usd": spent,
                      "pct": 100.0 * spent / limit if limit else None,
                      "level": round(100 * float(budget_level(spent, limit))),
                      "bar": min(spent, limit * BAR_MAX_FRACTION),
                      "bar_max": limit * BAR_MAX_FRACTION})
    return lines


def active_jobs(store: Store, principal: Principal) -> list[Job]:
    """Every job not finished that ``principal`` may see, newest first."""
    jobs = store.jobs.get_many(store.jobs.active_ids()).values()
    return sorted((j for j in jobs if principal.may_see(j.spec.owner)
                   and not j.state.is_terminal()), key=lambda j: j.created_at, reverse=True)


def burn_rate(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """What the visible running placements cost per hour now: ``usd_per_hour`` (the sum of
    their latest recorded prices, :func:`~scheduler.dashboard.pages.jobs.job_row`'s
    ``price``) and ``placements``."""
    running = [r for r in rows if r["running"] and r["price"] is not None]
    return {"usd_per_hour": sum(r["price"] for r in running), "placements": len(running)}


def overview_context(store: Store, principal: Principal) -> dict[str, Any]:
    """What ``overview.html`` shows."""
    now = utcnow()
    day = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    month = day.replace(day=1)
    active = [job_row(job_service.summary(j)) for j in active_jobs(store, principal)]
    return {"active_jobs": active, "burn": burn_rate(active),
            "today": spend(store, principal, day, now),
            "month": spend(store, principal, month, now), "day_start": day,
            "month_start": month, "budgets": budget_lines(store, principal),
            "thresholds": [round(t * 100) for t in THRESHOLDS],
            **events_context(store, principal)}


def router(store: Store, objects: ObjectStore) -> APIRouter:
    """The Overview page over ``store``."""
    pages = APIRouter()

    @pages.get("/ui/", response_class=HTMLResponse)
    def overview(request: Request, principal: Principal = Depends(page_user)) -> HTMLResponse:
        return render(request, "overview.html", title="Overview",
                      **overview_context(store, principal))

    return pages
