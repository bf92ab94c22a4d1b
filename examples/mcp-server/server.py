"""An MCP server for your agent, written with the official `mcp` SDK 2.x (`MCPServer`).

    python examples/mcp-server/server.py --port 9100     # Streamable HTTP at /mcp
    python examples/mcp-server/server.py --stdio         # or over stdin/stdout

Two tools over a small in-memory stock list: `stock` reads, `reserve` changes something.
agentd runs a tool at least once, so `reserve` deduplicates on the idempotency key agentd
sends with every call (`params._meta["agentd/idempotencyKey"]`): a retried call returns
the first answer instead of reserving twice.
"""

from __future__ import annotations

import argparse
from typing import Any

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError

IDEMPOTENCY_KEY = "agentd/idempotencyKey"


def build() -> MCPServer:
    stock_levels = {"A-100": 12, "B-200": 3}
    reservations: dict[str, str] = {}  # idempotency key -> the answer it got

    server = MCPServer(
        name="inventory",
        instructions="Stock levels and reservations of the shop's products, by SKU.",
    )

    @server.tool()
    def stock(sku: str) -> int:
        """How many units of a product are in stock."""
        if sku not in stock_levels:
            raise ToolError(f"unknown SKU {sku!r}; known: {', '.join(sorted(stock_levels))}")
        return stock_levels[sku]

    @server.tool()
    def reserve(sku: str, quantity: int, ctx: Context) -> str:
        """Reserve `quantity` units of a product."""
        meta: dict[str, Any] = dict(ctx.request_context.meta or {})
        key = meta.get(IDEMPOTENCY_KEY)
        if key is not None and key in reservations:
            return reservations[key]  # the same call again: no second reservation
        if stock(sku) < quantity:
            raise ToolError(f"only {stock_levels[sku]} of {sku} left")
        stock_levels[sku] -= quantity
        answer = f"reserved {quantity} of {sku}; {stock_levels[sku]} left"
        if key is not None:
            reservations[key] = answer
        return answer

    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=9100)
    parser.add_argument("--stdio", action="store_true", help="serve over stdin/stdout")
    args = parser.parse_args()
    if args.stdio:
        build().run("stdio")
    else:
        build().run("streamable-http", port=args.port)


if __name__ == "__main__":
    main()
