"""Exactly-once records under races: simultaneous tool results, duplicate jobs, frozen loops."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from agentd.db.pool import Pool, connection, transaction
from agentd.engine import dispatch
from agentd.engine.context import ToolContext, TurnContext
from agentd.engine.runtime import Runtime
from agentd.pipeline.builder import Builder, Handler
from agentd.pipeline.llm.response_parsing import ResponseParsing
from agentd.pipeline.stacks import Stacks
from agentd.registry import AgentRegistry
from agentd.store import jobs, loops, messages, tool_calls
from agentd.testing import factories
from agentd.testing.agents import CALLS, CalcAgent
from agentd.testing.engine import eventually, fast_settings, hold_claims, running_engine
from agentd.testing.fake_llm import FakeLLM, Reply, Rule, ToolCall


def script(fake: FakeLLM, n: int = 2) -> None:
    fake.add(
        Rule(
            match=lambda last: last.role == "user",
            reply=Reply(tool_calls=[ToolCall("add", {"a": i, "b": 1}) for i in range(n)]),
        )
    )
    fake.add(Rule(match=lambda last: last.role == "tool", reply=Reply(content="done")))


async def status_is(pool: Pool, loop_id: uuid.UUID, status: str) -> bool:
    async with connection(pool) as conn:
        row = await loops.get(conn, loop_id=loop_id)
    return row is not None and row.status == status


async def transcript(pool: Pool, loop_id: uuid.UUID) -> dict[str, Any]:
    async with connection(pool) as conn:
        return {
            "loop": await loops.get(conn, loop_id=loop_id),
            "messages": await messages.list_(conn, loop_id=loop_id),
            "calls": await tool_calls.list_for_loop(conn, loop_id=loop_id),
            "jobs": await jobs.list_for_loop(conn, loop_id=loop_id),
        }


async def _no_jobs(pool: Pool, loop_id: uuid.UUID) -> bool:
    async with connection(pool) as conn:
        return await jobs.list_for_loop(conn, loop_id=loop_id) == []


def assert_one_record_each(t: dict[str, Any]) -> None:
    loop = t["loop"]
    steps = [m.step for m in t["messages"] if m.role == "assistant"]
    assert steps == list(range(1, loop.step_count + 1))
    answered = sorted(m.tool_call_id for m in t["messages"] if m.role == "tool")
    assert answered == sorted(c.id for c in t["calls"])
    assert all(c.response_message_id is not None for c in t["calls"])
    assert t["jobs"] == []


# --- the completion gate -----------------------------------------------------------------


async def test_parallel_results_committed_at_the_same_instant_queue_one_next_turn(
    pool: Pool, registry: AgentRegistry
) -> None:
    CALLS.clear()
    n_loops, n_calls = 4, 8
    runtime = Runtime(
        settings=fast_settings(),
        pool=pool,
        registry=registry,
        llm=None,  # type: ignore[arg-type]
    )
    stack = Stacks().tool(registry.get("calc"))
    contexts: list[ToolContext] = []
    made = []
    async with transaction(pool) as conn:
        for _ in range(n_loops):
            loop = await factories.loop(conn, status="running", step_count=1)
            made.append(loop)
            for i in range(n_calls):
                lease = uuid.uuid4()
                call = await factories.tool_call(
                    conn, loop, executed=True, result=str(i), lease_token=lease, leased_in=30
                )
                contexts.append(
                    ToolContext(
                        runtime=runtime,
                        tool_call=call,
                        lease_token=lease,
                        generation=loop.execution_token,  # type: ignore[arg-type]
                    )
                )
    gate = asyncio.Barrier(len(contexts))

    async def finish(ctx: ToolContext) -> None:
        await gate.wait()  # every finalizer starts at the same instant
        await stack(ctx)

    await asyncio.gather(*(finish(c) for c in contexts))
    for loop in made:
        t = await transcript(pool, loop.id)
        assert t["loop"].status == "queued" and t["loop"].execution_token != loop.execution_token
        (job,) = t["jobs"]
        assert job["queue"] == "llm" and job["generation"] == t["loop"].execution_token
        tool_msgs = [m for m in t["messages"] if m.role == "tool"]
        assert sorted(int(m.content or "") for m in tool_msgs) == list(range(n_calls))
    assert CALLS == []  # checkpointed results are replayed, never re-run


# --- double delivery -------------------------------------------------------------------------


class DuplicateToolJobs:
    """After the turn commits, enqueue every tool job a second time (a double delivery)."""

    def __init__(self, app: Handler[TurnContext]) -> None:
        self.app = app

    async def __call__(self, ctx: TurnContext) -> None:
        async with transaction(ctx.runtime.pool) as conn:
            calls = await tool_calls.list_unresolved(conn, loop_id=ctx.loop.id)
            await dispatch.enqueue_tools(
                conn,
                ctx.runtime,
                loop_id=ctx.loop.id,
                generation=ctx.execution_token,
                calls=calls,
                lease_seconds=None,
            )
        dispatch.wake(ctx.runtime, "tool")
        await self.app(ctx)


class DoubleDeliveryAgent(CalcAgent):
    @classmethod
    def configure_llm_middlewares(cls, builder: Builder) -> None:  # type: ignore[type-arg]
        builder.insert_after(ResponseParsing, DuplicateToolJobs)


async def test_duplicate_llm_job_runs_the_turn_once(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    script(fake_llm)
    async with running_engine(pool, database_url, registry) as engine:
        loop = await engine.lifecycle.start(
            agent="calc", message="go", state={"llm": fake_llm.base_url}
        )
        async with transaction(pool) as conn:
            for _ in range(3):
                await factories.job(conn, loop_id=loop.id, generation=loop.execution_token)
        await eventually(lambda: status_is(pool, loop.id, "completed"))
        # The next turn may be chained (never claimed): the stale duplicates then go at the
        # claim loop's next poll, dropped unrun.
        await eventually(lambda: _no_jobs(pool, loop.id))
    t = await transcript(pool, loop.id)
    assert_one_record_each(t)
    assert len(fake_llm.requests) == t["loop"].step_count == 2
    assert len(CALLS) == 2


async def test_duplicate_tool_jobs_invoke_each_tool_once(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    registry.register("double", DoubleDeliveryAgent)
    script(fake_llm, n=3)
    async with running_engine(pool, database_url, registry) as engine:
        loop = await engine.lifecycle.start(
            agent="double", message="go", state={"llm": fake_llm.base_url}
        )
        await eventually(lambda: status_is(pool, loop.id, "completed"))
    t = await transcript(pool, loop.id)
    assert_one_record_each(t)
    assert len(t["calls"]) == 3
    assert sorted(c["key"] for c in CALLS) == sorted(f"agentd:tool_call:{c.id}" for c in t["calls"])


async def test_duplicate_job_for_an_answered_call_is_dropped(
    pool: Pool, registry: AgentRegistry
) -> None:
    async with transaction(pool) as conn:
        loop = await factories.loop(conn, status="running", step_count=1)
        done = await factories.tool_call(conn, loop, responded=True)
        await factories.job(
            conn, loop_id=loop.id, generation=loop.execution_token, tool_call_id=done.id
        )
    async with connection(pool) as conn:
        got = await jobs.claim_tool(
            conn, lease_token=uuid.uuid4(), worker_id=uuid.uuid4(), default_lease=10.0
        )
        assert got is not None and got.tool_call is None  # dropped, not run
        assert await jobs.list_for_loop(conn, loop_id=loop.id) == []


# --- freezing ------------------------------------------------------------------------------


async def test_frozen_loop_is_not_advanced_until_unfrozen(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    script(fake_llm)
    settings = fast_settings()
    async with running_engine(pool, database_url, registry, settings=settings) as engine:
        # Freeze before any worker can claim: the job is enqueued in the same instant. A claim
        # already in flight would not see the limit, so wait until the claim loop is parked.
        await hold_claims(engine, "llm")
        loop = await engine.lifecycle.start(
            agent="calc", message="go", state={"llm": fake_llm.base_url}
        )
        await engine.lifecycle.freeze(loop.id)
        engine.worker.limits["llm"] = settings.llm_concurrency
        engine.worker.wake("llm")

        async def job_dropped() -> bool:
            async with connection(pool) as conn:
                return await jobs.list_for_loop(conn, loop_id=loop.id) == []

        await eventually(job_dropped)
        await engine.reaper.sweep_once()  # the reaper leaves frozen loops alone too
        assert await status_is(pool, loop.id, "queued")
        assert await job_dropped() and fake_llm.requests == []

        await engine.lifecycle.unfreeze(loop.id)
        await eventually(lambda: status_is(pool, loop.id, "completed"))
    assert_one_record_each(await transcript(pool, loop.id))


async def test_frozen_tool_phase_is_not_run_until_unfrozen(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    script(fake_llm)
    async with running_engine(pool, database_url, registry) as engine:
        await hold_claims(engine, "tool")  # hold the tool jobs until the loop is frozen
        loop = await engine.lifecycle.start(
            agent="calc", message="go", state={"llm": fake_llm.base_url}
        )

        async def tool_jobs_waiting() -> bool:
            async with connection(pool) as conn:
                return len(await jobs.list_for_loop(conn, loop_id=loop.id)) == 2

        await eventually(tool_jobs_waiting)
        await engine.lifecycle.freeze(loop.id)
        engine.worker.limits["tool"] = 64
        engine.worker.wake("tool")

        async def drained() -> bool:
            async with connection(pool) as conn:
                return await jobs.list_for_loop(conn, loop_id=loop.id) == []

        await eventually(drained)
        assert len(CALLS) == 0
        await engine.lifecycle.unfreeze(loop.id)
        await eventually(lambda: status_is(pool, loop.id, "completed"))
    assert_one_record_each(await transcript(pool, loop.id))
    assert len(CALLS) == 2
