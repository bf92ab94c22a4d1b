"""A tool call the MCP server refuses as malformed (-32020, -32022, -32600, or -32602 for
arguments that fit the schema) is agentd's bug: counted, logged at error level, and the
tool result says so instead of passing for the tool's answer."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from agentd.db.pool import Pool, connection
from agentd.mcp import jsonrpc
from agentd.mcp.client import McpClient
from agentd.mcp.config import McpServerConfig
from agentd.mcp.port import CallContext, DeliveryResult
from agentd.registry import AgentRegistry
from agentd.store import loops, tool_calls
from agentd.testing import agents
from agentd.testing.engine import eventually, fast_settings, running_engine
from agentd.testing.fake_llm import FakeLLM, Reply, Rule, ToolCall

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
}


class RefusingServer:
    """A transport whose server answers every tools/call with one JSON-RPC error."""

    kind = "custom"

    def __init__(self, code: int, message: str) -> None:
        self.code, self.message = code, message

    async def deliver(
        self,
        payload: dict[str, Any],
        *,
        session_id: str | None = None,
        context: CallContext | None = None,
    ) -> DeliveryResult:
        method = payload.get("method")
        if method == "initialize":
            body = jsonrpc.result(
                payload["id"],
                {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}}, "serverInfo": {}},
            )
        elif method == "tools/list":
            tool = {"name": "weather", "description": "", "inputSchema": SCHEMA}
            body = jsonrpc.result(payload["id"], {"tools": [tool]})
        elif method == "tools/call":
            body = jsonrpc.error(payload["id"], self.code, self.message)
        else:
            body = None
        return DeliveryResult(body=body, session_id=None, raw_request="", raw_response="")


@pytest.mark.parametrize(
    ("code", "arguments", "bug"),
    [
        (-32020, {"city": "Oslo"}, True),
        (-32022, {"city": "Oslo"}, True),
        (-32600, {"city": "Oslo"}, True),
        (-32602, {"city": "Oslo"}, True),  # the arguments fit: the rest of the request did not
        (-32602, {"town": 1}, False),  # the model's arguments do not fit: the tool said no
        (-32603, {"city": "Oslo"}, False),  # the server's own failure
    ],
)
async def test_a_malformed_request_error_is_flagged_as_a_client_bug(
    code: int, arguments: dict[str, Any], bug: bool
) -> None:
    config = McpServerConfig(name="w", transport=RefusingServer(code, "refused"))
    client = McpClient(config)
    info = await client.initialize()
    outcome = await client.call_tool(
        "weather", arguments, session_id=info.session_id, input_schema=SCHEMA
    )
    assert outcome.is_error and outcome.error_code == code
    assert (outcome.client_error == code) is bug
    assert ("bug in agentd" in outcome.text) is bug


@pytest.fixture
async def fake() -> AsyncIterator[FakeLLM]:
    async with FakeLLM() as llm:
        call = ToolCall("weather", {"city": "Oslo"})
        llm.add(Rule(match="weather please", reply=Reply(tool_calls=[call])))
        llm.add(Rule(reply=Reply(content="done")))
        yield llm


async def test_a_client_bug_in_a_loop_is_counted_and_the_result_says_so(
    pool: Pool, database_url: str, fake: FakeLLM
) -> None:
    server = RefusingServer(-32020, "Mcp-Param-Region header is missing")

    class Remote(agents.CalcAgent):
        mcps = [{"name": "w", "transport": server}]

    reg = AgentRegistry()
    reg.register("remote", Remote)
    async with running_engine(pool, database_url, reg, settings=fast_settings()) as engine:
        loop = await engine.lifecycle.start(
            agent="remote", message="weather please", state={"llm": fake.base_url}
        )

        async def settled() -> bool:
            async with connection(pool) as conn:
                row = await loops.get(conn, loop_id=loop.id)
            return row is not None and row.status in ("completed", "failed")

        await eventually(settled, within=20)
        counter = engine.runtime.telemetry.mcp_client_errors
        assert counter.labels(server="w", code="-32020")._value.get() == 1
    async with connection(pool) as conn:
        (call,) = await tool_calls.list_for_loop(conn, loop_id=loop.id)
    assert call.is_success is False
    assert "bug in agentd" in (call.result or "") and "-32020" in (call.result or "")
