"""Users, their API tokens, and the audit stream, in Redis.

- A **user** has a name (a job spec's ``owner`` shape: 1-63 lowercase letters, digits, ``.``,
  ``_``, ``-``), a role (``admin``: everything; ``user``: their own jobs) and optionally a
  budget in USD that applies to all jobs they own.
- A **token** is ``gat_<id>_<secret>``: ``id`` (12 hex characters) names it in listings and
  revocation; only the SHA-256 of the whole token is stored, so a Redis dump reveals none.
  Tokens are 256-bit random values, so a plain hash (no key stretching) is safe to store.
  Revoking marks the record; every replica reads the record on every request, so a revoked
  token is refused at once everywhere.
- The **bootstrap token** is the daemon's own API token (``GA_HOME/api-token`` or
  ``GA_API_TOKEN``): :meth:`UserStore.register_bootstrap` makes it a token of the admin user
  ``admin`` (idempotent, and a revoked bootstrap token stays revoked across restarts).
- The **audit stream** ``ga:audit`` holds one entry per state-changing request of an
  authenticated user (who, what, when, from where), capped at :data:`AUDIT_MAXLEN` entries.
  Requests refused for want of a valid token go to ``ga:audit:refused`` (capped at
  :data:`AUDIT_REFUSED_MAXLEN`), so that anyone able to reach the port cannot push the
  users' trail out of its stream. Text fields are stored with control characters escaped
  (``\x1b`` as the four characters ``\x1b``), so no entry can forge a line or move a
  terminal's cursor where it is shown.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import unicodedata
from dataclasses import asdict, dataclass
from datetime import datetime
from enum import Enum
from typing import Any

import redis

from core.models import utcnow
from scheduler.store import keys
from scheduler.store.connection import RedisClient

USER_NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?\Z")
BOOTSTRAP_USER = "admin"
TOKEN_ID_CHARS = 12
TOKEN_LABEL_MAX_CHARS = 200
TOKENS_PER_USER_MAX = 100
"""Valid (unrevoked) tokens a user may hold at once."""
REVOKED_KEPT_PER_USER = 100
"""Revoked token records kept per user (for listings); older ones are forgotten."""
AUDIT_MAXLEN = 100_000
AUDIT_REFUSED_MAXLEN = 10_000
AUDIT_READ_MAX = 1000
_TOKEN_RE = re.compile(r"^gat_([0-9a-f]{12})_[A-Za-z0-9_-]{20,100}\Z")


class Role(str, Enum):
    """What a user may do: ``admin`` everything, ``user`` their own jobs and the market."""

    ADMIN = "admin"
    USER = "user"


@dataclass(frozen=True)
class User:
    """A user. ``budget_usd``: their per-user budget (USD, > 0) or ``None`` (the daemon
    config's ``budgets`` entry for the name applies, if any)."""

    name: str
    role: Role
    budget_usd: float | None
    created_at: datetime

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "role": self.role.value, "budget_usd": self.budget_usd,
                "created_at": self.created_at.isoformat()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> User:
        return cls(data["name"], Role(data["role"]), data.get("budget_usd"),
                   datetime.fromisoformat(data["created_at"]))


@dataclass(frozen=True)
class TokenRecord:
    """A stored token (never the token itself). ``revoked_at`` is ``None`` while it is valid."""

    id: str
    user: str
    label: str
    created_at: datetime
    revoked_at: datetime | None = None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["created_at"] = self.created_at.isoformat()
        data["revoked_at"] = self.revoked_at.isoformat() if self.revoked_at else None
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TokenRecord:
        revoked = data.get("revoked_at")
        return cls(data["id"], data["user"], data.get("label", ""),
                   datetime.fromisoformat(data["created_at"]),
                   datetime.fromisoformat(revoked) if revoked else None)


@dataclass(frozen=True)
class Principal:
    """Who a request is from: a user (by name and role) and the token they used."""

    user: str
    role: Role
    token_id: str

    @property
    def is_admin(self) -> bool:
        return self.role is Role.ADMIN

    def may_see(self, owner: str) -> bool:
        """Whether this principal may read or act on a job owned by ``owner``."""
        return self.is_admin or owner == self.user


class UserError(ValueError):
    """A refused user or token operation; ``field`` names the offending input and
    ``status`` is the HTTP status the API answers (404 unknown, 409 conflict, 422 invalid)."""

    def __init__(self, field: str, message: str, status: int = 422) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.status = status


def token_hash(token: str) -> str:
    """SHA-256 (hex) of a token as stored."""
    return hashlib.sha256(b"gpu-arbiter token\0" + token.encode("utf-8", "replace")).hexdigest()


def check_user_name(name: str, field: str = "name") -> str:
    if not isinstance(name, str) or not USER_NAME_RE.match(name):
        raise UserError(field, "must be 1-63 lowercase letters, digits, '.', '_' or '-', "
                               "starting and ending with a letter or digit")
    return name


def _check_budget(budget_usd: float | None) -> float | None:
    if budget_usd is None:
        return None
    if isinstance(budget_usd, bool) or not isinstance(budget_usd, int | float) \
            or not (0 < float(budget_usd) < 1e12):
        raise UserError("budget_usd", "must be a number of USD above 0 (and below 1e12)")
    return float(budget_usd)


class UserStore:
    """Users and tokens over one Redis client (see the module docstring for the layout).
    Every transaction here is over the ``{auth}`` keys only (one hash slot on a cluster)."""

    def __init__(self, client: RedisClient) -> None:
        self._r = client

    # users
    def add(self, name: str, role: Role = Role.USER, budget_usd: float | None = None) -> User:
        """Create a user. Raises :class:`UserError` (409) when the name is taken, (422) when
        the name or budget is invalid."""
        user = User(check_user_name(name), Role(role), _check_budget(budget_usd), utcnow())
        if not self._r.hsetnx(keys.USERS, name, json.dumps(user.to_json())):
            raise UserError("name", f"user {name!r} already exists", status=409)
        return user

    def get(self, name: str) -> User | None:
        raw = self._r.hget(keys.USERS, name)
        return User.from_json(json.loads(raw)) if raw else None

    def list(self) -> list[User]:
        """Every user, by name."""
        users = [User.from_json(json.loads(v)) for v in self._r.hvals(keys.USERS)]
        return sorted(users, key=lambda u: u.name)

    def update(self, name: str, *, role: Role | None = None,
               budget_usd: float | None = None, clear_budget: bool = False) -> User:
        """Change a user's role or budget (``clear_budget``: no per-user budget). Raises
        :class:`UserError` (404) for an unknown user, (409) when it would leave no admin;
        the check and the change are one transaction, so two admins demoting each other at
        once cannot both succeed."""
        budget = _check_budget(budget_usd)

        def change(pipe: redis.client.Pipeline) -> User:
            raw = pipe.hget(keys.USERS, name)
            if not raw:
                raise UserError("name", f"no user {name!r}", status=404)
            user = User.from_json(json.loads(raw))
            if role is not None and Role(role) is not Role.ADMIN \
                    and user.role is Role.ADMIN and self._admins(pipe) == [name]:
                raise UserError("admin", f"{name!r} is the last admin; make another "
                                         "user an admin first", status=409)
            user = User(user.name, Role(role) if role is not None else user.role,
                        None if clear_budget else (budget if budget is not None
                                                   else user.budget_usd),
                        user.created_at)
            pipe.multi()
            pipe.hset(keys.USERS, name, json.dumps(user.to_json()))
            return user

        return self._r.transaction(change, keys.USERS, value_from_callable=True)

    @staticmethod
    def _admins(client: Any) -> list[str]:
        return sorted(u.name for u in (User.from_json(json.loads(v))
                                       for v in client.hvals(keys.USERS))
                      if u.role is Role.ADMIN)

    def budgets(self) -> dict[str, float]:
        """Per-user budgets set on users (name → USD)."""
        return {u.name: u.budget_usd for u in self.list() if u.budget_usd is not None}

    # tokens
    def create_token(self, user: str, label: str = "") -> tuple[str, TokenRecord]:
        """A new token for ``user``: ``(token, record)``. The token is returned once and never
        stored. Raises :class:`UserError` (404) for an unknown user, (422) for a label over
        :data:`TOKEN_LABEL_MAX_CHARS` characters."""
        if not isinstance(label, str) or len(label) > TOKEN_LABEL_MAX_CHARS:
            raise UserError("label", f"must be text of at most {TOKEN_LABEL_MAX_CHARS} characters")
        if printable(label) != label:
            raise UserError("label", "must not hold control characters (newlines, escapes)")
        if self.get(user) is None:
            raise UserError("user", f"no user {user!r}", status=404)
        records = self.tokens(user)
        if sum(r.revoked_at is None for r in records) >= TOKENS_PER_USER_MAX:
            raise UserError("user", f"{user!r} has {TOKENS_PER_USER_MAX} valid tokens, the "
                                    "most a user may hold; revoke one first", status=409)
        self._forget_revoked(records)
        token_id = secrets.token_hex(TOKEN_ID_CHARS // 2)
        token = f"gat_{token_id}_{secrets.token_urlsafe(32)}"
        record = TokenRecord(token_id, user, label, utcnow())
        self._put(token_hash(token), record)
        return token, record

    def _put(self, digest: str, record: TokenRecord) -> bool:
        """Store ``record`` under ``digest`` unless a record is there already."""

        def put(pipe: redis.client.Pipeline) -> bool:
            if pipe.hexists(keys.TOKENS, digest):
                return False
            pipe.multi()
            pipe.hset(keys.TOKENS, digest, json.dumps(record.to_json()))
            pipe.hset(keys.TOKEN_IDS, record.id, digest)
            return True

        return self._r.transaction(put, keys.TOKENS, value_from_callable=True)

    def _forget_revoked(self, records: list[TokenRecord]) -> None:
        """Drop the oldest revoked records past :data:`REVOKED_KEPT_PER_USER` (their hashes
        refuse nothing more than an unknown token would)."""
        revoked = [r for r in records if r.revoked_at is not None]
        for record in revoked[:max(0, len(revoked) - REVOKED_KEPT_PER_USER)]:
            digest = self._r.hget(keys.TOKEN_IDS, record.id)
            with self._r.pipeline(transaction=True) as pipe:
                if digest:
                    pipe.hdel(keys.TOKENS, digest)
                pipe.hdel(keys.TOKEN_IDS, record.id)
                pipe.execute()

    def register_bootstrap(self, token: str) -> TokenRecord:
        """Make the daemon's API token a token of the admin user ``admin`` (created if
        missing). Idempotent across restarts and replicas; a revoked bootstrap token stays
        revoked (rotate it by giving the daemon a new ``GA_API_TOKEN`` or api-token file).
        When no admin is left (Redis edited by hand), ``admin`` is made an admin again, so
        the daemon's own token can always manage users."""
        now = utcnow()
        admin = User(BOOTSTRAP_USER, Role.ADMIN, None, now)
        self._r.hsetnx(keys.USERS, BOOTSTRAP_USER, json.dumps(admin.to_json()))
        if not self._admins(self._r):
            self.update(BOOTSTRAP_USER, role=Role.ADMIN)
        digest = token_hash(token)
        record = TokenRecord(digest[:TOKEN_ID_CHARS], BOOTSTRAP_USER, "daemon API token", now)
        self._put(digest, record)
        return self.token(record.id) or record

    def token(self, token_id: str) -> TokenRecord | None:
        digest = self._r.hget(keys.TOKEN_IDS, token_id)
        raw = self._r.hget(keys.TOKENS, digest) if digest else None
        return TokenRecord.from_json(json.loads(raw)) if raw else None

    def tokens(self, user: str | None = None) -> list[TokenRecord]:
        """Token records (of ``user``, or all), oldest first; revoked ones included."""
        records = [TokenRecord.from_json(json.loads(v)) for v in self._r.hvals(keys.TOKENS)]
        return sorted((r for r in records if user is None or r.user == user),
                      key=lambda r: (r.created_at, r.id))

    def revoke(self, token_id: str) -> TokenRecord:
        """Revoke a token by id (idempotent). Raises :class:`UserError` (404) when unknown."""

        def revoke(pipe: redis.client.Pipeline) -> TokenRecord:
            digest = pipe.hget(keys.TOKEN_IDS, token_id)
            raw = pipe.hget(keys.TOKENS, digest) if digest else None
            if not raw:
                raise UserError("token_id", f"no token {token_id!r}", status=404)
            record = TokenRecord.from_json(json.loads(raw))
            if record.revoked_at is not None:
                return record
            record = TokenRecord(record.id, record.user, record.label, record.created_at,
                                 utcnow())
            pipe.multi()
            pipe.hset(keys.TOKENS, digest, json.dumps(record.to_json()))
            return record

        return self._r.transaction(revoke, keys.TOKENS, keys.TOKEN_IDS,
                                   value_from_callable=True)

    def resolve(self, token: str) -> Principal | None:
        """The principal ``token`` authenticates, or ``None`` (unknown, revoked, or its user
        is gone). One Redis round trip for the token and one for the user."""
        if not token or len(token) > 512:
            return None
        raw = self._r.hget(keys.TOKENS, token_hash(token))
        if not raw:
            return None
        record = TokenRecord.from_json(json.loads(raw))
        if record.revoked_at is not None:
            return None
        user = self.get(record.user)
        if user is None:
            return None
        return Principal(user.name, user.role, record.id)


def looks_like_user_token(token: str) -> bool:
    """Whether ``token`` has the shape of a token :meth:`UserStore.create_token` issues
    (the bootstrap token may have any shape)."""
    return bool(_TOKEN_RE.match(token))


@dataclass(frozen=True)
class AuditEntry:
    """One state-changing request. ``user``/``token_id`` are ``None`` when the request was
    not authenticated; ``client`` is the peer address as the server saw it."""

    at: datetime
    user: str | None
    token_id: str | None
    method: str
    path: str
    status: int
    client: str | None
    via: str  # "bearer", "cookie" or "none"


def printable(text: str, most: int = 1000) -> str:
    """``text`` cut to ``most`` characters, with every control or format character (newlines,
    ESC, bidi overrides) written as a ``\\xNN``/``\\uNNNN`` escape."""
    out = []
    for ch in text[:most]:
        if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp") or ch == "\\":
            out.append(ch.encode("unicode_escape").decode("ascii") if ch != "\\" else "\\\\")
        else:
            out.append(ch)
    return "".join(out)


class AuditLog:
    """The capped ``ga:audit`` stream, and ``ga:audit:refused`` for refused anonymous
    requests. Each entry is one XADD to one stream (no transaction with the ``{auth}``
    keys)."""

    def __init__(self, client: RedisClient) -> None:
        self._r = client

    def record(self, entry: AuditEntry) -> None:
        fields = {"at": entry.at.isoformat(), "method": printable(entry.method, 20),
                  "path": printable(entry.path), "status": str(entry.status), "via": entry.via}
        for name in ("user", "token_id", "client"):
            value = getattr(entry, name)
            if value:
                fields[name] = printable(value, 200)
        if entry.user is None:
            self._r.xadd(keys.AUDIT_REFUSED, fields, maxlen=AUDIT_REFUSED_MAXLEN,
                         approximate=True)
        else:
            self._r.xadd(keys.AUDIT, fields, maxlen=AUDIT_MAXLEN, approximate=True)

    @staticmethod
    def _row(entry_id: Any, fields: dict[Any, Any]) -> dict[str, Any]:
        row = {(k if isinstance(k, str) else k.decode()):
               (v if isinstance(v, str) else v.decode()) for k, v in fields.items()}
        row["id"] = entry_id if isinstance(entry_id, str) else entry_id.decode()
        row["status"] = int(row.get("status", 0))
        return row

    @staticmethod
    def _stream(refused: bool) -> str:
        return keys.AUDIT_REFUSED if refused else keys.AUDIT

    def latest(self, count: int = 100, user: str | None = None,
               refused: bool = False) -> list[dict[str, Any]]:
        """The newest ``count`` entries (≤ :data:`AUDIT_READ_MAX`), of ``user`` only when
        given, newest first, shaped as :meth:`read`'s; ``refused``: of the refused
        anonymous requests' stream."""
        count = max(1, min(int(count), AUDIT_READ_MAX))
        out: list[dict[str, Any]] = []
        cursor = "+"
        while len(out) < count:
            batch = self._r.xrevrange(self._stream(refused), max=cursor,
                                      count=AUDIT_READ_MAX if user else count)
            if not batch:
                break
            for entry_id, fields in batch:
                row = self._row(entry_id, fields)
                cursor = f"({row['id']}"
                if user is None or row.get("user") == user:
                    out.append(row)
                    if len(out) >= count:
                        break
        return out

    def read(self, after: str = "0", limit: int = 100, user: str | None = None,
             refused: bool = False) -> list[dict[str, Any]]:
        """Entries after stream id ``after`` (oldest first), at most ``limit``
        (≤ :data:`AUDIT_READ_MAX`), of ``user`` only when given; ``refused``: of the refused
        anonymous requests' stream. Each is a dict of the entry's fields plus ``id`` (the
        cursor) and ``status`` as int."""
        limit = max(1, min(int(limit), AUDIT_READ_MAX))
        out: list[dict[str, Any]] = []
        cursor = after
        while len(out) < limit:
            batch = self._r.xrange(self._stream(refused), min=f"({cursor}",
                                   count=AUDIT_READ_MAX if user else limit)
            if not batch:
                break
            for entry_id, fields in batch:
                row = self._row(entry_id, fields)
                cursor = row["id"]
                if user is not None and row.get("user") != user:
                    continue
                out.append(row)
                if len(out) >= limit:
                    break
        return out
