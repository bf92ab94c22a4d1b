from __future__ import annotations

import pytest

from agentd.db.pool import Pool, connection
from agentd.registry import AgentRegistry
from agentd.store import jobs, loops, messages, tool_calls
from agentd.testing.agents import CALLS
from agentd.testing.engine import eventually, running_engine
from agentd.testing.fake_llm import FakeLLM, Reply, Rule, ToolCall


def script_two_adds(fake: FakeLLM) -> None:
    fake.add(
        Rule(
            match=lambda last: last.role == "user",
            reply=Reply(
                tool_calls=[ToolCall("add", {"a": 1, "b": 2}), ToolCall("add", {"a": 3, "b": 4})]
            ),
        )
    )
    fake.add(Rule(match=lambda last: last.role == "tool", reply=Reply(content="Sums: 3 and 7")))


async def status_of(pool: Pool, loop_id) -> str:  # type: ignore[no-untyped-def]
    async with connection(pool) as conn:
        loop = await loops.get(conn, loop_id=loop_id)
    assert loop is not None
    return loop.status


@pytest.mark.parametrize("stream", [False, True])
async def test_loop_with_parallel_tool_calls_completes(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM, stream: bool
) -> None:
    script_two_adds(fake_llm)
    async with running_engine(pool, database_url, registry) as engine:
        loop = await engine.lifecycle.start(
            agent="calc",
            message="add 1+2 and 3+4",
            state={"llm": fake_llm.base_url, "stream": stream},
        )
        await eventually(lambda: _is(pool, loop.id, "completed"))
    async with connection(pool) as conn:
        done = await loops.get(conn, loop_id=loop.id)
        msgs = await messages.list_(conn, loop_id=loop.id)
        calls = await tool_calls.list_for_loop(conn, loop_id=loop.id)
        left = await jobs.list_for_loop(conn, loop_id=loop.id)
    assert done is not None and done.step_count == 2 and done.execution_token is None
    assert [m.role for m in msgs] == ["user", "assistant", "tool", "tool", "assistant"]
    assert msgs[-1].content == "Sums: 3 and 7"
    assert sorted(m.content for m in msgs if m.role == "tool") == ["3", "7"]
    assert [c.is_success for c in calls] == [True, True]
    assert all(c.executed_at is not None and c.response_message_id for c in calls)
    assert left == []
    keys = sorted(c["key"] for c in CALLS)
    assert keys == sorted(f"agentd:tool_call:{c.id}" for c in calls)
    # The model saw the tools and, on the second turn, both results.
    second = fake_llm.requests[-1].json
    assert [m["role"] for m in second["messages"]][-2:] == ["tool", "tool"]
    assert {t["function"]["name"] for t in fake_llm.requests[0].json["tools"]} == {"add", "refund"}


async def test_sequential_agent_runs_calls_in_model_order(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    script_two_adds(fake_llm)
    async with running_engine(pool, database_url, registry) as engine:
        loop = await engine.lifecycle.start(
            agent="calc_seq", message="go", state={"llm": fake_llm.base_url}
        )
        await eventually(lambda: _is(pool, loop.id, "completed"))
    assert [(c["a"], c["b"]) for c in CALLS] == [(1, 2), (3, 4)]


async def test_invalid_tool_arguments_become_an_error_the_model_sees(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    fake_llm.add(
        Rule(
            match=lambda last: last.role == "user",
            reply=Reply(tool_calls=[ToolCall("add", '{"a": 1, "b": ')]),
        )
    )
    fake_llm.add(Rule(match=lambda last: last.role == "tool", reply=Reply(content="sorry")))
    async with running_engine(pool, database_url, registry) as engine:
        loop = await engine.lifecycle.start(
            agent="calc", message="go", state={"llm": fake_llm.base_url}
        )
        await eventually(lambda: _is(pool, loop.id, "completed"))
    async with connection(pool) as conn:
        (call,) = await tool_calls.list_for_loop(conn, loop_id=loop.id)
    assert call.is_success is False and "Invalid arguments" in (call.result or "")
    assert CALLS == []


async def test_llm_error_fails_the_loop_with_a_clear_message(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    fake_llm.add(Rule(reply=Reply(status=401, error_body={"error": "bad key"})))
    async with running_engine(pool, database_url, registry) as engine:
        loop = await engine.lifecycle.start(
            agent="calc", message="go", state={"llm": fake_llm.base_url}
        )
        await eventually(lambda: _is(pool, loop.id, "failed"))
    async with connection(pool) as conn:
        row = await loops.get(conn, loop_id=loop.id)
    assert row is not None and "401" in (row.error_message or "")


async def _is(pool: Pool, loop_id, status: str) -> bool:  # type: ignore[no-untyped-def]
    return await status_of(pool, loop_id) == status
