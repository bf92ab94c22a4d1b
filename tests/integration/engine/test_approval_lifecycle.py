"""Approvals end to end: park, approve, deny, expire, repeat, race, and a worker restart."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from agentd.db.pool import Pool, connection
from agentd.engine.lifecycle import Lifecycle
from agentd.errors import AlreadyDecided
from agentd.registry import AgentRegistry
from agentd.store import jobs, loops, messages, tool_calls
from agentd.store.models import ToolCall
from agentd.testing.agents import CALLS, CalcAgent
from agentd.testing.engine import eventually, fast_settings, loop_row, running_engine
from agentd.testing.fake_llm import FakeLLM, Reply, Rule
from agentd.testing.fake_llm import ToolCall as FakeCall


class QuickDeadlineAgent(CalcAgent):
    approval_timeout = 0.05


def script_refund(fake: FakeLLM) -> None:
    fake.add(
        Rule(
            match=lambda last: last.role == "user",
            reply=Reply(tool_calls=[FakeCall("refund", {"amount": 5})]),
        )
    )
    fake.add(Rule(match=lambda last: last.role == "tool", reply=Reply(content="all done")))


async def parked_call(pool: Pool, loop_id: uuid.UUID) -> ToolCall | None:
    async with connection(pool) as conn:
        waiting = await tool_calls.list_pending_approval(conn, loop_id=loop_id)
        row = await loops.get(conn, loop_id=loop_id)
    if row is None or row.status != "waiting" or not waiting:
        return None
    return waiting[0]


async def completed(pool: Pool, loop_id: uuid.UUID) -> bool:
    return (await loop_row(pool, loop_id)).status == "completed"


async def tool_messages(pool: Pool, loop_id: uuid.UUID) -> list[str]:
    async with connection(pool) as conn:
        rows = await messages.list_(conn, loop_id=loop_id)
    return [m.content or "" for m in rows if m.role == "tool"]


async def test_call_needing_approval_parks_without_holding_anything(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    script_refund(fake_llm)
    async with running_engine(pool, database_url, registry) as engine:
        loop = await engine.lifecycle.start(
            agent="calc", message="refund", state={"llm": fake_llm.base_url}
        )
        call = await eventually(lambda: parked_call(pool, loop.id))
        assert engine.worker.in_flight == 0
        assert not await engine.reaper.sweep_once()  # a parked call is not "stalled"
    assert call.status == "waiting" and call.lease_token is None and call.leased_until is None
    async with connection(pool) as conn:
        assert await jobs.list_for_loop(conn, loop_id=loop.id) == []
    row = await loop_row(pool, loop.id)
    assert row.status == "waiting" and row.lease_expires_at is None
    assert CALLS == []


async def test_approve_runs_the_tool_once_and_the_loop_completes(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    script_refund(fake_llm)
    async with running_engine(pool, database_url, registry) as engine:
        loop = await engine.lifecycle.start(
            agent="calc", message="refund", state={"llm": fake_llm.base_url}
        )
        call = await eventually(lambda: parked_call(pool, loop.id))
        decided = await engine.lifecycle.decide(call.id, approve=True, decided_by="ops")
        again = await engine.lifecycle.decide(call.id, approve=True, decided_by="ops")
        assert decided.approval_status == again.approval_status == "approved"
        await eventually(lambda: completed(pool, loop.id))
    assert await tool_messages(pool, loop.id) == ["refunded 5"]
    (only,) = CALLS
    assert only == {"tool": "refund", "amount": 5, "key": f"agentd:tool_call:{call.id}"}
    # Parking ran nothing: the call ran once, and says so.
    assert call.attempts == 0
    async with connection(pool) as conn:
        done = await tool_calls.get(conn, tool_call_id=call.id)
    assert done is not None and done.attempts == 1


async def test_deny_gives_the_model_a_rejection_and_never_runs_the_tool(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    script_refund(fake_llm)
    async with running_engine(pool, database_url, registry) as engine:
        loop = await engine.lifecycle.start(
            agent="calc", message="refund", state={"llm": fake_llm.base_url}
        )
        call = await eventually(lambda: parked_call(pool, loop.id))
        await engine.lifecycle.decide(call.id, approve=False, reason="too much")
        await eventually(lambda: completed(pool, loop.id))
    (result,) = await tool_messages(pool, loop.id)
    assert "denied" in result and "too much" in result and "not run" in result
    assert CALLS == []
    # The model saw the rejection as the tool's result.
    assert fake_llm.requests[-1].json["messages"][-1]["role"] == "tool"


async def test_undecided_call_expires_at_its_deadline_and_the_model_is_told(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    registry.register("quick", QuickDeadlineAgent)
    script_refund(fake_llm)
    async with running_engine(pool, database_url, registry) as engine:
        loop = await engine.lifecycle.start(
            agent="quick", message="refund", state={"llm": fake_llm.base_url}
        )
        call = await eventually(lambda: parked_call(pool, loop.id))
        await eventually(lambda: completed(pool, loop.id))  # the engine's reaper expires it
        with pytest.raises(AlreadyDecided):
            await engine.lifecycle.decide(call.id, approve=True)
    (result,) = await tool_messages(pool, loop.id)
    assert "expired" in result and CALLS == []


async def test_approve_and_deny_racing_resolve_to_one_decision(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    script_refund(fake_llm)
    async with running_engine(pool, database_url, registry) as engine:
        loop = await engine.lifecycle.start(
            agent="calc", message="refund", state={"llm": fake_llm.base_url}
        )
        call = await eventually(lambda: parked_call(pool, loop.id))
        other = Lifecycle(pool, registry, engine.settings)
        outcomes = await asyncio.gather(
            engine.lifecycle.decide(call.id, approve=True),
            other.decide(call.id, approve=False),
            return_exceptions=True,
        )
        await eventually(lambda: completed(pool, loop.id))
    lost = [o for o in outcomes if isinstance(o, AlreadyDecided)]
    won = [o for o in outcomes if isinstance(o, ToolCall)]
    assert len(lost) == 1 and len(won) == 1, outcomes
    (result,) = await tool_messages(pool, loop.id)
    if won[0].approval_status == "approved":
        assert result == "refunded 5" and len(CALLS) == 1
    else:
        assert "denied" in result and CALLS == []
    async with connection(pool) as conn:
        assert await jobs.list_for_loop(conn, loop_id=loop.id) == []


async def test_approval_given_while_no_worker_runs_is_carried_out_by_the_next_worker(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    script_refund(fake_llm)
    async with running_engine(pool, database_url, registry) as engine:
        loop = await engine.lifecycle.start(
            agent="calc", message="refund", state={"llm": fake_llm.base_url}
        )
        call = await eventually(lambda: parked_call(pool, loop.id))
    lifecycle = Lifecycle(pool, registry, fast_settings())
    await lifecycle.decide(call.id, approve=True)
    assert (await loop_row(pool, loop.id)).status == "running"
    async with running_engine(pool, database_url, registry):
        await eventually(lambda: completed(pool, loop.id))
    assert await tool_messages(pool, loop.id) == ["refunded 5"]
    assert len(CALLS) == 1
