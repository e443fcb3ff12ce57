"""Request bodies: authorized and size-limited before any handler reads them.

The middleware first checks the bearer token against what the route needs (cheap, no body
read), then reads the body itself — chunked bodies included — stopping at the route's limit
with 413, and replays it to the app. So no unauthenticated or oversized body is ever buffered
beyond the limit or parsed.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class BodyLimitMiddleware:
    """``limit_for(path)``: max body bytes; ``authorized(path, token)``: whether the bearer
    token (``None`` when absent) may call ``path`` at all (handlers still check the scope)."""

    def __init__(self, app: ASGIApp, limit_for: Callable[[str], int],
                 authorized: Callable[[str, str | None], bool]) -> None:
        self.app = app
        self.limit_for = limit_for
        self.authorized = authorized

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        headers = dict(scope.get("headers") or [])
        if not self.authorized(path, _bearer(headers.get(b"authorization"))):
            await _answer(send, 401, "missing or invalid bearer token")
            return
        limit = self.limit_for(path)
        declared = headers.get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            await _answer(send, 413, f"request body over {limit} bytes")
            return
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
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


def _bearer(header: bytes | None) -> str | None:
    if not header:
        return None
    scheme, _, token = header.decode("latin-1").partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


async def _answer(send: Send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
