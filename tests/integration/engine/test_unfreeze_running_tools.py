"""Unfreezing a loop in its tool phase: a call still running on a worker (a live lease) is
left alone, so its tool runs once; only what a frozen claim dropped is dispatched again."""

from __future__ import annotations

import asyncio
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator

import pytest

from agentd.db.pool import Pool, connection, transaction
from agentd.engine.lifecycle import Lifecycle
from agentd.engine.service import Engine
from agentd.mcp.port import CallContext
from agentd.mcp.toolset import Toolset
from agentd.registry import AgentRegistry
from agentd.store import jobs, loops, messages, tool_calls
from agentd.store.models import Loop, ToolCall
from agentd.testing import factories
from agentd.testing.agents import CALLS, CalcAgent, calc
from agentd.testing.engine import eventually, fast_settings, running_engine
from agentd.testing.engine import loop_row as _loop
from agentd.testing.fake_llm import FakeLLM, Reply, Rule
from agentd.testing.fake_llm import ToolCall as Call

gates = Toolset("gates")
#: The gates each `hold` call entered, in order (one entry per run of the tool's body).
RUNS: list[str] = []
#: Set by the test to let `hold(gate)` return.
OPEN: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)


@gates.tool(description="Wait until the test opens the gate")
async def hold(gate: str, ctx: CallContext) -> str:
    RUNS.append(gate)
    await OPEN[gate].wait()
    return f"through {gate}"


class GateAgent(CalcAgent):
    mcps = [{"name": "calc", "toolset": calc}, {"name": "gates", "toolset": gates}]


class SequentialGateAgent(GateAgent):
    sequential_tool_calls = True


@pytest.fixture(autouse=True)
def _gates() -> None:
    RUNS.clear()
    OPEN.clear()


@pytest.fixture
def registry() -> AgentRegistry:
    reg = AgentRegistry()
    reg.register("gate", GateAgent)
    reg.register("gate_seq", SequentialGateAgent)
    return reg


def script(fake: FakeLLM, *calls: Call) -> None:
    fake.add(Rule(match=lambda last: last.role == "user", reply=Reply(tool_calls=list(calls))))
    fake.add(Rule(match=lambda last: last.role == "tool", reply=Reply(content="done")))


@pytest.fixture
async def engine(pool: Pool, database_url: str, registry: AgentRegistry) -> AsyncIterator[Engine]:
    # A tool held open by the test must not time out under a loaded CI machine.
    settings = fast_settings(default_tool_timeout=60.0)
    async with running_engine(pool, database_url, registry, settings=settings) as e:
        yield e
        for gate in list(OPEN):  # never leave a held tool for shutdown to wait on
            OPEN[gate].set()


async def _calls(pool: Pool, loop_id: uuid.UUID) -> list[ToolCall]:
    async with connection(pool) as conn:
        return await tool_calls.list_for_loop(conn, loop_id=loop_id)


async def _no_jobs(pool: Pool, loop_id: uuid.UUID) -> bool:
    async with connection(pool) as conn:
        return await jobs.list_for_loop(conn, loop_id=loop_id) == []


async def _running(*gate: str) -> bool:
    return sorted(RUNS) == sorted(gate)


async def _done(pool: Pool, loop_id: uuid.UUID) -> bool:
    return (await _loop(pool, loop_id)).status == "completed"


async def _assert_answered_once(pool: Pool, loop_id: uuid.UUID) -> None:
    calls = await _calls(pool, loop_id)
    async with connection(pool) as conn:
        msgs = await messages.list_(conn, loop_id=loop_id)
    answered = sorted(m.tool_call_id for m in msgs if m.role == "tool")
    assert answered == sorted(c.id for c in calls)  # exactly one result message each
    assert await _no_jobs(pool, loop_id)


async def _start(engine: Engine, fake_llm: FakeLLM, agent: str) -> Loop:
    return await engine.lifecycle.start(agent=agent, message="go", state={"llm": fake_llm.base_url})


async def _leases(pool: Pool, loop_id: uuid.UUID) -> dict[int, uuid.UUID | None]:
    return {c.id: c.lease_token for c in await _calls(pool, loop_id)}


async def test_unfreezing_leaves_a_running_tool_call_running(
    pool: Pool, engine: Engine, fake_llm: FakeLLM
) -> None:
    script(fake_llm, Call("hold", {"gate": "a"}))
    loop = await _start(engine, fake_llm, "gate")
    await eventually(lambda: _running("a"))
    before, leases = await _loop(pool, loop.id), await _leases(pool, loop.id)
    await engine.lifecycle.freeze(loop.id)
    await engine.lifecycle.unfreeze(loop.id)

    # Same generation, same lease, nothing queued: the running call's result still counts.
    after = await _loop(pool, loop.id)
    assert (after.status, after.execution_token) == ("running", before.execution_token)
    assert not after.frozen
    assert await _leases(pool, loop.id) == leases and await _no_jobs(pool, loop.id)

    OPEN["a"].set()
    await eventually(lambda: _done(pool, loop.id))
    assert RUNS == ["a"]  # the tool's body ran once
    await _assert_answered_once(pool, loop.id)


async def test_unfreezing_reruns_neither_a_call_finished_while_frozen_nor_a_running_one(
    pool: Pool, engine: Engine, fake_llm: FakeLLM
) -> None:
    script(fake_llm, Call("hold", {"gate": "a"}), Call("hold", {"gate": "b"}))
    loop = await _start(engine, fake_llm, "gate")
    await eventually(lambda: _running("a", "b"))
    before = await _loop(pool, loop.id)
    first, second = await _calls(pool, loop.id)
    await engine.lifecycle.freeze(loop.id)
    OPEN["a"].set()

    async def first_answered() -> bool:
        (got,) = [c for c in await _calls(pool, loop.id) if c.id == first.id]
        return got.response_message_id is not None

    await eventually(first_answered)  # its result recorded though the loop is frozen
    await engine.lifecycle.unfreeze(loop.id)
    after = await _loop(pool, loop.id)
    assert after.execution_token == before.execution_token
    assert (await _leases(pool, loop.id))[second.id] == second.lease_token
    assert await _no_jobs(pool, loop.id)

    OPEN["b"].set()
    await eventually(lambda: _done(pool, loop.id))
    assert sorted(RUNS) == ["a", "b"]
    await _assert_answered_once(pool, loop.id)


async def test_unfreezing_dispatches_a_dropped_call_beside_a_running_one(
    pool: Pool, engine: Engine, fake_llm: FakeLLM
) -> None:
    CALLS.clear()
    script(fake_llm, Call("hold", {"gate": "a"}), Call("add", {"a": 1, "b": 2}))
    engine.worker.limits["tool"] = 1  # `add` waits in the queue behind the held call
    loop = await _start(engine, fake_llm, "gate")
    await eventually(lambda: _running("a"))

    async def add_queued() -> bool:
        return not await _no_jobs(pool, loop.id)

    await eventually(add_queued)
    before, leases = await _loop(pool, loop.id), await _leases(pool, loop.id)
    held, dropped = await _calls(pool, loop.id)
    await engine.lifecycle.freeze(loop.id)
    engine.worker.limits["tool"] = 64
    engine.worker.wake("tool")
    await eventually(lambda: _no_jobs(pool, loop.id))  # claimed and dropped: frozen
    assert CALLS == [] and leases[dropped.id] is None

    await engine.lifecycle.unfreeze(loop.id)
    after = await _loop(pool, loop.id)
    assert after.execution_token == before.execution_token
    assert (await _leases(pool, loop.id))[held.id] == leases[held.id]

    async def dropped_answered() -> bool:
        (got,) = [c for c in await _calls(pool, loop.id) if c.id == dropped.id]
        return got.response_message_id is not None

    await eventually(dropped_answered)  # dispatched again, and run while `a` still holds
    assert RUNS == ["a"]
    OPEN["a"].set()
    await eventually(lambda: _done(pool, loop.id))
    assert RUNS == ["a"] and len(CALLS) == 1
    await _assert_answered_once(pool, loop.id)


async def test_unfreezing_a_sequential_loop_waits_for_its_running_call(
    pool: Pool, engine: Engine, fake_llm: FakeLLM
) -> None:
    script(fake_llm, Call("hold", {"gate": "a"}), Call("hold", {"gate": "b"}))
    loop = await _start(engine, fake_llm, "gate_seq")
    await eventually(lambda: _running("a"))
    before, leases = await _loop(pool, loop.id), await _leases(pool, loop.id)
    await engine.lifecycle.freeze(loop.id)
    await engine.lifecycle.unfreeze(loop.id)
    # The second call waits behind the first, which is still running: nothing to enqueue.
    assert (await _loop(pool, loop.id)).execution_token == before.execution_token
    assert await _leases(pool, loop.id) == leases and await _no_jobs(pool, loop.id)

    OPEN["a"].set()
    await eventually(lambda: _running("a", "b"))
    OPEN["b"].set()
    await eventually(lambda: _done(pool, loop.id))
    assert RUNS == ["a", "b"]
    await _assert_answered_once(pool, loop.id)


async def test_unfreezing_beside_a_running_call_gives_each_dispatchable_call_one_job(
    pool: Pool, registry: AgentRegistry
) -> None:
    lifecycle = Lifecycle(pool, registry, fast_settings())
    async with transaction(pool) as conn:
        loop = await factories.loop(conn, agent="gate", status="running", step_count=1)
        running = await factories.tool_call(conn, loop, lease_token=uuid.uuid4(), leased_in=30)
        # Dropped while frozen, or not claimed yet (a task's delayed poll, say): one job.
        queued = await factories.tool_call(conn, loop)
        await factories.job(
            conn, loop_id=loop.id, generation=loop.execution_token, tool_call_id=queued.id
        )
        lapsed = await factories.tool_call(conn, loop, lease_token=uuid.uuid4(), leased_in=-1)
        await factories.tool_call(conn, loop, approval_status="pending")  # a person decides
        # Parked on its child: enqueued as a redispatch would (its run re-parks it).
        child = await factories.loop(conn, status="running")
        token = uuid.uuid4()
        parked = await factories.tool_call(conn, loop, lease_token=token, leased_in=30)
        assert await tool_calls.link_child(
            conn, tool_call_id=parked.id, lease_token=token, child_loop_id=child.id, park=True
        )
        await loops.set_flags(conn, loop_id=loop.id, frozen=True)

    row = await lifecycle.unfreeze(loop.id)
    assert (row.status, row.execution_token, row.frozen) == ("running", loop.execution_token, False)
    async with connection(pool) as conn:
        left = await jobs.list_for_loop(conn, loop_id=loop.id)
        (still,) = [
            c for c in await tool_calls.list_for_loop(conn, loop_id=loop.id) if c.id == running.id
        ]
    assert sorted(j["tool_call_id"] for j in left) == sorted([queued.id, lapsed.id, parked.id])
    assert {j["generation"] for j in left} == {loop.execution_token}
    assert (still.lease_token, still.leased_until) == (running.lease_token, running.leased_until)
