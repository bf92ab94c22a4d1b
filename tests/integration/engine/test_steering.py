"""Messages sent to a running loop: queue, inject and interrupt (Lifecycle.send,
engine/steering.py), against real workers, the fake LLM and the fake MCP server."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from agentd.db.pool import Pool, connection
from agentd.errors import AlreadyDecided, IdempotencyKeyReused
from agentd.mcp.toolset import Toolset
from agentd.pipeline.llm.network_calling import NetworkCalling
from agentd.registry import AgentRegistry
from agentd.store import events, jobs, loop_inputs, loops, messages, tool_calls
from agentd.testing.agents import CalcAgent
from agentd.testing.engine import eventually, running_engine
from agentd.testing.fake_llm import FakeLLM, Reply, Rule, ToolCall
from agentd.testing.fake_mcp import FakeMcpServer


async def _loop(pool: Pool, loop_id: Any) -> Any:
    async with connection(pool) as conn:
        return await loops.get(conn, loop_id=loop_id)


async def _status_is(pool: Pool, loop_id: Any, status: str) -> bool:
    row = await _loop(pool, loop_id)
    return row is not None and row.status == status


async def _visible(pool: Pool, loop_id: Any) -> list[tuple[str, str | None]]:
    async with connection(pool) as conn:
        rows = await messages.list_(conn, loop_id=loop_id)
    return [(m.role, m.content) for m in rows]


async def _event_names(pool: Pool, loop_id: Any) -> list[str]:
    async with connection(pool) as conn:
        rows = await events.list_(conn, loop_id=loop_id, after_id=0, limit=1000)
    return [e.name for e in rows]


async def test_queued_message_continues_a_run_that_would_have_completed(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    fake_llm.add(Rule(match="START", reply=Reply(content="first", delay_before_first_byte=1.5)))
    fake_llm.add(Rule(match="AFTER", reply=Reply(content="second")))
    async with running_engine(pool, database_url, registry) as engine:
        loop = await engine.lifecycle.start(
            agent="calc", message="START", state={"llm": fake_llm.base_url}
        )
        await fake_llm.wait_for_requests(1)
        sent = await engine.lifecycle.send(loop.id, "AFTER", mode="queue")
        assert sent.input.status == "pending" and sent.loop.steer_pending == 1
        await eventually(lambda: _status_is(pool, loop.id, "completed"))
    assert await _visible(pool, loop.id) == [
        ("user", "START"),
        ("assistant", "first"),
        ("user", "AFTER"),
        ("assistant", "second"),
    ]
    names = await _event_names(pool, loop.id)
    assert names.count("loop.message_received") == 1
    assert names.count("loop.message_applied") == 1
    assert "loop.continued" not in names  # it never came to rest: the run was steered
    async with connection(pool) as conn:
        (inp,) = await loop_inputs.list_(conn, loop_id=loop.id)
        done = await loops.get(conn, loop_id=loop.id)
    assert inp.status == "applied" and inp.message_id is not None
    assert done is not None and done.steer_pending == 0 and not done.steer_release


async def test_injected_message_reaches_the_next_call_after_the_tool_results(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    fake_llm.add(
        Rule(
            match="START",
            reply=Reply(
                tool_calls=[ToolCall("add", {"a": 1, "b": 2})], delay_before_first_byte=1.5
            ),
        )
    )
    fake_llm.add(Rule(match="INJECTED", reply=Reply(content="saw it")))
    fake_llm.add(Rule(match=lambda last: last.role == "tool", reply=Reply(content="no steer")))
    async with running_engine(pool, database_url, registry) as engine:
        loop = await engine.lifecycle.start(
            agent="calc", message="START", state={"llm": fake_llm.base_url}
        )
        await fake_llm.wait_for_requests(1)
        sent = await engine.lifecycle.send(loop.id, "INJECTED", mode="inject")
        assert sent.input.status == "pending"
        await eventually(lambda: _status_is(pool, loop.id, "completed"))
    roles = [m["role"] for m in fake_llm.requests[1].json["messages"]]  # type: ignore[index]
    assert roles[-3:] == ["assistant", "tool", "user"]
    assert [r for r, _ in await _visible(pool, loop.id)] == [
        "user",
        "assistant",
        "tool",
        "user",
        "assistant",
    ]
    assert (await _visible(pool, loop.id))[-1] == ("assistant", "saw it")
    assert len(fake_llm.requests) == 2


async def test_queue_then_inject_keep_the_order_they_were_sent_in(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    fake_llm.add(
        Rule(
            match="START",
            reply=Reply(
                tool_calls=[ToolCall("add", {"a": 1, "b": 2})], delay_before_first_byte=1.5
            ),
        )
    )
    fake_llm.add(Rule(reply=Reply(content="done")))
    async with running_engine(pool, database_url, registry) as engine:
        loop = await engine.lifecycle.start(
            agent="calc", message="START", state={"llm": fake_llm.base_url}
        )
        await fake_llm.wait_for_requests(1)
        await engine.lifecycle.send(loop.id, "Q1", mode="queue")
        await engine.lifecycle.send(loop.id, "I1", mode="inject")
        await engine.lifecycle.send(loop.id, "Q2", mode="queue")
        await eventually(lambda: _status_is(pool, loop.id, "completed"))
    seen = await _visible(pool, loop.id)
    users = [c for r, c in seen if r == "user"]
    assert users == ["START", "Q1", "I1", "Q2"]
    # Q1 and I1 went in at the turn boundary after the tool result; Q2 waited for the end.
    assert [r for r, _ in seen] == [
        "user",
        "assistant",
        "tool",
        "user",
        "user",
        "assistant",
        "user",
        "assistant",
    ]


async def test_interrupt_cuts_the_stream_and_continues_within_a_second(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    long = "word " * 2000
    fake_llm.add(Rule(match="START", reply=Reply(content=long, chunk_size=5, chunk_delay=0.02)))
    fake_llm.add(Rule(match="STOP THAT", reply=Reply(content="ok, stopped")))
    async with running_engine(pool, database_url, registry) as engine:
        loop = await engine.lifecycle.start(
            agent="calc", message="START", state={"llm": fake_llm.base_url, "stream": True}
        )
        await fake_llm.wait_for_requests(1)

        async def streaming() -> bool:
            async with connection(pool) as conn:
                shell = await messages.streaming_shell(conn, loop_id=loop.id)
            return shell is not None and bool(shell.content)

        await eventually(streaming)
        t0 = time.monotonic()
        sent = await engine.lifecycle.send(loop.id, "STOP THAT", mode="interrupt")
        assert sent.input.status == "applied" and sent.loop.status == "queued"
        await fake_llm.wait_for_requests(2)
        assert fake_llm.requests[1].at - t0 < 1.0
        await fake_llm.wait_for_disconnects(1)
        await eventually(lambda: _status_is(pool, loop.id, "completed"))
    assert await _visible(pool, loop.id) == [
        ("user", "START"),
        ("user", "STOP THAT"),
        ("assistant", "ok, stopped"),
    ]
    assert "loop.interrupted" in await _event_names(pool, loop.id)


async def test_interrupt_answers_a_parked_approval_and_continues(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    fake_llm.add(Rule(match="START", reply=Reply(tool_calls=[ToolCall("refund", {"amount": 5})])))
    fake_llm.add(Rule(match="NEVER MIND", reply=Reply(content="fine")))
    async with running_engine(pool, database_url, registry) as engine:
        loop = await engine.lifecycle.start(
            agent="calc", message="START", state={"llm": fake_llm.base_url}
        )
        await eventually(lambda: _status_is(pool, loop.id, "waiting"))
        await engine.lifecycle.send(loop.id, "NEVER MIND", mode="interrupt")
        await eventually(lambda: _status_is(pool, loop.id, "completed"))
        async with connection(pool) as conn:
            (call,) = await tool_calls.list_for_loop(conn, loop_id=loop.id)
        assert call.status == "cancelled" and call.approval_status == "denied"
        assert call.decided_by == "agentd" and call.executed_at is None
        with pytest.raises(AlreadyDecided):
            await engine.lifecycle.decide(call.id, approve=True)
    roles = [m["role"] for m in fake_llm.requests[-1].json["messages"]]  # type: ignore[index]
    assert roles[-3:] == ["assistant", "tool", "user"]
    assert (await _visible(pool, loop.id))[-1] == ("assistant", "fine")


def _hanging_toolset(started: asyncio.Event) -> Toolset:
    tools = Toolset("slow")

    @tools.tool(description="Wait forever")
    async def wait_forever() -> str:
        started.set()
        await asyncio.Event().wait()
        return "never"

    return tools


async def test_interrupt_cancels_a_running_mcp_call_with_notifications_cancelled(
    pool: Pool, database_url: str, fake_llm: FakeLLM
) -> None:
    started = asyncio.Event()
    async with FakeMcpServer(_hanging_toolset(started)) as server:
        registry = AgentRegistry()
        registry.load_config(
            {
                "slow": {
                    "base_url": fake_llm.base_url,
                    "model": "m",
                    "system_prompt": "Wait.",
                    "mcps": [{"name": "slow", "url": server.url, "timeout": 60}],
                }
            }
        )
        fake_llm.add(Rule(match="START", reply=Reply(tool_calls=[ToolCall("wait_forever")])))
        fake_llm.add(Rule(match="HURRY", reply=Reply(content="hurried")))
        async with running_engine(pool, database_url, registry) as engine:
            loop = await engine.lifecycle.start(agent="slow", message="START")
            await asyncio.wait_for(started.wait(), 10)
            await engine.lifecycle.send(loop.id, "HURRY", mode="interrupt")
            await eventually(lambda: _status_is(pool, loop.id, "completed"))
            await eventually(lambda: _acall(bool, server.calls("notifications/cancelled")))
        (call,) = server.calls()
        (note,) = server.calls("notifications/cancelled")
        assert note.body["params"]["requestId"] == call.body["id"]  # type: ignore[index]
        async with connection(pool) as conn:
            (tc,) = await tool_calls.list_for_loop(conn, loop_id=loop.id)
            left = await jobs.list_for_loop(conn, loop_id=loop.id)
        assert tc.status == "cancelled" and tc.result and tc.result.startswith("interrupted")
        assert left == []
        assert (await _visible(pool, loop.id))[-1] == ("assistant", "hurried")


async def _acall(fn: Any, value: Any) -> Any:
    return fn(value)


async def test_send_with_an_idempotency_key_applies_once(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    fake_llm.add(Rule(match="START", reply=Reply(content="first", delay_before_first_byte=1.5)))
    fake_llm.add(Rule(reply=Reply(content="second")))
    async with running_engine(pool, database_url, registry) as engine:
        loop = await engine.lifecycle.start(
            agent="calc", message="START", state={"llm": fake_llm.base_url}
        )
        await fake_llm.wait_for_requests(1)
        one = await engine.lifecycle.send(
            loop.id, "AGAIN", mode="inject", idempotency_key="k1", request_hash=b"h"
        )
        two = await engine.lifecycle.send(
            loop.id, "AGAIN", mode="inject", idempotency_key="k1", request_hash=b"h"
        )
        assert two.replayed and two.input.id == one.input.id
        with pytest.raises(IdempotencyKeyReused):
            await engine.lifecycle.send(
                loop.id, "OTHER", mode="inject", idempotency_key="k1", request_hash=b"x"
            )
        await eventually(lambda: _status_is(pool, loop.id, "completed"))
    users = [c for r, c in await _visible(pool, loop.id) if r == "user"]
    assert users == ["START", "AGAIN"]


async def test_pending_message_survives_pause_and_resume_and_applies_once(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    fake_llm.add(Rule(match="START", reply=Reply(content="first", delay_before_first_byte=30)))
    fake_llm.add(Rule(match="LATER", reply=Reply(content="answered later")))
    async with running_engine(pool, database_url, registry) as engine:
        loop = await engine.lifecycle.start(
            agent="calc", message="START", state={"llm": fake_llm.base_url}
        )
        await fake_llm.wait_for_requests(1)
        await engine.lifecycle.send(loop.id, "LATER", mode="inject")
        await engine.lifecycle.pause(loop.id)
        row = await _loop(pool, loop.id)
        assert row.status == "paused" and row.steer_pending == 1
        fake_llm.rules.clear()
        fake_llm.add(Rule(match="LATER", reply=Reply(content="answered later")))
        await engine.lifecycle.resume(loop.id)
        await eventually(lambda: _status_is(pool, loop.id, "completed"))
    assert await _visible(pool, loop.id) == [
        ("user", "START"),
        ("user", "LATER"),
        ("assistant", "answered later"),
    ]


async def test_send_to_a_stopped_loop_flushes_earlier_pending_messages_first(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    fake_llm.add(Rule(match="START", reply=Reply(content="first", delay_before_first_byte=30)))
    async with running_engine(pool, database_url, registry) as engine:
        loop = await engine.lifecycle.start(
            agent="calc", message="START", state={"llm": fake_llm.base_url}
        )
        await fake_llm.wait_for_requests(1)
        await engine.lifecycle.send(loop.id, "Q1", mode="queue")
        await engine.lifecycle.stop(loop.id)
        fake_llm.rules.clear()
        fake_llm.add(Rule(reply=Reply(content="both seen")))
        sent = await engine.lifecycle.send(loop.id, "Q2")
        assert sent.input.status == "applied"
        await eventually(lambda: _status_is(pool, loop.id, "completed"))
    assert [c for r, c in await _visible(pool, loop.id) if r == "user"] == ["START", "Q1", "Q2"]


RELEASE = asyncio.Event()


class CompleteUnlessAsked:
    """Completes the loop itself (ctx.complete_loop) unless the last message says MORE;
    waits for RELEASE first, so a test can send a message while the turn runs."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, ctx: Any) -> None:
        rows, _ = await ctx.prompt_inputs()
        if rows[-1].content != "MORE":
            await RELEASE.wait()
            await ctx.complete_loop()
            return
        await self.app(ctx)


class HostCompletingAgent(CalcAgent):
    @classmethod
    def configure_llm_middlewares(cls, builder: Any) -> None:
        builder.insert_before(NetworkCalling, CompleteUnlessAsked)


async def test_host_driven_completion_goes_on_with_a_pending_message(
    pool: Pool, database_url: str, fake_llm: FakeLLM
) -> None:
    RELEASE.clear()
    fake_llm.add(Rule(match="MORE", reply=Reply(content="more it is")))
    registry = AgentRegistry()
    registry.register("host", HostCompletingAgent)
    async with running_engine(pool, database_url, registry) as engine:
        loop = await engine.lifecycle.start(
            agent="host", message="START", state={"llm": fake_llm.base_url}
        )
        await eventually(lambda: _status_is(pool, loop.id, "running"))
        sent = await engine.lifecycle.send(loop.id, "MORE", mode="queue")
        assert sent.input.status == "pending"
        RELEASE.set()
        await eventually(lambda: _status_is(pool, loop.id, "completed"))
    assert await _visible(pool, loop.id) == [
        ("user", "START"),
        ("user", "MORE"),
        ("assistant", "more it is"),
    ]
    row = await _loop(pool, loop.id)
    assert row.steer_pending == 0 and row.status_reason == "model_finished"
