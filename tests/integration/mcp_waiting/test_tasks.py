"""Long-running MCP tasks are polled durably by the engine, with no worker held between polls."""

from __future__ import annotations

import uuid

from waiting_world import World, build_elicit, build_tasks, serve

from agentd.db.pool import Pool, connection
from agentd.engine.service import Engine
from agentd.registry import AgentRegistry
from agentd.store import jobs, loops, messages, tool_calls
from agentd.store.models import ToolCall
from agentd.testing.engine import eventually, running_engine
from agentd.testing.fake_llm import FakeLLM, Reply, Rule
from agentd.testing.fake_llm import ToolCall as FakeCall


def script(fake: FakeLLM, call: FakeCall) -> None:
    fake.add(Rule(match=lambda last: last.role == "user", reply=Reply(tool_calls=[call])))
    fake.add(Rule(match=lambda last: last.role == "tool", reply=Reply(content="done")))


async def completed(pool: Pool, loop_id: uuid.UUID) -> bool:
    async with connection(pool) as conn:
        row = await loops.get(conn, loop_id=loop_id)
    return row is not None and row.status == "completed"


async def only_call(pool: Pool, loop_id: uuid.UUID) -> ToolCall | None:
    async with connection(pool) as conn:
        calls = await tool_calls.list_for_loop(conn, loop_id=loop_id)
    return calls[0] if calls else None


async def tool_results(pool: Pool, loop_id: uuid.UUID) -> list[str]:
    async with connection(pool) as conn:
        rows = await messages.list_(conn, loop_id=loop_id)
    return [m.content or "" for m in rows if m.role == "tool"]


def between_polls(pool: Pool, engine: Engine, loop_id: uuid.UUID):  # type: ignore[no-untyped-def]
    """The task runs, nobody holds the call: no lease, no worker busy, a poll job queued."""

    async def check() -> ToolCall | None:
        call = await only_call(pool, loop_id)
        if call is None or call.task_id is None or call.lease_token is not None:
            return None
        async with connection(pool) as conn:
            queued = await jobs.list_for_loop(conn, loop_id=loop_id)
        if engine.worker.in_flight or [j["tool_call_id"] for j in queued] != [call.id]:
            return None
        return call

    return check


async def test_a_task_is_polled_to_completion_without_holding_a_worker(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    script(fake_llm, FakeCall("slow", {"n": 7}))
    async with (
        serve(build_tasks(world := World()), world),
        running_engine(pool, database_url, registry) as engine,
    ):
        loop = await engine.lifecycle.start(
            agent="world", message="go", state={"llm": fake_llm.base_url, "mcp": world.url}
        )
        call = await eventually(between_polls(pool, engine, loop.id))
        assert call.status == "waiting" and call.executed_at is None
        assert (call.task_state or {}).get("status") == "working"
        polls = world.methods.count("tasks/get")
        await eventually(lambda: _more_polls(world, polls))  # polled again, still no result
        report = await engine.reaper.sweep_once()
        assert report.stalled_tool_calls == 0
        world.gate.set()
        await eventually(lambda: completed(pool, loop.id))
    assert await tool_results(pool, loop.id) == ["slow result 7"]
    assert fake_llm.requests[-1].json["messages"][-1]["content"] == "slow result 7"
    (asked,) = world.calls
    assert asked["task"] == {"ttl": 86_400_000}
    assert world.methods.count("tasks/result") == 1
    done = await only_call(pool, loop.id)
    assert done is not None and done.is_success is True and done.task_id == call.task_id


async def _more_polls(world: World, than: int) -> bool:
    return world.methods.count("tasks/get") > than


async def test_a_failed_task_is_an_error_the_model_sees(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    script(fake_llm, FakeCall("slow", {"n": 1}))
    async with (
        serve(build_tasks(world := World(fail_task=True)), world),
        running_engine(pool, database_url, registry) as engine,
    ):
        loop = await engine.lifecycle.start(
            agent="world", message="go", state={"llm": fake_llm.base_url, "mcp": world.url}
        )
        await eventually(between_polls(pool, engine, loop.id))
        world.gate.set()
        await eventually(lambda: completed(pool, loop.id))
    (result,) = await tool_results(pool, loop.id)
    assert "the batch crashed" in result
    done = await only_call(pool, loop.id)
    assert done is not None and done.is_success is False


async def test_a_server_without_tasks_is_called_normally(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    script(fake_llm, FakeCall("echo", {"text": "right away"}))
    async with (
        serve(build_elicit(world := World()), world),
        running_engine(pool, database_url, registry) as engine,
    ):
        loop = await engine.lifecycle.start(
            agent="world", message="go", state={"llm": fake_llm.base_url, "mcp": world.url}
        )
        await eventually(lambda: completed(pool, loop.id))
    assert await tool_results(pool, loop.id) == ["right away"]
    (asked,) = world.calls
    assert "task" not in asked and "tasks/get" not in world.methods
    done = await only_call(pool, loop.id)
    assert done is not None and done.task_id is None and done.input_status is None
