"""A stale generation (a worker that lost its turn to pause → resume) can write nothing."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from agentd.agent import LoopView
from agentd.db.pool import Pool, connection, transaction
from agentd.engine.context import ToolContext, TurnContext
from agentd.engine.lifecycle import Lifecycle
from agentd.engine.runtime import Runtime
from agentd.errors import FenceLost
from agentd.llm.types import LLMResponse, ToolCallRequest
from agentd.pipeline.llm.error_handling import ErrorHandling
from agentd.pipeline.llm.response_parsing import ResponseParsing
from agentd.pipeline.tool.response_creation import ResponseCreation
from agentd.registry import AgentRegistry
from agentd.states import LoopStatus, TransitionReason
from agentd.store import jobs, tool_calls
from agentd.store.models import Loop
from agentd.testing import agents, factories
from agentd.testing.engine import fast_settings


async def _noop(ctx: Any) -> None:
    return None


@pytest.fixture
def registry() -> AgentRegistry:
    return agents.registry()


@pytest.fixture
def runtime(pool: Pool, registry: AgentRegistry) -> Runtime:
    return Runtime(
        settings=fast_settings(),
        pool=pool,
        registry=registry,
        llm=None,  # type: ignore[arg-type]  # no turn here reaches the network
    )


async def everything(pool: Pool, loop_id: uuid.UUID) -> dict[str, Any]:
    """Every row a turn could write, to compare before and after."""
    async with connection(pool) as conn:
        return {
            table: [
                dict(r)
                for r in await conn.fetch(
                    f"SELECT * FROM {table} WHERE loop_id = $1 ORDER BY id", loop_id
                )
            ]
            for table in ("messages", "tool_calls", "jobs", "events", "mcp_sessions")
        } | {"loop": dict(await conn.fetchrow("SELECT * FROM loops WHERE id = $1", loop_id))}


async def claim(pool: Pool) -> tuple[uuid.UUID, Loop]:
    token = uuid.uuid4()
    async with connection(pool) as conn:
        got = await jobs.claim_llm(
            conn, execution_token=token, worker_id=uuid.uuid4(), default_lease=12.0
        )
    assert got is not None and got.loop is not None
    return token, got.loop


async def test_stale_turn_after_pause_and_resume_cannot_write(
    pool: Pool, registry: AgentRegistry, runtime: Runtime
) -> None:
    lifecycle = Lifecycle(pool, registry, runtime.settings)
    started = await lifecycle.start(agent="calc", message="hi", state={"llm": "http://x"})
    stale_token, stale_loop = await claim(pool)
    await lifecycle.pause(started.id)
    await lifecycle.resume(started.id)
    current_token, _ = await claim(pool)
    before = await everything(pool, started.id)

    async with transaction(pool) as conn:
        assert await factories.finalize_answer(conn, started.id, stale_token) is None

    ctx = TurnContext(runtime=runtime, loop=stale_loop, execution_token=stale_token)
    ctx.agent = registry.instantiate("calc", ctx.loop_view)
    ctx.response = LLMResponse(
        content="a stale answer",
        tool_calls=[ToolCallRequest(id="c1", name="add", arguments={"a": 1, "b": 2})],
    )
    with pytest.raises(FenceLost):
        await ResponseParsing(_noop)(ctx)
    with pytest.raises(FenceLost):
        await ctx.complete_loop()

    async def crash(ctx: TurnContext) -> None:
        raise RuntimeError("the model exploded")

    await ErrorHandling(crash)(ctx)  # failing the loop is fenced too: swallowed, no write
    assert not ctx.finished

    assert await everything(pool, started.id) == before
    async with transaction(pool) as conn:
        done = await factories.finalize_answer(conn, started.id, current_token)
    assert done is not None and done.loop.status == LoopStatus.COMPLETED
    assert done.loop.status_reason == TransitionReason.MODEL_FINISHED


async def test_stale_tool_lease_after_pause_and_resume_cannot_checkpoint_or_respond(
    pool: Pool, registry: AgentRegistry, runtime: Runtime
) -> None:
    lifecycle = Lifecycle(pool, registry, runtime.settings)
    stale_lease = uuid.uuid4()
    async with transaction(pool) as conn:
        loop = await factories.loop(conn, status="running", step_count=1)
        call = await factories.tool_call(
            conn, loop, status="running", lease_token=stale_lease, leased_in=30
        )
    await lifecycle.pause(loop.id)
    resumed = await lifecycle.resume(loop.id)
    assert resumed.execution_token != loop.execution_token
    before = await everything(pool, loop.id)

    async with transaction(pool) as conn:
        assert (
            await tool_calls.checkpoint(
                conn,
                tool_call_id=call.id,
                lease_token=stale_lease,
                result="3",
                structured=None,
                is_success=True,
                error_message=None,
                duration=0.1,
            )
            is None
        )
    # Even a stale job that (somehow) holds a checkpointed row cannot answer or continue.
    checkpointed = await as_if_checkpointed(pool, call.id)
    ctx = ToolContext(
        runtime=runtime,
        tool_call=checkpointed,
        lease_token=stale_lease,
        generation=loop.execution_token,  # type: ignore[arg-type]
    )
    ctx.agent = registry.instantiate("calc", resumed_view(resumed))
    with pytest.raises(FenceLost):
        await ResponseCreation(_noop)(ctx)
    assert await everything(pool, loop.id) == before

    # The resumed generation's job claims the call with a fresh lease.
    async with connection(pool) as conn:
        got = await jobs.claim_tool(
            conn, lease_token=uuid.uuid4(), worker_id=uuid.uuid4(), default_lease=10.0
        )
    assert got is not None and got.tool_call is not None and got.tool_call.id == call.id
    assert got.generation == resumed.execution_token


async def as_if_checkpointed(pool: Pool, tool_call_id: int):  # type: ignore[no-untyped-def]
    """The call as a stale job would see it had its checkpoint landed (in memory only)."""
    async with connection(pool) as conn:
        row = await tool_calls.get(conn, tool_call_id=tool_call_id)
    assert row is not None
    return dataclasses.replace(row, executed_at=datetime.now(UTC), result="3", is_success=True)


def resumed_view(loop: Loop) -> LoopView:
    return LoopView(id=loop.id, state=loop.state, step_count=loop.step_count)
