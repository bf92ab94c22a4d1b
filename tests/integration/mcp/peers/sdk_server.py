"""An MCP server built with the official `mcp` SDK 2.x (stateless 2026-07-28 era and handshake).

`python sdk_server.py --port 0 [--sse]` prints `LISTENING <port>` and serves `/mcp`;
`python sdk_server.py --stdio` serves the same tools over stdio.
"""

from __future__ import annotations

import argparse
import socket
import sys
from typing import Annotated

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

# 2026-07-28 (SEP-2243): the client mirrors this argument into an `Mcp-Param-Region` header,
# and the server refuses a call whose header is missing or disagrees (-32020).
Region = Annotated[str, Field(json_schema_extra={"x-mcp-header": "Region"})]


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
    def forecast(region: Region, days: int = 1) -> str:
        """The weather for a region (the region travels as a header too)."""
        return f"{region}: sunny for {days} day(s)"

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
    parser.add_argument("--stdio", action="store_true")
    args = parser.parse_args()
    if args.stdio:
        build().run("stdio")
        return
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # restart on the same port
    sock.bind(("127.0.0.1", args.port))
    app = build().streamable_http_app(json_response=not args.sse)
    print(f"LISTENING {sock.getsockname()[1]}", flush=True)
    sys.stdout.flush()
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
