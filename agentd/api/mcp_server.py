"""MCP mounts served over HTTP: `McpEndpoint`, one toolset for external MCP clients over
Streamable HTTP at `/mcp/<name>`, and the routes that put each mount there.

The POST body goes to `Toolset.handle`, the same dispatcher the in-process agent path
uses, so a toolset behaves identically locally and remotely. Scope (docs/mcp-server.md):

- handshake era (<= 2025-11-25): `initialize` writes an inbound session row and answers
  `Mcp-Session-Id`; every other request needs that header (400 without, 404 when unknown,
  terminated or another principal's); `DELETE` terminates and keeps the row.
- 2026-07-28 era (`MCP-Protocol-Version: 2026-07-28`): no session; each request is
  validated by the SDK's per-request ladder (`mcp.shared.inbound`) and its events hang off
  a per-principal, per-UTC-day pseudo-session row.
- No SSE: `GET` is 405 and every POST gets one `application/json` answer (202 for
  notifications, which are never dispatched).

Guarantee: every request that reaches a session (real or pseudo) has its event committed
before the answer is sent; a request is dispatched only after Host/Origin and the
authorizer accepted it. Tolerates: concurrent requests on one session (rows are touched,
never locked). Never: holds a database connection while a handler runs; echoes a token.
Routed by `mount_all` (below) at `/mcp/<name>` for each mount `agentd.mcp.mounts` loads.

Modules: `mcp_endpoint` (the ASGI endpoint), `mcp_http` (host and origin checks, bodies,
answers, RFC 9728 metadata); this one routes each mount.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentd.api import mcp_http
from agentd.api.mcp_endpoint import McpEndpoint
from agentd.mcp import mounts
from agentd.mcp.mounts import McpMount

if TYPE_CHECKING:
    from fastapi import FastAPI

    from agentd.api.state import AppState

__all__ = ["McpEndpoint", "mount_all", "mount_one"]


def mount_all(app: FastAPI, state: AppState) -> dict[str, McpMount]:
    """Mount every configured MCP server on `app` at `/mcp/<name>`; returns them by name."""
    mounted = mounts.load_mounts(state.settings)
    for name, mount in mounted.items():
        mount_one(app, name, mount, state)
    return mounted


def mount_one(app: FastAPI, name: str, mount: McpMount, state: AppState) -> None:
    """Route `/mcp/<name>` (with or without a trailing slash, no redirect) to the endpoint."""
    mounts.check_name(name, "mount")
    endpoint = McpEndpoint(name, mount, state)
    for path in (f"/mcp/{name}", f"/mcp/{name}/"):
        # An ASGI app as a Route endpoint receives every HTTP method; it answers 405 itself.
        # (Starlette accepts one there; its annotation names only request handlers.)
        app.add_route(path, endpoint, methods=None, include_in_schema=False)  # type: ignore[arg-type]
    # RFC 9728 metadata at the path-inserted well-known URI of `/mcp/<name>`.
    app.add_route(
        f"{mcp_http.PROTECTED_RESOURCE_PATH}/mcp/{name}",
        mcp_http.protected_resource_metadata(name),
        methods=["GET"],
        include_in_schema=False,
    )
