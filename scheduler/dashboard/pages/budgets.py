"""``/ui/budgets``: each user's budget against what their jobs spent, and the budgets of the
running jobs that have one, with the 80 / 90 / 100 % marks of :mod:`policies.budget`.

A user's limit is :func:`scheduler.budgets.owner_limit` (their user record's ``budget_usd``,
else the daemon config's ``budgets`` entry), their spend ``store.spend.owner_total`` (as of
each job's last reconcile step): the figures ``GET /v1/me`` and ``GET /v1/users`` answer. A
job's spend is its ``derived.cost_usd`` in :func:`scheduler.services.jobs.summary` (``GET
/v1/jobs/{id}``). A user sees their own row and jobs; an admin every user's (those with a
user record or a config budget) and every job's.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse

from policies.budget import THRESHOLDS
from scheduler.budgets import owner_limit
from scheduler.checkpoints.objectstore import ObjectStore
from scheduler.dashboard.pages.figures import budget_view
from scheduler.dashboard.render import page_user, render
from scheduler.services import jobs as job_service
from scheduler.store import Store
from scheduler.store.users import Principal

MARKS = [round(t * 100) for t in THRESHOLDS]


def _marks(level: float) -> list[dict[str, Any]]:
    return [{"percent": p, "hit": level * 100 >= p} for p in MARKS]


def user_budgets(store: Store, principal: Principal) -> list[dict[str, Any]]:
    """One row per user the principal may see: ``{user, role, source: user|config|None,
    budget: (see figures.budget_view), marks}``, by name."""
    config = store.spend.settings().users
    records = {u.name: u for u in store.users.list()}
    names = sorted(set(records) | set(config)) if principal.is_admin else [principal.user]
    out = []
    for name in names:
        record = records.get(name)
        limit = owner_limit(store, name)
        source = ("user" if record is not None and record.budget_usd is not None
                  else "config" if name in config else None)
        view = budget_view(store.spend.owner_total(name), limit)
        out.append({"user": name, "role": record.role.value if record else "-",
                    "source": source, "budget": view, "marks": _marks(view["level"])})
    return out


def job_budgets(store: Store, principal: Principal) -> list[dict[str, Any]]:
    """Active jobs the principal may see that have a ``budget_usd``: ``{job, budget, marks}``,
    by job id."""
    jobs = store.jobs.get_many(store.jobs.active_ids())
    out = []
    for job in sorted(jobs.values(), key=lambda j: j.id):
        if job.spec.budget_usd is None or not principal.may_see(job.spec.owner):
            continue
        spent = job_service.summary(job)["derived"]["cost_usd"]
        view = budget_view(spent, job.spec.budget_usd)
        out.append({"job": job, "budget": view, "marks": _marks(view["level"])})
    return out


def router(store: Store, objects: ObjectStore) -> APIRouter:
    """The ``/ui/budgets`` page over ``store``."""
    api = APIRouter()

    @api.get("/ui/budgets", response_class=HTMLResponse)
    def budgets_page(request: Request,
                     principal: Principal = Depends(page_user)) -> HTMLResponse:
        return render(request, "budgets.html", title="Budgets",
                      users=user_budgets(store, principal), jobs=job_budgets(store, principal),
                      marks=MARKS)

    return api
