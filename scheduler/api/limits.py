"""Request bodies: authorized and size-limited before any handler reads them.

The middleware first asks :class:`scheduler.api.auth.Authenticator` who is calling and
whether they may call the route (no body read), then reads the body itself — chunked bodies included — stopping at the route's limit
with 413, and replays it to the app. So no unauthenticated or oversized body is ever buffered
beyond the limit or parsed.

The limits (bytes), consistent with the spec and bundle limits of
:mod:`core.models.limits` (listed in the README's "Job spec" section):

- ``POST /v1/jobs``: :data:`SUBMIT_BODY_MAX_BYTES`, a bundle at its limit in base64 plus a
  spec; and at most :data:`SUBMIT_JSON_MAX_BYTES` of the body outside base64's alphabet. The
  bundle's base64 has no JSON punctuation, so that bounds the spec's JSON structure: a body
  of millions of tiny values (``{"env": {"a0": "", ...}}``, ~1 GiB of Python objects and 11 s
  of parsing per 96 MiB) is refused before it is parsed.
- ``/v1/agent/…``: :data:`AGENT_BODY_MAX_BYTES` (500 log lines of 4 KiB).
- every other route: :data:`BODY_MAX_BYTES` (a job spec and a few fields).

Bodies being read or handled at once may take at most :data:`BUFFERED_MAX_BYTES` of
memory, each counted as :data:`HANDLING_FACTOR` times its size (a submission is held as bytes,
then as the parsed JSON's text, then decoded and checked: ~2 s and ~300 MB for a 60 MiB
body); a body that would go past it is answered 503 with ``Retry-After``, so parallel large
submissions cannot take the daemon's memory (two at the largest size fit at once). A query string over :data:`QUERY_MAX_BYTES` is a 414
(uvicorn's h11 server caps the request head at 16 KiB, its httptools server does not).
"""

from __future__ import annotations

import json
import logging
import string
from collections.abc import Callable
from dataclasses import dataclass, field

import redis
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from core.models import utcnow
from core.models.limits import BUNDLE_MAX_BYTES, SPEC_MAX_BYTES
from scheduler.api.auth import SAFE_METHODS, Authenticator
from scheduler.store.users import AuditEntry, AuditLog

SPEC_JSON_MAX_BYTES = 4 * SPEC_MAX_BYTES
"""A spec as a client may write it: indented, with ``\\uXXXX`` escapes."""
BODY_MAX_BYTES = SPEC_JSON_MAX_BYTES
SUBMIT_BODY_MAX_BYTES = 4 * -(-BUNDLE_MAX_BYTES // 3) + SPEC_JSON_MAX_BYTES
SUBMIT_JSON_MAX_BYTES = SPEC_JSON_MAX_BYTES
AGENT_BODY_MAX_BYTES = 2 * 1024 * 1024
HANDLING_FACTOR = 5
BUFFERED_MAX_BYTES = 1024 * 1024 * 1024
QUERY_MAX_BYTES = 8 * 1024
log = logging.getLogger(__name__)
_BASE64 = (string.ascii_letters + string.digits + "+/=").encode()


def body_limit(path: str) -> int:
    """The body limit of ``path``, in bytes."""
    if path.startswith("/v1/agent/"):
        return AGENT_BODY_MAX_BYTES
    return SUBMIT_BODY_MAX_BYTES if path == "/v1/jobs" else BODY_MAX_BYTES


def json_limit(path: str) -> int | None:
    """Bytes outside base64's alphabet the body of ``path`` may hold (``None``: no limit)."""
    return SUBMIT_JSON_MAX_BYTES if path == "/v1/jobs" else None


@dataclass
class BodyLimitMiddleware:
    """``limit_for(path)``: max body bytes; ``auth``: who is calling and whether they may
    call the path at all (routes still check roles, owners and agent scopes), and whether a
    cookie session's request carries its CSRF token; ``audit``: where every state-changing
    request is recorded (``None``: nowhere); ``json_limit_for(path)``: max bytes outside
    base64's alphabet, or ``None``; ``buffered_max``: bytes all requests' bodies may hold at
    once."""

    app: ASGIApp
    limit_for: Callable[[str], int]
    auth: Authenticator
    audit: AuditLog | None = None
    json_limit_for: Callable[[str], int | None] = lambda _: None
    buffered_max: int = BUFFERED_MAX_BYTES
    buffered: int = field(default=0, init=False)  # one event loop: no lock needed between awaits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        method = scope.get("method", "GET")
        headers = dict(scope.get("headers") or [])
        try:
            decision = await run_in_threadpool(self.auth.decide, method, path, headers)
        except redis.RedisError:
            # Tokens live in Redis: without it nobody can be told apart, so nothing is served.
            await _answer(send, 503, "the state store (Redis) is unavailable; retry shortly",
                          retry_after=2)
            return
        scope.setdefault("state", {})["principal"] = decision.principal
        if self.audit is None or method in SAFE_METHODS or path.startswith("/v1/agent/"):
            await self._checked(scope, receive, send, decision, path, method, headers)
            return
        # 499 (nginx's "client closed request") when the client left before any answer.
        answered = 499

        async def recording_send(message: Message) -> None:
            nonlocal answered
            if message["type"] == "http.response.start":
                answered = message["status"]
            await send(message)

        try:
            await self._checked(scope, receive, recording_send, decision, path, method, headers)
        except Exception:
            answered = 500 if answered == 499 else answered
            raise
        finally:
            principal = scope["state"].get("principal") or decision.principal
            client = scope.get("client")
            entry = AuditEntry(at=utcnow(), user=principal.user if principal else None,
                               token_id=principal.token_id if principal else None,
                               method=method, path=path, status=answered,
                               client=client[0] if client else None,
                               via=decision.via if principal else "none")
            try:
                await run_in_threadpool(self.audit.record, entry)
            except redis.RedisError:
                log.warning("audit entry not recorded (Redis unavailable): %s %s by %s -> %s",
                            method, path, entry.user or "-", answered)

    async def _checked(self, scope: Scope, receive: Receive, send: Send, decision, path: str,
                       method: str, headers: dict[bytes, bytes]) -> None:
        if decision.refuse is not None:
            await _answer(send, decision.refuse, decision.detail)
            return
        if len(scope.get("query_string") or b"") > QUERY_MAX_BYTES:
            await _answer(send, 414, f"query string over {QUERY_MAX_BYTES} bytes")
            return
        limit = self.limit_for(path)
        declared = headers.get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            await _answer(send, 413, f"request body over {limit} bytes")
            return
        held = 0
        try:
            chunks: list[bytes] = []
            size = 0
            more = True
            while more:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > limit:
                    await _answer(send, 413, f"request body over {limit} bytes")
                    return
                cost = HANDLING_FACTOR * len(chunk)
                if self.buffered + cost > self.buffered_max:
                    await _answer(send, 503, "too many large request bodies at once; retry "
                                             "shortly", retry_after=2)
                    return
                self.buffered += cost
                held += cost
                chunks.append(chunk)
                more = message.get("more_body", False)
            body = b"".join(chunks)
            del chunks
            most = self.json_limit_for(path)
            if most is not None and (outside := len(body.translate(None, _BASE64))) > most:
                await _answer(send, 413, f"spec: the body holds {outside} bytes of JSON besides "
                                         f"bundle_b64's base64; at most {most} (a job spec is "
                                         f"at most {SPEC_MAX_BYTES} bytes as JSON)")
                return
            if not self.auth.csrf_ok(method, path, headers, body):
                await _answer(send, 403, "csrf_token: missing or wrong; a dashboard session's "
                                         "changes need its CSRF token (X-CSRF-Token header or "
                                         "the form's csrf_token field)")
                return
            await self._forward(scope, receive, send, body)
        finally:
            self.buffered -= held

    async def _forward(self, scope: Scope, receive: Receive, send: Send, body: bytes) -> None:
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)



async def _answer(send: Send, status: int, detail: str, retry_after: int | None = None) -> None:
    body = json.dumps({"detail": detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    if retry_after is not None:
        headers.append((b"retry-after", str(retry_after).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
