"""Child loops at their edges: nesting and its limit, stop over REST, a frozen parent, a
child's failure as the model sees it, an agent tool naming no agent."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx

from agentd.db.pool import Pool, connection
from agentd.registry import AgentRegistry
from agentd.store import jobs, tool_calls
from agentd.testing.agents import invocations
from agentd.testing.engine import eventually, fast_settings, running_engine
from agentd.testing.fake_llm import FakeLLM, RecordedRequest, Reply, Rule, ToolCall
from tests.integration.children.test_child_loops import (
    _children,
    _delegate,
    _is,
    _loop,
    _start,
    _tool_results,
)


def _from_tool(name: str) -> Rule:
    """The parent's answer once `name`'s result is in: `<name> said <result>`."""
    return Rule(
        match=lambda m: m.role == "tool" and m.tool_name == name,
        reply=lambda m: Reply(content=f"{name} said {m.text}"),
    )


def _nested(fake: FakeLLM) -> None:
    """grand_boss -> middle -> calc: each answers with what its child said."""
    fake.add(Rule(match="ADD 1 2", reply=Reply(content="three")))
    fake.add(
        Rule(
            match=lambda m: m.role == "user" and m.text == "ASK CALC",
            reply=Reply(tool_calls=[ToolCall("agent__calc", {"message": "ADD 1 2"})]),
        )
    )
    fake.add(
        Rule(
            match=lambda m: m.role == "user" and "DELEGATE" in m.text,
            reply=Reply(tool_calls=[ToolCall("agent__middle", {"message": "ASK CALC"})]),
        )
    )
    fake.add(_from_tool("agent__calc"))
    fake.add(_from_tool("agent__middle"))


def _requests_with_tool_text(fake: FakeLLM, prefix: str) -> list[RecordedRequest]:
    """The LLM requests whose last message is a tool result starting with `prefix`."""
    out = []
    for r in fake.requests:
        body = r.json
        assert isinstance(body, dict)
        last = body["messages"][-1]
        if last.get("role") == "tool" and str(last.get("content")).startswith(prefix):
            out.append(r)
    return out


async def _no_jobs(pool: Pool, *loop_ids: uuid.UUID) -> bool:
    async with connection(pool) as conn:
        for loop_id in loop_ids:
            if await jobs.list_for_loop(conn, loop_id=loop_id):
                return False
    return True


async def test_a_child_with_its_own_child_answers_through_two_levels(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    _nested(fake_llm)
    async with running_engine(pool, database_url, registry) as engine:
        root = await _start(engine, fake_llm, agent="grand_boss")
        await eventually(lambda: _is(pool, root.id, "completed"))
    (middle,) = await _children(pool, root.id)
    (leaf,) = await _children(pool, middle.id)
    assert (middle.agent, middle.depth, middle.status) == ("middle", 1, "completed")
    assert (leaf.agent, leaf.depth, leaf.status) == ("calc", 2, "completed")
    assert leaf.parent_id == middle.id
    assert await _tool_results(pool, middle.id) == ["three"]
    assert await _tool_results(pool, root.id) == ["agent__calc said three"]
    final = await _loop(pool, root.id)
    assert final.child_count == 1 and await _no_jobs(pool, root.id, middle.id, leaf.id)


async def test_the_depth_limit_is_a_tool_error_the_child_model_sees_and_acts_on(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    # max_child_depth 1: the middle (depth 1) may not start a grandchild (depth 2).
    _nested(fake_llm)
    settings = fast_settings(max_child_depth=1)
    async with running_engine(pool, database_url, registry, settings=settings) as engine:
        root = await _start(engine, fake_llm, agent="grand_boss")
        await eventually(lambda: _is(pool, root.id, "completed"))
    (middle,) = await _children(pool, root.id)
    assert middle.status == "completed" and await _children(pool, middle.id) == []
    (refusal,) = await _tool_results(pool, middle.id)
    assert refusal == (
        "Tool agent__calc refused: child loops may nest 1 deep, and this loop is at that "
        "depth. Do the task yourself."
    )
    async with connection(pool) as conn:
        (call,) = await tool_calls.list_for_loop(conn, loop_id=middle.id)
    assert call.is_success is False and call.child_loop_id is None
    # The middle's model got the refusal as its tool result, and the root got its answer.
    assert len(_requests_with_tool_text(fake_llm, "Tool agent__calc refused")) == 1
    assert await _tool_results(pool, root.id) == [f"agent__calc said {refusal}"]


async def test_stopping_the_parent_over_rest_stops_its_children_and_theirs(
    pool: Pool,
    database_url: str,
    registry: AgentRegistry,
    fake_llm: FakeLLM,
    client: httpx.AsyncClient,
) -> None:
    fake_llm.add(Rule(match="ADD 1 2", reply=Reply(content="late", delay_before_first_byte=30)))
    _nested(fake_llm)
    async with running_engine(pool, database_url, registry) as engine:
        root = await _start(engine, fake_llm, agent="grand_boss")
        (middle,) = await eventually(lambda: _children(pool, root.id))
        (leaf,) = await eventually(lambda: _children(pool, middle.id))
        await eventually(lambda: _is(pool, leaf.id, "running"))

        r = await client.post(f"/v1/loops/{root.id}/stop")
        assert r.status_code == 200, r.text
        assert r.json()["status"] == "stopped"
        for kid in (middle, leaf):
            row = await _loop(pool, kid.id)
            assert (row.status, row.status_reason) == ("stopped", "stopped_with_parent")
        # Nothing runs on: no job is left for any of the three, no result was recorded.
        assert await _no_jobs(pool, root.id, middle.id, leaf.id)
        shown = (await client.get(f"/v1/loops/{middle.id}")).json()
        assert shown["status"] == "stopped"
    assert await _tool_results(pool, root.id) == []
    assert await _tool_results(pool, middle.id) == []
    assert (await _loop(pool, root.id)).status == "stopped"


async def test_a_failed_child_is_a_tool_error_in_the_parents_next_request(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    fake_llm.add(Rule(match="BREAK", reply=Reply(status=400, error_body="bad request")))
    _delegate(fake_llm, ToolCall("agent__calc", {"message": "BREAK"}), final="went on")
    async with running_engine(pool, database_url, registry) as engine:
        parent = await _start(engine, fake_llm)
        await eventually(lambda: _is(pool, parent.id, "completed"))
    (kid,) = await _children(pool, parent.id)
    seen = _requests_with_tool_text(fake_llm, f"The calc agent (child loop {kid.id}) failed:")
    assert len(seen) == 1  # the parent's model saw the failure, once, as the call's result
    assert "Retry with a clearer task" in str(seen[0].json)


async def test_a_frozen_parent_is_not_resumed_by_its_childs_end_until_unfrozen(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    (tmp_path / "hold").touch()  # the child's slow_add waits while this exists
    fake_llm.add(
        Rule(
            match=lambda m: m.role == "user" and m.text == "SLOW ADD",
            reply=Reply(tool_calls=[ToolCall("slow_add", {"a": 2, "b": 3})]),
        )
    )
    fake_llm.add(Rule(match=lambda m: m.role == "tool" and m.text == "5", reply=Reply("five")))
    fake_llm.add(
        Rule(
            match=lambda m: m.role == "user" and "DELEGATE" in m.text,
            reply=Reply(tool_calls=[ToolCall("agent__probe", {"message": "SLOW ADD"})]),
        )
    )
    fake_llm.add(_from_tool("agent__probe"))
    async with running_engine(pool, database_url, registry) as engine:
        parent = await engine.lifecycle.start(
            agent="probe_boss",
            message="DELEGATE",
            state={"llm": fake_llm.base_url, "probe_dir": str(tmp_path)},
        )
        (kid,) = await eventually(lambda: _children(pool, parent.id))

        async def holding() -> bool:
            return len(invocations(tmp_path)) == 1

        await eventually(holding)
        await engine.lifecycle.freeze(parent.id)
        (tmp_path / "hold").unlink()
        await eventually(lambda: _is(pool, kid.id, "completed"))
        # The child's end committed with the parent frozen: no job for the parent's call,
        # which still waits without a result.
        assert await _no_jobs(pool, parent.id)
        async with connection(pool) as conn:
            (call,) = await tool_calls.list_for_loop(conn, loop_id=parent.id)
        assert (call.status, call.response_message_id) == ("waiting", None)
        assert (await _loop(pool, parent.id)).frozen
        # A reaper sweep leaves the frozen parent alone too.
        await engine.reaper.sweep_once()
        assert await _no_jobs(pool, parent.id) and await _tool_results(pool, parent.id) == []

        await engine.lifecycle.unfreeze(parent.id)
        await eventually(lambda: _is(pool, parent.id, "completed"))
    assert await _tool_results(pool, parent.id) == ["five"]
    assert await _tool_results(pool, kid.id) == ["5"]
    assert len(invocations(tmp_path)) == 1


async def test_an_agent_tool_naming_an_unknown_agent_is_a_tool_error_naming_the_known(
    pool: Pool,
    database_url: str,
    registry: AgentRegistry,
    fake_llm: FakeLLM,
    client: httpx.AsyncClient,
) -> None:
    _delegate(fake_llm, ToolCall("agent__nobody", {"message": "ADD 1 2"}), final="alone")
    # The agent loads and is listed (no 500) although the agent it names is unknown.
    listed = await client.get("/v1/agents")
    assert listed.status_code == 200 and "lost_boss" in listed.text
    async with running_engine(pool, database_url, registry):
        r = await client.post(
            "/v1/loops",
            json={"agent": "lost_boss", "message": "DELEGATE", "state": {"llm": fake_llm.base_url}},
        )
        assert r.status_code < 300, r.text
        loop_id = uuid.UUID(r.json()["id"])
        await eventually(lambda: _is(pool, loop_id, "completed"))
    assert await _children(pool, loop_id) == []
    (result,) = await _tool_results(pool, loop_id)
    assert result.startswith(
        "Tool agent__nobody could not start the nobody agent: unknown agent 'nobody' (known: "
    )
    assert "calc" in result and "lost_boss" in result
    assert len(_requests_with_tool_text(fake_llm, "Tool agent__nobody could not start")) == 1
    assert await _no_jobs(pool, loop_id)


async def test_interrupting_the_parent_stops_the_child_its_answered_call_waited_on(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    fake_llm.add(Rule(match="ADD 1 2", reply=Reply(content="late", delay_before_first_byte=30)))
    fake_llm.add(Rule(match="NEVER MIND", reply=Reply(content="ok, dropped it")))
    _delegate(fake_llm, ToolCall("agent__calc", {"message": "ADD 1 2"}))
    async with running_engine(pool, database_url, registry) as engine:
        parent = await _start(engine, fake_llm)
        (kid,) = await eventually(lambda: _children(pool, parent.id))
        await eventually(lambda: _is(pool, kid.id, "running"))
        await engine.lifecycle.send(parent.id, "NEVER MIND", mode="interrupt")
        # The call was answered "interrupted": the child's work can no longer reach the
        # parent, so it is stopped with it rather than spending on (from its budget, too).
        row = await _loop(pool, kid.id)
        assert (row.status, row.status_reason) == ("stopped", "stopped_with_parent")
        await eventually(lambda: _is(pool, parent.id, "completed"))
        assert await _no_jobs(pool, kid.id)
    (result,) = await _tool_results(pool, parent.id)
    assert result.startswith("interrupted")


async def test_a_sequential_parent_runs_its_children_one_after_the_other(
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
        parent = await _start(engine, fake_llm, agent="sequential_boss")
        await eventually(lambda: _is(pool, parent.id, "completed"))
    assert await _tool_results(pool, parent.id) == ["three", "seven"]
    first, second = sorted(await _children(pool, parent.id), key=lambda k: k.created_at)
    assert first.updated_at <= second.created_at  # the second started once the first ended
    assert await _no_jobs(pool, parent.id)


async def test_a_child_stopped_while_its_parent_is_paused_is_a_tool_error_on_resume(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    fake_llm.add(Rule(match="ADD 1 2", reply=Reply(content="late", delay_before_first_byte=30)))
    _delegate(fake_llm, ToolCall("agent__calc", {"message": "ADD 1 2"}), final="went on")
    async with running_engine(pool, database_url, registry) as engine:
        parent = await _start(engine, fake_llm)
        (kid,) = await eventually(lambda: _children(pool, parent.id))
        await eventually(lambda: _is(pool, kid.id, "running"))
        await engine.lifecycle.pause(parent.id)
        await engine.lifecycle.stop(kid.id)  # its end finds the parent paused: no job
        assert await _no_jobs(pool, parent.id, kid.id)
        await engine.lifecycle.resume(parent.id)
        await eventually(lambda: _is(pool, parent.id, "completed"))
    row = await _loop(pool, kid.id)
    assert (row.status, row.status_reason) == ("stopped", "stopped_by_user")
    assert await _tool_results(pool, parent.id) == [
        f"The calc agent (child loop {kid.id}) was stopped before it finished."
    ]
