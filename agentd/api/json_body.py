"""Read every /v1 request body as JSON, whatever its Content-Type says.

`curl -d '{...}'` sends `application/x-www-form-urlencoded`; the API takes only JSON, so
a body is parsed as JSON whatever the header claims (a body that is not JSON is still a
422 naming it). Admin forms and MCP mounts keep their own content types.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

PREFIX = "/v1/"
_JSON = b"application/json"
#: The scope key holding the Content-Type the client declared, before the rewrite.
DECLARED = "agentd.declared_content_type"


def _is_json(value: bytes) -> bool:
    media = value.split(b";", 1)[0].strip().lower()
    return media == _JSON or media.endswith(b"+json")


class JsonBody:
    """Pure ASGI: rewrites a non-JSON Content-Type of a /v1 request to application/json."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and str(scope.get("path", "")).startswith(PREFIX):
            headers = scope["headers"]
            kept = [(k, v) for k, v in headers if k != b"content-type"]
            declared = [v for k, v in headers if k == b"content-type"]
            original = b", ".join(declared).decode("latin-1")
            if not declared or not all(_is_json(v) for v in declared):
                scope = {**scope, "headers": [*kept, (b"content-type", _JSON)]}
            scope = {**scope, DECLARED: original}
        await self.app(scope, receive, send)


def declared_content_type(scope: Scope) -> str:
    """The Content-Type the client sent ("" if none), whatever JsonBody rewrote it to."""
    value = scope.get(DECLARED)
    if value is None:  # outside /v1 (or without JsonBody): the header as it stands
        return ", ".join(
            v.decode("latin-1") for k, v in scope.get("headers", []) if k == b"content-type"
        )
    return str(value)
