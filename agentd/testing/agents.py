"""Agents and toolsets for tests and the demo: a calculator with an approval-gated refund,
and a probe toolset whose calls leave a trace on disk (for tests that kill processes)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentd import Agent
from agentd.mcp.port import CallContext
from agentd.mcp.toolset import Toolset

if TYPE_CHECKING:
    from agentd.engine.context import ToolContext, TurnContext
    from agentd.pipeline.builder import Builder, Handler
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


# --- probe: tools whose every invocation is visible from another process ---------------------
#
# A loop started with state {"probe_dir": "/some/dir"} makes its probe tools append one JSON
# line per invocation to <probe_dir>/invocations.jsonl. While <probe_dir>/hold exists,
# `slow_add` waits (so a test can kill the worker mid-call); while
# <probe_dir>/crash_after_checkpoint exists, ProbeAgent's worker SIGKILLs itself right after
# a tool result is checkpointed and before the tool message and continuation are written;
# while <probe_dir>/crash_after_child_end exists, right after a child loop's last turn
# commits (its end), before the parent's call runs again.

probe = Toolset("probe")
INVOCATIONS = "invocations.jsonl"


def _probe_dir(ctx: CallContext) -> Path | None:
    state = getattr(ctx.loop, "state", None) or {}
    where = state.get("probe_dir")
    return Path(where) if where else None


def _record(where: Path, entry: dict[str, Any]) -> None:
    line = json.dumps({**entry, "pid": os.getpid()}) + "\n"
    fd = os.open(where / INVOCATIONS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def invocations(where: Path) -> list[dict[str, Any]]:
    """The probe tools' invocations recorded under `where`, in order."""
    path = where / INVOCATIONS
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


@probe.tool(description="Add two numbers (slowly while a hold is set)")
async def slow_add(a: int, b: int, ctx: CallContext) -> str:
    where = _probe_dir(ctx)
    if where is not None:
        _record(where, {"tool": "slow_add", "a": a, "b": b, "key": ctx.idempotency_key})
        # The hold is set by another process (the test), so a file is the only signal.
        while (where / "hold").exists():  # noqa: ASYNC110
            await asyncio.sleep(0.02)
    return str(a + b)


class CrashAfterCheckpoint:
    """Test middleware: kill -9 this process between the checkpoint and ResponseCreation.

    Position: after ToolExecution. Fires only while <probe_dir>/crash_after_checkpoint
    exists and the call is checkpointed. Finalizer: no.
    """

    def __init__(self, app: Handler[ToolContext]) -> None:
        self.app = app

    async def __call__(self, ctx: ToolContext) -> None:
        state = ctx.loop.state if ctx.loop is not None else {}
        where = state.get("probe_dir")
        if (
            where
            and ctx.tool_call.executed_at is not None
            and (Path(where) / "crash_after_checkpoint").exists()
        ):
            os.kill(os.getpid(), signal.SIGKILL)
        await self.app(ctx)


class CrashAfterChildEnd:
    """Test middleware: kill -9 this process right after a child loop's finishing turn
    commits, before its parent's call runs again.

    Position: after ResponseParsing. Fires only while <probe_dir>/crash_after_child_end
    exists and the turn just completed a loop that has a parent. Finalizer: no.
    """

    def __init__(self, app: Handler[TurnContext]) -> None:
        self.app = app

    async def __call__(self, ctx: TurnContext) -> None:
        await self.app(ctx)
        loop = ctx.loop
        where = (loop.state or {}).get("probe_dir")
        if (
            where
            and ctx.finished
            and loop.parent_id is not None
            and loop.status == "completed"
            and (Path(where) / "crash_after_child_end").exists()
        ):
            os.kill(os.getpid(), signal.SIGKILL)


class ProbeAgent(CalcAgent):
    """CalcAgent plus the probe toolset and the CrashAfterCheckpoint middleware."""

    mcps = [{"name": "calc", "toolset": calc}, {"name": "probe", "toolset": probe}]

    @classmethod
    def configure_tool_middlewares(cls, builder: Builder) -> None:
        from agentd.pipeline.tool.tool_execution import ToolExecution

        builder.insert_after(ToolExecution, CrashAfterCheckpoint)


class ProbeChild(ProbeAgent):
    """A ProbeAgent plus CrashAfterChildEnd: the child loop of ProbeLead."""

    @classmethod
    def configure_llm_middlewares(cls, builder: Builder) -> None:
        from agentd.pipeline.llm.response_parsing import ResponseParsing

        builder.insert_after(ResponseParsing, CrashAfterChildEnd)


class ProbeLead(ProbeAgent):
    """A ProbeAgent that delegates to `probe_child` (tool `agent__probe_child`), for tests
    that kill workers around child loops (register both under those names)."""

    agent_tools = ["probe_child"]


def registry() -> AgentRegistry:
    from agentd.registry import AgentRegistry

    reg = AgentRegistry()
    reg.register("calc", CalcAgent)
    reg.register("calc_seq", SequentialCalcAgent)
    reg.register("probe", ProbeAgent)
    return reg


class CompactingCalcAgent(CalcAgent):
    """Compacts once a prompt reaches 500 tokens, keeping the last 2 messages verbatim."""

    context_window = 1000
    compaction_threshold = 0.5
    compaction_keep_tail = 2
