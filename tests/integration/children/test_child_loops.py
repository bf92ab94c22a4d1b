"""Agents as tools: a tool call starts a child loop, the parent waits without a worker and
resumes with the child's answer (engine/children.py, store/sql/functions/child_loops.sql)."""

from __future__ import annotations

import uuid
from typing import Any

import httpx

from agentd.db.pool import Pool, connection
from agentd.registry import AgentRegistry
from agentd.store import events, jobs, loops, messages, tool_calls
from agentd.store.models import Loop
from agentd.testing.engine import eventually, running_engine
from agentd.testing.engine import loop_row as _loop
from agentd.testing.fake_llm import FakeLLM, Reply, Rule, ToolCall


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


async def test_a_failed_child_becomes_a_tool_error_and_the_parent_continues(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    fake_llm.add(Rule(match="BREAK", reply=Reply(status=400, error_body="bad request")))
    _delegate(fake_llm, ToolCall("agent__calc", {"message": "BREAK"}), final="went on")
    async with running_engine(pool, database_url, registry) as engine:
        parent = await _start(engine, fake_llm)
        await eventually(lambda: _is(pool, parent.id, "completed"))
    (kid,) = await _children(pool, parent.id)
    assert kid.status == "failed"
    (result,) = await _tool_results(pool, parent.id)
    assert result.startswith(f"The calc agent (child loop {kid.id}) failed:")
    async with connection(pool) as conn:
        (call,) = await tool_calls.list_for_loop(conn, loop_id=parent.id)
    assert call.is_success is False


async def test_stopping_the_parent_stops_its_children(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    fake_llm.add(Rule(match="SLOW", reply=Reply(content="late", delay_before_first_byte=30)))
    _delegate(fake_llm, ToolCall("agent__calc", {"message": "SLOW"}))
    async with running_engine(pool, database_url, registry) as engine:
        parent = await _start(engine, fake_llm)
        (kid,) = await eventually(lambda: _children(pool, parent.id))
        await eventually(lambda: _is(pool, kid.id, "running"))
        await engine.lifecycle.stop(parent.id)
        assert (await _loop(pool, kid.id)).status == "stopped"
        assert (await _loop(pool, kid.id)).status_reason == "stopped_with_parent"
        assert await _tool_results(pool, parent.id) == []


async def test_pause_and_resume_cascade_to_children_and_the_parent_completes(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    fake_llm.add(
        Rule(match="WAIT", reply=Reply(content="waited", delay_before_first_byte=30), times=1)
    )
    fake_llm.add(Rule(match="WAIT", reply=Reply(content="waited")))
    _delegate(fake_llm, ToolCall("agent__calc", {"message": "WAIT"}))
    async with running_engine(pool, database_url, registry) as engine:
        parent = await _start(engine, fake_llm)
        (kid,) = await eventually(lambda: _children(pool, parent.id))
        await eventually(lambda: _is(pool, kid.id, "running"))
        await engine.lifecycle.pause(parent.id)
        paused = await _loop(pool, kid.id)
        assert (paused.status, paused.status_reason) == ("paused", "paused_with_parent")
        await engine.lifecycle.resume(parent.id)
        await eventually(lambda: _is(pool, parent.id, "completed"))
    assert (await _loop(pool, kid.id)).status == "completed"
    assert await _tool_results(pool, parent.id) == ["waited"]


async def test_a_child_gets_only_what_the_parent_budget_has_left(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    fake_llm.add(Rule(match="ADD 1 2", reply=Reply(content="three", usage=(500, 100))))
    fake_llm.add(
        Rule(
            match=lambda m: m.role == "user" and "DELEGATE" in m.text,
            reply=Reply(
                tool_calls=[ToolCall("agent__calc", {"message": "ADD 1 2"})], usage=(200, 50)
            ),
        )
    )
    fake_llm.add(Rule(match=lambda m: m.role == "tool", reply=Reply(content="done")))
    async with running_engine(pool, database_url, registry) as engine:
        parent = await _start(engine, fake_llm, agent="budget_boss")
        (kid,) = await eventually(lambda: _children(pool, parent.id))
        # The parent's budget (1000 tokens) less its own first turn (250).
        assert kid.state["max_tokens_total"] == 750
        # The child spends 600: the parent's tree has spent 850 of 1000, so its next turn
        # still runs; a parent over budget would pause instead.
        await eventually(lambda: _is(pool, parent.id, "completed"))
    async with connection(pool) as conn:
        assert (await loops.tree_spend(conn, loop_id=parent.id))[0] >= 250 + 600


async def test_a_parent_whose_children_spent_its_budget_pauses(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    fake_llm.add(Rule(match="ADD 1 2", reply=Reply(content="three", usage=(900, 100))))
    _delegate(fake_llm, ToolCall("agent__calc", {"message": "ADD 1 2"}))
    async with running_engine(pool, database_url, registry) as engine:
        parent = await _start(engine, fake_llm, agent="budget_boss")
        await eventually(lambda: _is(pool, parent.id, "paused"))
    row = await _loop(pool, parent.id)
    assert row.status_reason == "token_budget_exceeded"
    assert row.tokens_prompt + row.tokens_completion < 1000  # its own spend alone is under


async def test_a_detached_child_answers_at_once_and_is_not_stopped_with_the_parent(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    fake_llm.add(Rule(match="SLOW", reply=Reply(content="late", delay_before_first_byte=30)))
    _delegate(fake_llm, ToolCall("background", {"message": "SLOW"}))
    async with running_engine(pool, database_url, registry) as engine:
        parent = await _start(engine, fake_llm)
        await eventually(lambda: _is(pool, parent.id, "completed"))
        (kid,) = await _children(pool, parent.id)
        assert await _tool_results(pool, parent.id) == [
            f"started child loop {kid.id} (calc); it runs on its own."
        ]
        assert kid.status in ("queued", "running")
        await engine.lifecycle.stop(kid.id)


async def test_a_call_past_the_depth_limit_is_refused(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    from agentd.testing.engine import fast_settings

    _delegate(fake_llm, ToolCall("agent__calc", {"message": "ADD 1 2"}), final="alone")
    settings = fast_settings(max_child_depth=0)
    async with running_engine(pool, database_url, registry, settings=settings) as engine:
        parent = await _start(engine, fake_llm)
        await eventually(lambda: _is(pool, parent.id, "completed"))
    assert await _children(pool, parent.id) == []
    (result,) = await _tool_results(pool, parent.id)
    assert "may nest 0 deep" in result


async def test_the_api_shows_the_tree(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM,
    client: httpx.AsyncClient,
) -> None:  # fmt: skip
    fake_llm.add(Rule(match="ADD 1 2", reply=Reply(content="three")))
    _delegate(fake_llm, ToolCall("agent__calc", {"message": "ADD 1 2"}))
    async with running_engine(pool, database_url, registry) as engine:
        parent = await _start(engine, fake_llm)
        await eventually(lambda: _is(pool, parent.id, "completed"))
    (kid,) = await _children(pool, parent.id)
    shown = (await client.get(f"/v1/loops/{parent.id}")).json()
    assert shown["children"] == [str(kid.id)] and shown["child_count"] == 1
    child = (await client.get(f"/v1/loops/{kid.id}")).json()
    assert child["parent_id"] == str(parent.id) and child["depth"] == 1
    listed = (await client.get(f"/v1/loops/{parent.id}/children")).json()
    assert [x["id"] for x in listed["items"]] == [str(kid.id)]
    filtered = (await client.get("/v1/loops", params={"parent_id": str(parent.id)})).json()
    assert [x["id"] for x in filtered["items"]] == [str(kid.id)]
    missing = await client.get(f"/v1/loops/{uuid.uuid4()}/children")
    assert missing.status_code == 404
    bad = await client.get("/v1/loops", params={"parent_id": "nope"})
    assert bad.status_code == 422
    page = await client.get(f"/admin/loops/{parent.id}/children")
    assert page.status_code == 200 and f'data-child="{kid.id}"' in page.text


async def test_a_child_with_a_smaller_budget_of_its_own_keeps_it(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    # The parent (1000 tokens) has 750 left; the child's own max_tokens_total is 100. It is
    # held to 100, so its second turn is refused and the parent hears it stopped at its limit.
    fake_llm.add(
        Rule(
            match="ADD 1 2",
            reply=Reply(tool_calls=[ToolCall("add", {"a": 1, "b": 2})], usage=(150, 10)),
        )
    )
    fake_llm.add(
        Rule(
            match=lambda m: m.role == "user" and "DELEGATE" in m.text,
            reply=Reply(
                tool_calls=[ToolCall("agent__thrifty", {"message": "ADD 1 2"})], usage=(200, 50)
            ),
        )
    )
    fake_llm.add(Rule(match=lambda m: m.role == "tool" and m.text == "3", reply=Reply("three")))
    fake_llm.add(Rule(match=lambda m: m.role == "tool", reply=Reply(content="done")))
    async with running_engine(pool, database_url, registry) as engine:
        parent = await _start(engine, fake_llm, agent="thrifty_boss")
        (kid,) = await eventually(lambda: _children(pool, parent.id))
        assert kid.state["max_tokens_total"] == 100  # min(750 the parent has left, 100 its own)
        await eventually(lambda: _is(pool, parent.id, "completed"))
    kid = await _loop(pool, kid.id)
    assert (kid.status, kid.status_reason) == ("paused", "token_budget_exceeded")
    (result,) = await _tool_results(pool, parent.id)
    assert "stopped at its limit" in result


async def test_a_child_with_a_larger_budget_of_its_own_gets_only_what_the_parent_has_left(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    fake_llm.add(Rule(match="ADD 1 2", reply=Reply(content="three", usage=(10, 10))))
    fake_llm.add(
        Rule(
            match=lambda m: m.role == "user" and "DELEGATE" in m.text,
            reply=Reply(
                tool_calls=[ToolCall("agent__lavish", {"message": "ADD 1 2"})], usage=(200, 50)
            ),
        )
    )
    fake_llm.add(Rule(match=lambda m: m.role == "tool", reply=Reply(content="done")))
    async with running_engine(pool, database_url, registry) as engine:
        parent = await _start(engine, fake_llm, agent="thrifty_boss")
        (kid,) = await eventually(lambda: _children(pool, parent.id))
        assert kid.state["max_tokens_total"] == 750  # min(750, its own 1_000_000)
        await eventually(lambda: _is(pool, parent.id, "completed"))


async def test_a_childs_cost_budget_is_the_smaller_of_its_own_and_the_parents_remainder(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    fake_llm.add(Rule(match="ADD", reply=Reply(content="done")))
    _delegate(fake_llm, ToolCall("agent__thrifty", {"message": "ADD 1 2"}))
    async with running_engine(pool, database_url, registry) as engine:
        parent = await _start(engine, fake_llm, agent="cost_boss")
        await eventually(lambda: _is(pool, parent.id, "completed"))
    (kid,) = await _children(pool, parent.id)
    # The parent (max_cost 2, nothing priced spent) has 2 USD left; the child's own is 0.01.
    assert kid.state["max_cost"] == "0.01"
