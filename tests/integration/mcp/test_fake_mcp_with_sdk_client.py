"""The fake MCP server that ships with agentd (`python -m agentd.testing.fake_mcp`) serves
the official SDK 2.x client in both eras: with sessions (the client falls back to
`initialize`) and `--stateless` (2026-07-28: `server/discover`, then results the client
validates, which must carry resultType, serverInfo and the list caching hints)."""

from __future__ import annotations

from typing import Literal

import pytest
from mcp import Client

from agentd.mcp import eras
from agentd.testing.fake_mcp import FakeMcpServer


@pytest.mark.parametrize("stateless", [False, True], ids=["sessions", "stateless"])
@pytest.mark.parametrize("mode", ["json", "sse"])
async def test_sdk_client_lists_and_calls_tools(
    stateless: bool, mode: Literal["json", "sse"]
) -> None:
    async with FakeMcpServer(mode=mode, stateless=stateless) as server:
        async with Client(f"http://127.0.0.1:{server.port}/mcp") as client:
            listed = await client.list_tools()
            assert "echo" in {t.name for t in listed.tools}
            result = await client.call_tool("echo", {"text": "hi"})
        assert not result.is_error
        assert "hi" in str(result.content[0])
        methods = [r.body.get("method") for r in server.requests if isinstance(r.body, dict)]
        if stateless:
            assert methods[0] == "server/discover" and "initialize" not in methods
            modern = [r for r in server.requests if r.headers.get("mcp-protocol-version")]
            assert modern and all(
                r.headers["mcp-protocol-version"] == eras.MODERN_VERSION for r in modern
            )
        else:
            assert "initialize" in methods
