"""Agents and toolsets for tests and the demo: a calculator with an approval-gated refund."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentd import Agent
from agentd.mcp.port import CallContext
from agentd.mcp.toolset import Toolset

if TYPE_CHECKING:
    from agentd.registry import AgentRegistry

calc = Toolset("calc")
CALLS: list[dict[str, Any]] = []


@calc.tool(description="Add two numbers")
async def add(a: int, b: int, ctx: CallContext) -> str:
    CALLS.append({"tool": "add", "a": a, "b": b, "key": ctx.idempotency_key})
    return str(a + b)


@calc.tool(description="Refund money", requires_approval=True)
async def refund(amount: int, ctx: CallContext) -> str:
    CALLS.append({"tool": "refund", "amount": amount, "key": ctx.idempotency_key})
    return f"refunded {amount}"


class CalcAgent(Agent):
    system_prompt = "You add numbers."
    model = "fake-model"
    mcps = [{"name": "calc", "toolset": calc}]

    @property
    def base_url(self) -> str:  # type: ignore[override]
        return str(self.state["llm"])

    @property
    def streaming(self) -> bool:  # type: ignore[override]
        return bool(self.state.get("stream", False))


class SequentialCalcAgent(CalcAgent):
    sequential_tool_calls = True


def registry() -> AgentRegistry:
    from agentd.registry import AgentRegistry

    reg = AgentRegistry()
    reg.register("calc", CalcAgent)
    reg.register("calc_seq", SequentialCalcAgent)
    return reg
