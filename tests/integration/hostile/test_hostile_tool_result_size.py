"""A tool that answers megabytes: the result is cut to `max_tool_result_bytes`, with a
marker, before it enters the transcript; the loop carries on."""

from __future__ import annotations

import pytest

from agentd.db.pool import Pool, connection
from agentd.engine.lifecycle import Lifecycle
from agentd.mcp.toolset import Toolset
from agentd.registry import AgentRegistry
from agentd.store import loops, messages
from agentd.testing.agents import CalcAgent
from agentd.testing.engine import eventually, fast_settings, running_engine
from agentd.testing.fake_llm import FakeLLM, Reply, Rule, ToolCall

LIMIT = 4096
flood = Toolset("flood")


@flood.tool(description="Answer n characters")
async def blob(n: int) -> str:
    return "✓" * n


class FloodAgent(CalcAgent):
    mcps = [{"name": "flood", "toolset": flood}]


@pytest.mark.parametrize("n", [10, 3 * 1024 * 1024])
async def test_an_oversized_tool_result_is_truncated_with_a_marker(
    pool: Pool, database_url: str, n: int
) -> None:
    registry = AgentRegistry()
    registry.register("flood", FloodAgent)
    settings = fast_settings(max_tool_result_bytes=LIMIT)
    async with FakeLLM() as fake, running_engine(pool, database_url, registry, settings=settings):
        fake.add(
            Rule(
                match=lambda last: last.role == "user",
                reply=Reply(tool_calls=[ToolCall("blob", {"n": n})]),
            )
        )
        fake.add(Rule(match=lambda last: last.role == "tool", reply=Reply(content="Noted.")))
        loop = await Lifecycle(pool, registry, settings).start(
            agent="flood", message="flood me", state={"llm": fake.base_url}
        )

        async def done() -> bool:
            async with connection(pool) as conn:
                row = await loops.get(conn, loop_id=loop.id)
            return row is not None and row.status == "completed"

        await eventually(done, within=20)
        async with connection(pool) as conn:
            rows = await messages.list_(conn, loop_id=loop.id)
    (tool,) = [m for m in rows if m.role == "tool"]
    assert len(tool.content.encode()) <= LIMIT
    if n * 3 > LIMIT:
        assert tool.content.endswith(
            f"[agentd: tool result truncated: {n * 3} bytes, limit {LIMIT}]"
        )
    else:
        assert tool.content == "✓" * n
    assert len(fake.requests[-1].json["messages"][-1]["content"].encode()) <= LIMIT + 100
