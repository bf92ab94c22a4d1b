"""A tool middleware that raises fails the loop and marks the call failed, with what failed
it, whether it crashed before the tool ran or after the result was checkpointed."""

from __future__ import annotations

from typing import Any

import pytest

from agentd.db.pool import Pool, connection
from agentd.pipeline.builder import Builder
from agentd.pipeline.tool.tool_execution import ToolExecution
from agentd.registry import AgentRegistry
from agentd.store import jobs, loops, tool_calls
from agentd.testing import agents
from agentd.testing.engine import eventually, running_engine
from agentd.testing.fake_llm import FakeLLM, Reply, Rule, ToolCall


class Boom:
    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, ctx: Any) -> None:
        raise RuntimeError("audit sink unreachable")


class CrashBefore(agents.CalcAgent):
    @classmethod
    def configure_tool_middlewares(cls, builder: Builder) -> None:  # type: ignore[type-arg]
        builder.insert_before(ToolExecution, Boom)


class CrashAfter(agents.CalcAgent):
    @classmethod
    def configure_tool_middlewares(cls, builder: Builder) -> None:  # type: ignore[type-arg]
        builder.insert_after(ToolExecution, Boom)  # after the checkpoint, before the result


@pytest.mark.parametrize(("agent", "executed"), [(CrashBefore, False), (CrashAfter, True)])
async def test_a_crashing_tool_middleware_marks_the_call_failed_with_the_loop(
    pool: Pool, database_url: str, agent: type[agents.CalcAgent], executed: bool
) -> None:
    agents.CALLS.clear()
    registry = AgentRegistry()
    registry.register("crashy", agent)
    async with FakeLLM() as fake:
        fake.add(Rule(reply=Reply(tool_calls=[ToolCall("add", {"a": 1, "b": 2})])))
        async with running_engine(pool, database_url, registry) as engine:
            loop = await engine.lifecycle.start(
                agent="crashy", message="go", state={"llm": fake.base_url}
            )

            async def failed() -> Any:
                async with connection(pool) as conn:
                    row = await loops.get(conn, loop_id=loop.id)
                return row if row is not None and row.status == "failed" else None

            row = await eventually(failed)
    assert row.error_message and "audit sink unreachable" in row.error_message
    async with connection(pool) as conn:
        (call,) = await tool_calls.list_for_loop(conn, loop_id=loop.id)
        assert await jobs.list_for_loop(conn, loop_id=loop.id) == []
    assert call.status == ("completed" if executed else "failed")
    assert call.is_success is executed  # a checkpointed result is kept as it was
    assert call.error_message is not None and "audit sink unreachable" in call.error_message
    assert call.lease_token is None and call.leased_until is None
    assert len(agents.CALLS) == (1 if executed else 0)
