"""Probes and scrapes make no HTTP server spans (`AGENTD_TRACE_EXCLUDED_PATHS`).

An app instrumented by OpenTelemetry (opentelemetry-instrument's FastAPI or ASGI
instrumentation, or a host's `FastAPIInstrumentor`) wraps itself in a middleware that
makes a server span per request: with a load balancer probing /healthz and Prometheus
scraping /metrics, those were most of the spans a backend stored. This wrapper sits
outside the app object, so outside any such middleware, and runs those paths with HTTP
instrumentation suppressed (the instrumentations' own switch), whatever installed it.
"""

from __future__ import annotations

from collections.abc import Iterable

from starlette.types import ASGIApp, Receive, Scope, Send

from agentd.observability import tracing


class Untraced:
    """Pure ASGI: requests to `paths` (exact, a trailing slash ignored) run untraced."""

    def __init__(self, app: ASGIApp, *, paths: Iterable[str]) -> None:
        self.app = app
        self.paths = frozenset(p.rstrip("/") or "/" for p in paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = str(scope.get("path", ""))
        if scope["type"] == "http" and (path.rstrip("/") or "/") in self.paths:
            with tracing.http_untraced():
                await self.app(scope, receive, send)
            return
        await self.app(scope, receive, send)


def wrap(app: ASGIApp, paths: Iterable[str]) -> ASGIApp:
    """`app` as served: wrapped when there is something to exclude and tracing can run."""
    paths = list(paths)
    if not paths or not tracing.ENABLED:
        return app
    return Untraced(app, paths=paths)
