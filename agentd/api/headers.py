"""Security headers on every response: no framing (clickjacking of the admin's buttons), no
MIME sniffing, no referrer leaking loop ids, and no caching of API answers."""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

#: Every response. `frame-ancestors` is the modern form of X-Frame-Options; both are sent
#: because older browsers know only the latter.
COMMON = {
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
#: The admin UI: scripts and styles come from /admin/static only (its pages use inline
#: `style` attributes and `onchange` handlers, hence no stricter script/style policy);
#: forms post to the admin itself and nothing embeds it.
ADMIN_CSP = "frame-ancestors 'none'; form-action 'self'; base-uri 'none'; object-src 'none'"
#: Everything else (JSON, problem documents, the API explorer at /docs, which loads from a CDN).
OTHER_CSP = "frame-ancestors 'none'"


class SecurityHeaders:
    """Pure ASGI: adds the headers above unless the route set its own value."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope.get("path", "")
        admin = path == "/admin" or path.startswith("/admin/")
        api = path.startswith("/v1/")

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in COMMON.items():
                    headers.setdefault(name, value)
                headers.setdefault("Content-Security-Policy", ADMIN_CSP if admin else OTHER_CSP)
                if api:  # loop data and transcripts: never kept by a browser or proxy cache
                    headers.setdefault("Cache-Control", "no-store")
            await send(message)

        await self.app(scope, receive, with_headers)
