"""`python -m agentd.testing.fake_mcp --port 0` is a usable standalone server."""

from __future__ import annotations

import asyncio
import sys

from agentd.mcp.client import McpClient
from agentd.mcp.config import McpServerConfig


async def test_fake_mcp_cli_prints_its_port_and_serves_mcp() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agentd.testing.fake_mcp", "--port", "0", "--mode", "sse",
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), timeout=10)).decode()
        assert line.startswith("LISTENING ")
        client = McpClient(
            McpServerConfig(name="fake", url=f"http://127.0.0.1:{line.split()[1]}/mcp")
        )
        info = await client.initialize()
        outcome = await client.call_tool("echo", {"text": "cli"}, session_id=info.session_id)
        assert outcome.text == "cli"
    finally:
        proc.terminate()
        await proc.wait()
