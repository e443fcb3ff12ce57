"""``/ui/users`` (admins only; a user gets a 403 page): users with their role, budget and
spend, their tokens, and the latest entries of the audit stream; forms to add a user, create
a token for one (shown once, on the answer page: only its hash is stored) and revoke one.

The figures and the changes are the users API's (:mod:`scheduler.api.users`): the budget is
:func:`scheduler.budgets.owner_limit`, the spend ``store.spend.owner_total``, the changes
``store.users.add`` / ``create_token`` / ``revoke``. Every form posts the session's CSRF
token (checked by the API's middleware before the route runs) and every post checks the
admin role again; the middleware records each post in the audit stream.

Routes: ``GET /ui/users``; ``POST /ui/users`` (form ``name``, ``admin``, ``budget_usd``: 303
back, or the page with the error naming the field); ``POST /ui/users/{name}/tokens`` (form
``label``: the page showing the new token); ``POST /ui/tokens/{token_id}/revoke`` (303 back).
"""

from __future__ import annotations

import secrets
from typing import Any

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from scheduler.budgets import owner_limit
from scheduler.checkpoints.objectstore import ObjectStore
from scheduler.dashboard.pages.figures import FormError, budget_view, optional_number
from scheduler.dashboard.pages.fleet import denied
from scheduler.dashboard.render import page_user, render
from scheduler.store import Store, keys
from scheduler.store.users import Principal, Role, UserError

AUDIT_SHOWN = 100
FORM_ONCE_TTL_S = 3600
NAME_MAX_CHARS = 200


def user_rows(store: Store) -> list[dict[str, Any]]:
    """Every user with their budget (``figures.budget_view``), its source and their tokens."""
    config = store.spend.settings().users
    tokens: dict[str, list] = {}
    for record in store.users.tokens():
        tokens.setdefault(record.user, []).append(record)
    out = []
    for user in store.users.list():
        source = ("user" if user.budget_usd is not None
                  else "config" if user.name in config else None)
        out.append({"user": user, "source": source, "tokens": tokens.get(user.name, []),
                    "budget": budget_view(store.spend.owner_total(user.name),
                                          owner_limit(store, user.name))})
    return out


def router(store: Store, objects: ObjectStore) -> APIRouter:
    """The ``/ui/users`` page and its forms over ``store``."""
    api = APIRouter()

    def page(request: Request, status: int = 200, **context: Any) -> HTMLResponse:
        context.setdefault("error", None)
        context.setdefault("form", {})
        return render(request, "users.html", status, title="Users", users=user_rows(store),
                      audit=store.audit.latest(AUDIT_SHOWN), audit_shown=AUDIT_SHOWN,
                      once=secrets.token_urlsafe(16), **context)

    @api.get("/ui/users", response_class=HTMLResponse)
    def users_page(request: Request, principal: Principal = Depends(page_user)) -> HTMLResponse:
        if not principal.is_admin:
            return denied(request, "manage users and tokens")
        return page(request)

    @api.post("/ui/users")
    def add_user(request: Request, principal: Principal = Depends(page_user),
                 name: str = Form("", max_length=NAME_MAX_CHARS), admin: str | None = Form(None),
                 budget_usd: str | None = Form(None)) -> Response:
        if not principal.is_admin:
            return denied(request, "add a user")
        form = {"name": name, "admin": bool(admin), "budget_usd": budget_usd or ""}
        try:
            budget = optional_number(budget_usd, "budget_usd")
            store.users.add(name.strip(), Role.ADMIN if admin else Role.USER, budget)
        except FormError as exc:
            return page(request, 422, error=str(exc), form=form)
        except UserError as exc:
            return page(request, exc.status, error=str(exc), form=form)
        return RedirectResponse("/ui/users", status_code=303)

    @api.post("/ui/users/{name}/tokens")
    def create_token(request: Request, name: str, principal: Principal = Depends(page_user),
                     label: str = Form("", max_length=NAME_MAX_CHARS),
                     once: str = Form("", max_length=64)) -> Response:
        if not principal.is_admin:
            return denied(request, "create a token for a user")
        # The page that shows the token answers the POST itself (the token cannot be kept
        # to show it after a redirect), so a reload would post again: the form's one-time
        # key lets the repeat find the token already made instead of making another.
        if once and not store.redis.set(keys.form_once(once), "", nx=True, ex=FORM_ONCE_TTL_S):
            made = store.redis.get(keys.form_once(once))
            return page(request, 409, error=f"token {made or '(being made)'} was already "
                        "created by this form and shown once; revoke it below if it was not "
                        "copied, and create another")
        try:
            token, record = store.users.create_token(name, label)
        except UserError as exc:
            if once:
                store.redis.delete(keys.form_once(once))
            return page(request, exc.status, error=str(exc))
        if once:
            store.redis.set(keys.form_once(once), record.id, ex=FORM_ONCE_TTL_S)
        return render(request, "users_token.html", title="New token", token=token,
                      record=record)

    @api.post("/ui/tokens/{token_id}/revoke")
    def revoke_token(request: Request, token_id: str,
                     principal: Principal = Depends(page_user)) -> Response:
        if not principal.is_admin:
            return denied(request, "revoke a token")
        try:
            store.users.revoke(token_id[:NAME_MAX_CHARS])
        except UserError as exc:
            return page(request, exc.status, error=str(exc))
        return RedirectResponse("/ui/users", status_code=303)

    return api
