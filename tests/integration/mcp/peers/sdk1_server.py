"""An MCP server built with the official `mcp` SDK 1.x (`FastMCP`, handshake era only).

Runs from its own venv (the 1.x and 2.x SDKs cannot share one): see `sdk1_python` in
tests/integration/mcp/conftest.py. `python sdk1_server.py --port 0 [--sse]` prints
`LISTENING <port>` and serves `/mcp`; `--stdio` serves the same tools over stdio.
"""

from __future__ import annotations

import argparse
import socket
import sys

from mcp.server.fastmcp import FastMCP
from mcp.server.fastmcp.exceptions import ToolError


def build(json_response: bool) -> FastMCP:
    server = FastMCP(name="sdk1-peer", json_response=json_response)

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
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--sse", action="store_true")
    parser.add_argument("--stdio", action="store_true")
    args = parser.parse_args()
    if args.stdio:
        build(json_response=True).run("stdio")
        return
    import uvicorn

    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    app = build(json_response=not args.sse).streamable_http_app()
    print(f"LISTENING {sock.getsockname()[1]}", flush=True)
    sys.stdout.flush()
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
