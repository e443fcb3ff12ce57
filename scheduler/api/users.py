"""Users, their API tokens and the audit stream (:mod:`scheduler.store.users`), by who is
calling: any user reads themselves and manages their own tokens; users and the audit stream
are an admin's.

- ``GET /v1/me``: ``{"user", "role", "token_id", "budget_usd", "spent_usd"}``: who the token
  is; ``budget_usd`` the limit over all their jobs that applies (their user record's, else
  the daemon config's ``budgets`` entry, else ``null``, :func:`scheduler.budgets.owner_limit`),
  ``spent_usd`` what their jobs spent (USD, as of each job's last reconcile step).
- ``GET /v1/users`` (admin): ``[user, ...]`` by name, each ``{"name", "role", "budget_usd",
  "created_at", "spent_usd"}`` (``budget_usd`` as set on the user, ``null`` for none).
- ``POST /v1/users`` (admin, 201): ``{"name", "admin"?: false, "budget_usd"?: USD | null}``;
  answers the user; 409 when the name is taken, 422 naming ``name`` or ``budget_usd``.
- ``PATCH /v1/users/{name}`` (admin): ``{"budget_usd"?: USD | null, "admin"?: bool}``
  (``null`` clears the budget; an absent field is unchanged); answers the user; 404 for an
  unknown user, 409 naming ``admin`` when it would leave no admin.
- ``POST /v1/tokens`` (201): ``{"user"?: NAME, "label"?: ""}``: a new token, shown only in this
  answer ``{"token": "gat_...", "id", "user", "label", "created_at", "revoked_at": null}``; a
  user's own by default; another user's only for an admin (403), an unknown user 404, a label
  over 200 characters 422.
- ``GET /v1/tokens?user=NAME``: token records ``[{"id", "user", "label", "created_at",
  "revoked_at"}]``, oldest first, never a token nor its hash: a user's own (``user`` naming
  another answers 403), an admin's every one or ``user``'s.
- ``POST /v1/tokens/{token_id}/revoke``: the record with ``revoked_at``; idempotent; a user's
  own only (another's answers 404, as an unknown id), any for an admin. Every replica refuses
  the token from the next request on.
- ``GET /v1/audit?after=ID&limit=N&user=NAME&newest=BOOL&refused=BOOL`` (admin):
  ``{"entries": [...], "next": ID}``, state-changing requests after stream id ``after``
  (default ``0``: from the oldest kept), or with ``newest`` the newest ``limit``, oldest
  first, at most ``limit`` (1–1000, default 100), of ``user`` only when given; ``refused``
  reads the requests refused for want of a valid token (a stream of their own). An
  entry: ``{"id", "at", "user"?, "token_id"?, "method", "path", "status", "client"?, "via"}``;
  ``next`` is the last entry's id (``after`` when none): pass it as ``after`` to read on. A
  malformed ``after`` answers 422 naming it.

Refused operations answer :class:`~scheduler.store.users.UserError`'s status with a detail
naming the field (:mod:`scheduler.api.errors`). Every state-changing request here is itself
recorded in the audit stream by :mod:`scheduler.api.limits`.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Response
from pydantic import BaseModel, ConfigDict, Field

from scheduler.api.auth import current_user, require_admin, require_user
from scheduler.budgets import owner_limit
from scheduler.store import Store
from scheduler.store.events import LAST_STREAM_ID, stream_cursor
from scheduler.store.users import (
    AUDIT_READ_MAX,
    TOKEN_LABEL_MAX_CHARS,
    Principal,
    Role,
    User,
    UserError,
)

# Wider than any name or token id the store issues, so a too long one is a 404 (unknown),
# while nothing huge reaches Redis.
NAME_MAX_CHARS = 200


class NewUser(BaseModel):
    """``POST /v1/users``. Strict types: ``true`` is no budget and ``"yes"`` no role."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(max_length=NAME_MAX_CHARS)
    admin: bool = Field(default=False, strict=True)
    budget_usd: float | None = Field(default=None, strict=True, allow_inf_nan=False,
                                     description="USD over all their jobs; null: none")


class UserChange(BaseModel):
    """``PATCH /v1/users/{name}``: only the fields given change."""

    model_config = ConfigDict(extra="forbid")

    budget_usd: float | None = Field(default=None, strict=True, allow_inf_nan=False,
                                     description="USD over all their jobs; null clears it")
    admin: bool | None = Field(default=None, strict=True)


class NewToken(BaseModel):
    """``POST /v1/tokens``."""

    model_config = ConfigDict(extra="forbid")

    user: str | None = Field(default=None, max_length=NAME_MAX_CHARS,
                             description="whose token (default: the caller's)")
    label: str = Field(default="", max_length=TOKEN_LABEL_MAX_CHARS)


def _user_json(store: Store, user: User) -> dict[str, Any]:
    return {**user.to_json(), "spent_usd": store.spend.owner_total(user.name)}


def router(store: Store) -> APIRouter:
    """The user, token and audit routes over ``store``."""
    api = APIRouter(dependencies=[Depends(require_user)])
    users = store.users

    @api.get("/v1/me")
    def me(who: Principal = Depends(current_user)) -> dict[str, Any]:
        return {"user": who.user, "role": who.role.value, "token_id": who.token_id,
                "budget_usd": owner_limit(store, who.user),
                "spent_usd": store.spend.owner_total(who.user)}

    @api.get("/v1/users", dependencies=[Depends(require_admin)])
    def list_users() -> list[dict[str, Any]]:
        return [_user_json(store, u) for u in users.list()]

    @api.post("/v1/users", status_code=201, dependencies=[Depends(require_admin)])
    def add_user(body: NewUser) -> dict[str, Any]:
        user = users.add(body.name, Role.ADMIN if body.admin else Role.USER, body.budget_usd)
        return _user_json(store, user)

    @api.patch("/v1/users/{name}", dependencies=[Depends(require_admin)])
    def change_user(body: UserChange,
                    name: str = Path(..., max_length=NAME_MAX_CHARS)) -> dict[str, Any]:
        given = body.model_fields_set
        if users.get(name) is None:
            raise UserError("name", f"no user {name!r}", status=404)
        role = None if body.admin is None else (Role.ADMIN if body.admin else Role.USER)
        clear = "budget_usd" in given and body.budget_usd is None
        user = users.update(name, role=role, budget_usd=body.budget_usd, clear_budget=clear)
        return _user_json(store, user)

    @api.post("/v1/tokens", status_code=201)
    def create_token(body: NewToken, response: Response,
                     who: Principal = Depends(current_user)) -> dict[str, Any]:
        # The answer holds the token itself: no cache may keep it.
        response.headers["Cache-Control"] = "no-store"
        owner = who.user if body.user is None else body.user
        if owner != who.user and not who.is_admin:
            raise HTTPException(403, "user: only an admin may create a token for another user")
        token, record = users.create_token(owner, body.label)
        return {"token": token, **record.to_json()}

    @api.get("/v1/tokens")
    def list_tokens(user: str | None = Query(None, max_length=NAME_MAX_CHARS),
                    who: Principal = Depends(current_user)) -> list[dict[str, Any]]:
        if not who.is_admin:
            if user is not None and user != who.user:
                raise HTTPException(403, "user: a user may list only their own tokens")
            user = who.user
        return [r.to_json() for r in users.tokens(user)]

    @api.post("/v1/tokens/{token_id}/revoke")
    def revoke_token(token_id: str = Path(..., max_length=NAME_MAX_CHARS),
                     who: Principal = Depends(current_user)) -> dict[str, Any]:
        record = users.token(token_id)
        if record is None or not who.may_see(record.user):
            raise UserError("token_id", f"no token {token_id!r}", status=404)
        return users.revoke(token_id).to_json()

    @api.get("/v1/audit", dependencies=[Depends(require_admin)])
    def audit(after: str = Query("0", max_length=41, description="a stream id ('next')"),
              limit: int = Query(100, ge=1, le=AUDIT_READ_MAX),
              user: str | None = Query(None, max_length=NAME_MAX_CHARS),
              newest: bool = Query(False, description="the newest `limit` entries (still "
                                   "oldest first; `after` is then ignored)"),
              refused: bool = Query(False, description="requests refused for want of a "
                                    "valid token, kept apart")) -> dict[str, Any]:
        try:
            cursor = stream_cursor(after)
        except ValueError as exc:
            raise HTTPException(422, str(exc)) from None
        if newest:
            entries = store.audit.latest(limit, user, refused)[::-1]
            return {"entries": entries, "next": entries[-1]["id"] if entries else cursor}
        if cursor == LAST_STREAM_ID:
            return {"entries": [], "next": cursor}
        entries = store.audit.read(cursor, limit, user, refused)
        return {"entries": entries, "next": entries[-1]["id"] if entries else cursor}

    return api
