"""An MCP server built with the official `mcp` SDK 2.x (stateless 2026-07-28 era and handshake).

`python sdk_server.py --port 0 [--sse]` prints `LISTENING <port>` and serves `/mcp`.
"""

from __future__ import annotations

import argparse
import socket
import sys

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError


def build() -> MCPServer:
    server = MCPServer(name="sdk-peer", version="2.3")

    @server.tool()
    def echo(text: str) -> str:
        """Echo the text back."""
        return text

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.tool()
    def fail(message: str = "boom") -> str:
        """Fail with an isError result."""
        raise ToolError(message)

    return server


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--sse", action="store_true")
    args = parser.parse_args()
    sock = socket.socket()
    sock.bind(("127.0.0.1", args.port))
    app = build().streamable_http_app(json_response=not args.sse)
    print(f"LISTENING {sock.getsockname()[1]}", flush=True)
    sys.stdout.flush()
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
