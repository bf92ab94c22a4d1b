"""Agents as tools: a tool call starts a child loop, the parent waits without a worker and
resumes with the child's answer (engine/children.py, store/sql/functions/child_loops.sql)."""

from __future__ import annotations

import uuid
from typing import Any

from agentd.db.pool import Pool, connection
from agentd.registry import AgentRegistry
from agentd.store import events, jobs, loops, messages, tool_calls
from agentd.store.models import Loop
from agentd.testing.engine import eventually, running_engine
from agentd.testing.fake_llm import FakeLLM, Reply, Rule, ToolCall


async def _loop(pool: Pool, loop_id: uuid.UUID) -> Loop:
    async with connection(pool) as conn:
        row = await loops.get(conn, loop_id=loop_id)
    assert row is not None
    return row


async def _is(pool: Pool, loop_id: uuid.UUID, status: str) -> bool:
    return (await _loop(pool, loop_id)).status == status


async def _children(pool: Pool, loop_id: uuid.UUID) -> list[Loop]:
    async with connection(pool) as conn:
        return await loops.list_children(conn, parent_id=loop_id)


async def _tool_results(pool: Pool, loop_id: uuid.UUID) -> list[str]:
    async with connection(pool) as conn:
        rows = await messages.list_(conn, loop_id=loop_id)
    return [m.content or "" for m in rows if m.role == "tool"]


async def _event_names(pool: Pool, loop_id: uuid.UUID) -> list[str]:
    async with connection(pool) as conn:
        rows = await events.list_(conn, loop_id=loop_id, after_id=0, limit=1000)
    return [e.name for e in rows]


def _delegate(fake: FakeLLM, *calls: ToolCall, final: str = "all done") -> None:
    fake.add(Rule(match=lambda m: m.role == "user" and "DELEGATE" in m.text,
                  reply=Reply(tool_calls=list(calls))))  # fmt: skip
    fake.add(Rule(match=lambda m: m.role == "tool", reply=Reply(content=final)))


async def _start(engine: Any, fake: FakeLLM, agent: str = "boss") -> Loop:
    loop: Loop = await engine.lifecycle.start(
        agent=agent, message="DELEGATE", state={"llm": fake.base_url}
    )
    return loop


async def test_parent_delegates_to_two_children_in_parallel_and_completes_with_their_answers(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    fake_llm.add(Rule(match="ADD 1 2", reply=Reply(content="three")))
    fake_llm.add(Rule(match="ADD 3 4", reply=Reply(content="seven")))
    _delegate(
        fake_llm,
        ToolCall("agent__calc", {"message": "ADD 1 2"}),
        ToolCall("helper", {"message": "ADD 3 4"}),
    )
    async with running_engine(pool, database_url, registry) as engine:
        parent = await _start(engine, fake_llm)
        await eventually(lambda: _is(pool, parent.id, "completed"))
    assert sorted(await _tool_results(pool, parent.id)) == ["seven", "three"]
    kids = await _children(pool, parent.id)
    assert [k.status for k in kids] == ["completed", "completed"]
    assert {k.parent_id for k in kids} == {parent.id} and {k.depth for k in kids} == {1}
    async with connection(pool) as conn:
        calls = await tool_calls.list_for_loop(conn, loop_id=parent.id)
        assert await jobs.list_for_loop(conn, loop_id=parent.id) == []
    assert sorted(str(c.child_loop_id) for c in calls) == sorted(str(k.id) for k in kids)
    assert {k.parent_tool_call_id for k in kids} == {c.id for c in calls}
    names = await _event_names(pool, parent.id)
    assert names.count("loop.child_started") == 2 and names.count("loop.child_finished") == 2
    assert (await _loop(pool, parent.id)).child_count == 2
