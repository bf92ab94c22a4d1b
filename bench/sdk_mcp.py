"""The bench's MCP server built with the official `mcp` SDK 2.x instead of agentd's fake.

`python -m bench.sdk_mcp --port 0` prints `LISTENING <port>` and serves the `add` tool of
`agentd.testing.fake_mcp` at `/mcp` over Streamable HTTP (JSON responses), on uvicorn:
what a user who writes their tool server with the SDK runs. B11's `--mcp sdk` uses it, so
the figures also hold against a server that is not ours.
"""

from __future__ import annotations

import argparse
import socket

from mcp.server import MCPServer


def build() -> MCPServer:
    server = MCPServer(name="bench-sdk", version="1")

    @server.tool()
    def add(a: int, b: int) -> dict[str, int]:
        """Add two integers."""
        return {"sum": a + b}

    return server


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(("127.0.0.1", args.port))
    app = build().streamable_http_app(json_response=True)
    print(f"LISTENING {sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(app, log_level="warning", lifespan="on", backlog=1024)
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
