"""The HTTP side of an MCP mount: Host/Origin checks (DNS-rebinding protection), reading a
bounded body, JSON-RPC answers that are always valid JSON, and the RFC 9728 metadata that
points OAuth clients at the bearer token a mount wants."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

from mcp.shared import inbound
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from agentd import logs
from agentd.json_types import JSONValue
from agentd.mcp import jsonrpc, mounts

log = logs.get("agentd.api.mcp_server")

LOCAL_HOSTNAMES = frozenset({"localhost", "127.0.0.1", "[::1]", "::1"})
PROTECTED_RESOURCE_PATH = "/.well-known/oauth-protected-resource"


def principal_label(principal: object) -> str:
    """What the session row and events record for a principal (its `str`, at most 200 chars)."""
    label = principal if isinstance(principal, str) else str(principal)
    return label[:200]


def server_info(toolset: mounts.Servable) -> dict[str, Any]:
    if hasattr(toolset, "server_info"):
        return dict(toolset.server_info())
    return {"name": str(getattr(toolset, "name", "agentd")), "version": "0.0.0"}


def json_answer(body: JSONValue, status: int, headers: dict[str, str] | None = None) -> Response:
    try:
        text = jsonrpc.dumps(body, allow_nan=False)
    except ValueError:
        # A handler produced NaN/Infinity (or a cycle): answer valid JSON, never JavaScript.
        log.error("mcp_server.unserializable_result")
        message = "Internal error: the result is not representable as JSON"
        text = jsonrpc.dumps(jsonrpc.error(request_id(body), jsonrpc.INTERNAL_ERROR, message))
        status = 500
    return Response(text, status_code=status, media_type="application/json", headers=headers)


def rejection(rejection: inbound.InboundLadderRejection, request_id: jsonrpc.RequestId) -> Response:
    body = jsonrpc.error(request_id, rejection.code, rejection.message, rejection.data)
    return json_answer(body, inbound.ERROR_CODE_HTTP_STATUS.get(rejection.code, 400))


def request_id(envelope: object) -> JSONValue:
    return envelope.get("id") if isinstance(envelope, dict) else None


def valid_id(envelope: object) -> jsonrpc.RequestId:
    """The id to echo in an Invalid Request answer: the request's, if it is a valid one."""
    ident = request_id(envelope)
    return ident if isinstance(ident, str | int) and not isinstance(ident, bool) else None


async def read_body(request: Request, limit: int) -> bytes | None:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        return None
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def split_host(host: str) -> tuple[str, str | None]:
    """`name[:port]` → (lower-case name, port); IPv6 keeps its brackets."""
    host = host.strip().lower()
    if host.startswith("["):
        name, _, rest = host.partition("]")
        return name + "]", rest[1:] if rest.startswith(":") else None
    name, sep, port = host.rpartition(":")
    return (name, port) if sep and port.isdigit() else (host, None)


def host_allowed(host: str | None, allowed: tuple[str, ...]) -> bool:
    if not host:
        return False
    name, port = split_host(host)
    if name in LOCAL_HOSTNAMES:
        return True
    for entry in allowed:
        want_name, want_port = split_host(entry.removesuffix(":*"))
        if want_name == name and (want_port is None or want_port == port):
            return True
    return False


def origin_allowed(origin: str, allowed: tuple[str, ...]) -> bool:
    try:
        parts = urlsplit(origin)
        hostname = parts.hostname
    except ValueError:
        return False
    if hostname in LOCAL_HOSTNAMES:
        return True
    origin = origin.lower().rstrip("/")
    for entry in allowed:
        entry = entry.lower().rstrip("/")
        if entry == origin or (entry.endswith(":*") and origin.startswith(entry[:-1])):
            return True
    return False


def protected_resource_metadata(name: str) -> Callable[[Request], Awaitable[Response]]:
    """OAuth protected-resource metadata (RFC 9728) saying: send a bearer token in the
    `Authorization` header; there is no authorization server to get one from (tokens are
    issued out of band, see docs/mcp-server.md). OAuth-capable clients (the MCP inspector)
    read this instead of guessing an authorization server at the origin."""

    async def metadata(request: Request) -> Response:
        origin = f"{request.url.scheme}://{request.url.netloc}"
        return JSONResponse(
            {
                "resource": f"{origin}/mcp/{name}",
                "resource_name": f"agentd MCP server {name}",
                "bearer_methods_supported": ["header"],
            },
            headers={"Cache-Control": "public, max-age=3600"},
        )

    return metadata


def resource_metadata_url(request: Request, name: str) -> str:
    """Where a 401 points OAuth clients (`WWW-Authenticate: Bearer resource_metadata=...`)."""
    return f"{request.url.scheme}://{request.url.netloc}{PROTECTED_RESOURCE_PATH}/mcp/{name}"
