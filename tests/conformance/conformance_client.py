"""A client for `@modelcontextprotocol/conformance client`: the harness passes the URL last."""

from __future__ import annotations

import asyncio
import sys

from agentd.mcp.client import McpClient
from agentd.mcp.config import McpServerConfig


async def main(url: str) -> None:
    client = McpClient(McpServerConfig(name="conformance", url=url, timeout=10))
    info = await client.initialize()
    tools, _ = await client.list_tools(info.session_id)
    for tool in tools:
        arguments = {k: 1 for k in tool.input_schema.get("required", [])}
        await client.call_tool(tool.remote_name, arguments, session_id=info.session_id)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[-1]))
