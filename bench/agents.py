"""Bench agents: a zero-cost in-process model and toolset (B1/B2/B3/B5), and an HTTP agent
whose model and MCP server come from the loop's state (B1e, B4, B6, concurrency, control)."""

from __future__ import annotations

import time
import uuid
from typing import Any

from agentd import Agent
from agentd.llm.types import LLMResponse, ToolCallRequest, Usage
from agentd.mcp.toolset import Toolset

zero = Toolset("zero")
COUNTS = {"llm": 0, "tool": 0}


@zero.tool(description="Do nothing, instantly")
async def noop() -> str:
    COUNTS["tool"] += 1
    return "ok"


class ZeroLLM:
    """`complete()` answers at once: a tool call until the loop has `rounds` assistant
    messages, then a final answer. No network, no dialect rendering."""

    def __init__(self, rounds: int = 20, tools_per_turn: int = 1) -> None:
        self.rounds = rounds
        self.tools_per_turn = tools_per_turn

    async def complete(
        self, request: Any, *, dialect: str = "zero", on_delta: Any = None, **_: Any
    ) -> Any:
        COUNTS["llm"] += 1
        n = sum(1 for m in request.messages if m.role == "assistant")
        calls = []
        if n < self.rounds:
            calls = [
                ToolCallRequest(id=f"c{uuid.uuid4().hex[:10]}", name="noop", arguments={})
                for _ in range(self.tools_per_turn)
            ]
        return LLMResponse(
            content="" if calls else "done",
            tool_calls=calls,
            finish_reason="tool_calls" if calls else "stop",
            usage=Usage(1, 1),
            duration=0.0,
        )


class ZeroAgent(Agent):
    system_prompt = "bench"
    dialect = "zero"
    base_url = "http://zero.invalid"
    model = "zero"
    max_steps = 10_000
    mcps = [{"name": "zero", "toolset": zero}]


class HttpAgent(Agent):
    """Model at state['llm'] (FakeLLM), MCP server at state['mcp'] (fake_mcp), if given."""

    system_prompt = "bench"
    model = "fake-model"
    max_steps = 10_000

    @property
    def base_url(self) -> str:  # type: ignore[override]
        return str(self.state["llm"])

    @property
    def streaming(self) -> bool:  # type: ignore[override]
        return bool(self.state.get("stream", False))

    def mcp_servers(self) -> list[Any]:
        mcp = self.state.get("mcp")
        return [{"name": "fake", "url": mcp}] if mcp else []


def registry() -> Any:
    from agentd.registry import AgentRegistry

    reg = AgentRegistry()
    reg.register("zero", ZeroAgent)
    reg.register("http", HttpAgent)
    from agentd.testing.agents import ProbeAgent

    reg.register("probe", ProbeAgent)
    return reg


class Stamp:
    """Terminal middleware (after the finalizer): records when a turn's commit returned."""

    sink: dict[str, list[float]] = {}

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, ctx: Any) -> None:
        await self.app(ctx)
        key = (
            str(getattr(ctx, "loop", None) and ctx.loop.id)
            if hasattr(ctx, "execution_token")
            else f"t{ctx.tool_call.id}"
        )
        Stamp.sink.setdefault(key, []).append(time.perf_counter())
