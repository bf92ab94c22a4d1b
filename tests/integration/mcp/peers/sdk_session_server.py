"""An MCP server built with the official `mcp` SDK 2.x that speaks only the handshake era,
with (default) or without (`--stateless`) sessions: which `session = "auto"` shares.

`python sdk_session_server.py --port 0 [--stateless]` prints `LISTENING <port>` and serves
`/mcp`. Its `grow` tool adds a tool and says so with `notifications/tools/list_changed` on
the call's own SSE stream.
"""

from __future__ import annotations

import argparse
import socket
import sys
from typing import Any

from mcp import types
from mcp.server import MCPServer
from mcp.server.mcpserver import Context


def build() -> MCPServer:
    server = MCPServer(name="sdk-session-peer", version="1.0")

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.tool()
    async def grow(ctx: Context) -> str:
        """Add the tool `shout` and tell the client its tools changed."""

        def shout(text: str) -> str:
            """Shout the text."""
            return text.upper()

        server.add_tool(shout)
        await ctx.session.send_notification(
            types.ToolListChangedNotification(), related_request_id=ctx.request_id
        )
        return "grown"

    return server


def handshake_only(app: Any) -> Any:
    """Refuse the 2026-07-28 era (its `server/discover` probe), so clients initialize."""

    async def asgi(scope: Any, receive: Any, send: Any) -> None:
        headers = dict(scope.get("headers") or [])
        if scope["type"] == "http" and headers.get(b"mcp-protocol-version") == b"2026-07-28":
            await send({"type": "http.response.start", "status": 400, "headers": []})
            await send({"type": "http.response.body", "body": b"handshake era only"})
            return
        await app(scope, receive, send)

    return asgi


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--stateless", action="store_true")
    args = parser.parse_args()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    app = build().streamable_http_app(stateless_http=args.stateless)
    print(f"LISTENING {sock.getsockname()[1]}", flush=True)
    sys.stdout.flush()
    config = uvicorn.Config(handshake_only(app), log_level="warning", lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
