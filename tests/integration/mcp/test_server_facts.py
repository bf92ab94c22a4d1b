"""What one process remembers per MCP server URL, across jobs: one `server/discover` probe,
the negotiated version on every later request, and a re-probe only after a session error.
The memory is the engine's `McpHub` (runtime.mcp); two hubs share nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from agentd.db.pool import Pool, connection
from agentd.mcp.client import McpClient
from agentd.mcp.config import McpServerConfig
from agentd.mcp.http import HttpTransport
from agentd.mcp.hub import McpHub
from agentd.registry import AgentRegistry
from agentd.store import loops
from agentd.testing import agents
from agentd.testing.engine import eventually, fast_settings, running_engine
from agentd.testing.fake_llm import FakeLLM, Reply, Rule, ToolCall
from agentd.testing.fake_mcp import FakeMcpServer


@pytest.fixture
async def fake() -> AsyncIterator[FakeLLM]:
    async with FakeLLM() as llm:
        llm.add(
            Rule(match="add please", reply=Reply(tool_calls=[ToolCall("add", {"a": 2, "b": 3})]))
        )
        llm.add(Rule(reply=Reply(content="done")))
        yield llm


def registry_for(url: str) -> AgentRegistry:
    class Remote(agents.CalcAgent):
        mcps = [{"name": "web", "url": url}]

    reg = AgentRegistry()
    reg.register("remote", Remote)
    return reg


async def completed(pool: Pool, ids: list[Any]) -> bool:
    async with connection(pool) as conn:
        rows = [await loops.get(conn, loop_id=i) for i in ids]
    return all(r is not None and r.status == "completed" for r in rows)


async def test_ten_loops_against_one_server_probe_it_once(
    pool: Pool, database_url: str, fake: FakeLLM
) -> None:
    async with FakeMcpServer() as server:
        reg = registry_for(server.url)
        async with running_engine(pool, database_url, reg, settings=fast_settings()) as engine:
            started = [
                await engine.lifecycle.start(
                    agent="remote", message="add please", state={"llm": fake.base_url}
                )
                for _ in range(10)
            ]
            await eventually(lambda: completed(pool, [s.id for s in started]), within=30)
            probes = engine.runtime.mcp.facts.of(server.url).probes
        assert len(server.calls("tools/call")) == 10  # ten tool-call jobs, each its own transport
        assert len(server.calls("server/discover")) == 1
        assert probes == 1
        after_initialize = [
            r for r in server.requests if r.method not in ("server/discover", "initialize")
        ]
        assert after_initialize
        assert {r.headers.get("mcp-protocol-version") for r in after_initialize} == {"2025-11-25"}


async def test_a_lost_session_re_probes_once_and_the_call_goes_through() -> None:
    async with FakeMcpServer() as server:
        config = McpServerConfig(name="web", url=server.url, timeout=10)
        hub = McpHub()  # one process: each job builds its own client
        info = await McpClient(config, hub=hub).initialize()
        for _ in range(3):
            outcome = await McpClient(config, hub=hub).call_tool(
                "add", {"a": 1, "b": 1}, session_id=info.session_id
            )
            assert outcome.structured == {"sum": 2}
        assert len(server.calls("server/discover")) == 1
        server.expire_sessions()  # a restart: the next request gets 404
        outcome = await McpClient(config, hub=hub).call_tool(
            "add", {"a": 1, "b": 2}, session_id=info.session_id
        )
        assert outcome.structured == {"sum": 3} and outcome.session_id != info.session_id
        assert len(server.calls("server/discover")) == 2
        assert len(server.calls("initialize")) == 2


async def test_transports_of_a_hub_without_a_client_share_one_per_origin() -> None:
    async with FakeMcpServer() as server:
        hub = McpHub()
        first, second = HttpTransport(server.url), HttpTransport(server.url + "?x=1")
        other = HttpTransport("http://127.0.0.2:9/mcp")
        assert hub.client_for(first.url) is hub.client_for(second.url)
        assert hub.client_for(first.url) is not hub.client_for(other.url)
        assert McpHub().client_for(first.url) is not hub.client_for(first.url)
        info = await McpClient(McpServerConfig(name="a", url=server.url), hub=hub).initialize()
        await McpClient(McpServerConfig(name="b", url=server.url), hub=hub).call_tool(
            "add", {"a": 1, "b": 1}, session_id=info.session_id
        )
        assert not hub.client_for(server.url).is_closed
        # Engine-less clients, each with a hub of its own, learn alone: two probes.
        for _ in range(2):
            await McpClient(McpServerConfig(name="c", url=server.url)).initialize()
        assert len(server.calls("server/discover")) == 3
