"""Security headers on every answer of the app (pages, static files and API alike).

- ``Content-Security-Policy``: scripts, styles, images and connections from this origin only,
  no inline script or style attribute, no plugins, no framing, forms post to this origin.
  FastAPI's own API docs (``/docs``, ``/redoc``) load Swagger UI from its CDN and keep
  the other headers only.
- ``X-Frame-Options: DENY`` (older browsers), ``X-Content-Type-Options: nosniff``,
  ``Referrer-Policy: same-origin`` (no page address leaves for another site; ``no-referrer``
  would make Chromium send ``Origin: null`` on the dashboard's own forms), and
  ``Cache-Control: no-store`` on pages (they show account data).
"""

from __future__ import annotations

from dataclasses import dataclass

from starlette.types import ASGIApp, Message, Receive, Scope, Send

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; font-src 'self'; form-action 'self'; frame-ancestors 'none'; "
       "base-uri 'none'; object-src 'none'")
HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
]


@dataclass
class SecurityHeadersMiddleware:
    app: ASGIApp

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        page = path.startswith("/ui") and not path.startswith("/ui/static/")
        headers = HEADERS[1:] if path.startswith(("/docs", "/redoc")) else HEADERS

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = {name.lower() for name, _ in message.get("headers", [])}
                extra = [h for h in headers if h[0] not in present]
                if page and b"cache-control" not in present:
                    extra.append((b"cache-control", b"no-store"))
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.app(scope, receive, with_headers)
