"""Agents defined as configuration and as code, reaching tools over every built-in
transport, plus the middleware hooks the reference documents (skip_execution, host-driven
completion)."""

from __future__ import annotations

import sys
from typing import Any

from agentd.db.pool import Pool, connection
from agentd.pipeline.builder import Builder
from agentd.pipeline.llm.network_calling import NetworkCalling
from agentd.pipeline.tool.tool_execution import ToolExecution
from agentd.registry import AgentRegistry
from agentd.store import events, loops, mcp, messages, tool_calls
from agentd.testing import agents
from agentd.testing.engine import eventually, running_engine
from agentd.testing.fake_llm import FakeLLM, Reply, Rule, ToolCall
from agentd.testing.fake_mcp import FakeMcpServer


async def _status(pool: Pool, loop_id: Any) -> str:
    async with connection(pool) as conn:
        row = await loops.get(conn, loop_id=loop_id)
    assert row is not None
    return row.status


async def test_toml_agent_runs_a_loop_end_to_end(pool: Pool, database_url: str) -> None:
    async with FakeLLM() as fake, FakeMcpServer() as server:
        fake.add(
            Rule(
                match=lambda last: last.role == "user",
                reply=Reply(tool_calls=[ToolCall("tools__add", {"a": 2, "b": 40})]),
            )
        )
        fake.add(Rule(match=lambda last: last.role == "tool", reply=Reply(content="42")))
        registry = AgentRegistry()
        registry.load_config(
            {
                "helper": {
                    "base_url": fake.base_url,
                    "model": "m",
                    "system_prompt": "Add.",
                    "streaming": True,
                    "max_steps": 5,
                    "mcps": [
                        {
                            "name": "tools",
                            "url": server.url,
                            "prefix": "tools",
                            "tools": ["add", "echo"],
                        }
                    ],
                }
            }
        )
        async with running_engine(pool, database_url, registry) as engine:
            loop = await engine.lifecycle.start(agent="helper", message="2+40?")
            await eventually(lambda: _is(pool, loop.id, "completed"))
        advertised = {t["function"]["name"] for t in fake.requests[0].json["tools"]}
        assert advertised == {"tools__add", "tools__echo"}  # whitelist and prefix
        assert fake.requests[0].json["messages"][0] == {"role": "system", "content": "Add."}
        (call,) = server.calls()
        assert call.idempotency_key and call.idempotency_key.startswith("agentd:tool_call:")


async def test_one_loop_reaches_http_stdio_and_in_process_tools(
    pool: Pool, database_url: str
) -> None:
    async with FakeLLM() as fake, FakeMcpServer() as server:
        fake.add(
            Rule(
                match=lambda last: last.role == "user",
                reply=Reply(
                    tool_calls=[
                        ToolCall("web__echo", {"text": "over http"}),
                        ToolCall("local__echo", {"text": "over stdio"}),
                        ToolCall("add", {"a": 1, "b": 1}),
                    ]
                ),
            )
        )
        fake.add(Rule(match=lambda last: last.role == "tool", reply=Reply(content="all three")))

        class Everywhere(agents.CalcAgent):
            mcps = [
                {"name": "web", "url": server.url, "prefix": "web"},
                {
                    "name": "local",
                    "command": [sys.executable, "-m", "agentd.testing.fake_mcp", "--stdio"],
                    "prefix": "local",
                    "timeout": 30,
                },
                {"name": "calc", "toolset": agents.calc},
            ]

        registry = AgentRegistry()
        registry.register("everywhere", Everywhere)
        async with running_engine(pool, database_url, registry) as engine:
            loop = await engine.lifecycle.start(
                agent="everywhere", message="go", state={"llm": fake.base_url}
            )
            await eventually(lambda: _is(pool, loop.id, "completed"), within=30)
        async with connection(pool) as conn:
            sessions = {s["mcp_name"]: s for s in await mcp.list_sessions(conn, loop_id=loop.id)}
            calls = await tool_calls.list_for_loop(conn, loop_id=loop.id)
            evs = await events.list_(conn, loop_id=loop.id, limit=500)
            msgs = await messages.list_(conn, loop_id=loop.id)
        assert {k: v["transport_kind"] for k, v in sessions.items()} == {
            "web": "http",
            "local": "stdio",
            "calc": "local",
        }
        assert sorted(c.result or "" for c in calls) == ["2", "over http", "over stdio"]
        assert all(c.is_success for c in calls)
        wire = [e for e in evs if e.name.startswith("mcp.")]
        for call in calls:  # every tool call has its own wire log
            assert any(e.tool_call_id == call.id and e.request_data for e in wire), call.name
        assert [m.role for m in msgs].count("tool") == 3


class Policy(agents.CalcAgent):
    """Refuses `refund` without running it; finishes after tool results with no LLM call."""

    @classmethod
    def configure_tool_middlewares(cls, builder: Builder) -> None:  # type: ignore[type-arg]
        builder.insert_before(ToolExecution, NoRefunds)

    @classmethod
    def configure_llm_middlewares(cls, builder: Builder) -> None:  # type: ignore[type-arg]
        builder.insert_before(NetworkCalling, DoneAfterTools)


class NoRefunds:
    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, ctx: Any) -> None:
        if ctx.tool_call.name == "add" and ctx.tool_call.arguments.get("a") == 666:
            ctx.skip_execution("Policy: that number is not allowed.", success=False)
        await self.app(ctx)


class DoneAfterTools:
    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, ctx: Any) -> None:
        if ctx.loop.step_count > 0:
            await ctx.complete_loop(reason="completed_by_host")
            return
        await self.app(ctx)


async def test_skip_execution_and_host_driven_completion(pool: Pool, database_url: str) -> None:
    agents.CALLS.clear()
    async with FakeLLM() as fake:
        fake.add(
            Rule(
                reply=Reply(
                    tool_calls=[
                        ToolCall("add", {"a": 666, "b": 1}),
                        ToolCall("add", {"a": 1, "b": 1}),
                    ]
                )
            )
        )
        registry = AgentRegistry()
        registry.register("policy", Policy)
        async with running_engine(pool, database_url, registry) as engine:
            loop = await engine.lifecycle.start(
                agent="policy", message="go", state={"llm": fake.base_url}
            )
            await eventually(lambda: _is(pool, loop.id, "completed"))
        async with connection(pool) as conn:
            row = await loops.get(conn, loop_id=loop.id)
            calls = await tool_calls.list_for_loop(conn, loop_id=loop.id)
        assert row is not None and row.status_reason == "completed_by_host"
        assert row.step_count == 1  # the host completion is not a turn
        assert len(fake.requests) == 1  # and bought no second LLM request
        refused = next(c for c in calls if c.arguments and c.arguments["a"] == 666)
        assert refused.is_success is False and "Policy" in (refused.result or "")
        assert [c["a"] for c in agents.CALLS] == [1]  # the refused call never ran


async def _is(pool: Pool, loop_id: Any, status: str) -> bool:
    return await _status(pool, loop_id) == status
