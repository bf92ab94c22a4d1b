"""HTTP method semantics the router lacks: HEAD wherever GET is, and a 405 that lists every
method of the path.

Starlette answers a wrong method from the first route whose path matches, so `Allow` named
one method where two routes share a path (GET and POST /v1/loops/{id}/messages); FastAPI's
routes do not answer HEAD at all. Routes stay as declared (so /openapi.json is unchanged).
"""

from __future__ import annotations

from starlette.routing import BaseRoute, Match, Router
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentd.api.problems import problem_response


class MethodRouting:
    """Pure ASGI, outside CatchAll: HEAD runs the GET route with the body dropped; a path that
    exists under other methods only is a 405 problem whose `Allow` lists them all."""

    def __init__(self, app: ASGIApp, *, router: Router) -> None:
        self.app = app
        self.router = router

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        allowed = _allowed(self.router.routes, scope)
        if allowed is None:  # a route takes this method, or no route has this path
            await self.app(scope, receive, send)
        elif scope["method"] == "HEAD" and "GET" in allowed:
            await _head(self.app, {**scope, "method": "GET"}, receive, send)
        else:
            methods = ", ".join(sorted(allowed))
            await problem_response(
                405,
                "method-not-allowed",
                "Method not allowed.",
                f"{scope['method']} is not allowed here; use {methods}",
                headers={"Allow": methods},
            )(scope, receive, send)


#: Methods a route of ours may declare; probed to build `Allow`.
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def _matches(routes: list[BaseRoute], scope: Scope) -> Match:
    best = Match.NONE
    for route in routes:
        match, _ = route.matches(scope)
        if match == Match.FULL:
            return match
        if match == Match.PARTIAL:
            best = match
    return best


def _allowed(routes: list[BaseRoute], scope: Scope) -> set[str] | None:
    """None when some route takes this method (or none has the path); else the methods the
    path's routes take. Probed by matching, since FastAPI nests included routers."""
    if _matches(routes, scope) != Match.PARTIAL:
        return None
    allowed = {m for m in METHODS if _matches(routes, {**scope, "method": m}) == Match.FULL}
    if "GET" in allowed:
        allowed.add("HEAD")
    return allowed or None


async def _head(app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
    """Run a GET for a HEAD request: send its status and headers, never its body.

    The first body message completes the response; from then on the server answers
    `receive` with `http.disconnect` (ASGI spec), which ends a stream (SSE) at once.
    Starlette's StreamingResponse listens for that only under ASGI < 2.4 (what uvicorn
    speaks), so that is pinned for the GET; later sends are dropped.
    """
    done = False
    scope = {**scope, "asgi": {**scope.get("asgi", {}), "spec_version": "2.3"}}

    async def headers_only(message: Message) -> None:
        nonlocal done
        if done:
            return
        if message["type"] == "http.response.start":
            await send(message)
        elif message["type"] == "http.response.body":
            done = True
            await send({"type": "http.response.body", "body": b"", "more_body": False})

    await app(scope, receive, headers_only)
