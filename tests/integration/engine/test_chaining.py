"""Chaining: a worker hands the work it makes due to itself, skipping queue and claim.

The finalize of an LLM turn inserts as many of its tool calls as the worker has free tool
slots already leased to it; the rest are queued for any worker. The tool call whose result
resolves the turn's last call claims the loop's next turn for its worker, with the turn's
context, when that worker has a free LLM slot. A finalize or finish that is cancelled after
its commit hands what it took back to the queue at once.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from agentd.db.pool import Pool, connection
from agentd.engine import worker as worker_mod
from agentd.pipeline.llm.response_parsing import ResponseParsing
from agentd.pipeline.stacks import Stacks
from agentd.pipeline.tool.response_creation import ResponseCreation
from agentd.registry import AgentRegistry
from agentd.store import jobs, loops, tool_calls
from agentd.testing import factories
from agentd.testing.agents import CALLS
from agentd.testing.engine import eventually, fast_settings, running_engine
from agentd.testing.fake_llm import FakeLLM, Reply, Rule, ToolCall


def script(fake: FakeLLM, n_calls: int) -> None:
    fake.add(
        Rule(
            match=lambda last: last.role == "user",
            reply=Reply(tool_calls=[ToolCall("add", {"a": i, "b": 1}) for i in range(n_calls)]),
        )
    )
    fake.add(Rule(match=lambda last: last.role == "tool", reply=Reply(content="done")))


def _spy_claims(monkeypatch: pytest.MonkeyPatch, name: str, key: Any) -> list[Any]:
    """`key` of every job the worker took through the queue with `jobs.<name>` (a claim)."""
    taken: list[Any] = []
    real = getattr(jobs, name)

    async def counting(conn: Any, **kw: Any) -> Any:
        claims = await real(conn, **kw)
        taken.extend(key(c) for c in claims if key(c) is not None)
        return claims

    monkeypatch.setattr(worker_mod.jobs, name, counting)
    return taken


@pytest.fixture
def turn_claims(monkeypatch: pytest.MonkeyPatch) -> list[uuid.UUID]:
    """Loops whose turn the worker took through the queue."""
    return _spy_claims(monkeypatch, "claim_llm_many", lambda c: c.loop and c.loop.id)


@pytest.fixture
def tool_claims(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Ids of the tool calls the worker took through the queue."""
    return _spy_claims(monkeypatch, "claim_tool_many", lambda c: c.tool_call and c.tool_call.id)


async def completed(pool: Pool, loop_id: uuid.UUID) -> bool:
    async with connection(pool) as conn:
        row = await loops.get(conn, loop_id=loop_id)
    return row is not None and row.status == "completed"


async def run_one(
    pool: Pool, url: str, registry: AgentRegistry, fake: FakeLLM, **settings: Any
) -> list[Any]:
    async with running_engine(pool, url, registry, settings=fast_settings(**settings)) as eng:
        loop = await eng.lifecycle.start(agent="calc", message="add", state={"llm": fake.base_url})
        await eventually(lambda: completed(pool, loop.id))
    async with connection(pool) as conn:
        calls = await tool_calls.list_for_loop(conn, loop_id=loop.id)
        assert await jobs.list_for_loop(conn, loop_id=loop.id) == []
    return calls


async def test_a_finished_turn_runs_its_calls_here_without_a_claim(
    pool: Pool,
    database_url: str,
    registry: AgentRegistry,
    fake_llm: FakeLLM,
    tool_claims: list[int],
) -> None:
    script(fake_llm, 3)
    calls = await run_one(pool, database_url, registry, fake_llm)
    assert len(calls) == 3
    assert tool_claims == []  # none went through the queue
    assert [c.attempts for c in calls] == [1, 1, 1]
    assert all(c.is_success and c.response_message_id for c in calls)
    assert sorted(c["key"] for c in CALLS) == sorted(f"agentd:tool_call:{c.id}" for c in calls)


async def test_only_free_tool_slots_are_chained_the_rest_are_queued(
    pool: Pool,
    database_url: str,
    registry: AgentRegistry,
    fake_llm: FakeLLM,
    tool_claims: list[int],
) -> None:
    script(fake_llm, 3)
    calls = await run_one(pool, database_url, registry, fake_llm, tool_concurrency=1)
    assert len(tool_claims) == 2  # one slot: the first call chained, two claimed
    assert sorted(tool_claims) == sorted(c.id for c in calls if c.position > 0)
    assert all(c.is_success and c.response_message_id for c in calls)
    assert len(CALLS) == 3


async def test_the_last_result_claims_the_next_turn_here(
    pool: Pool,
    database_url: str,
    registry: AgentRegistry,
    fake_llm: FakeLLM,
    turn_claims: list[uuid.UUID],
) -> None:
    script(fake_llm, 2)
    calls = await run_one(pool, database_url, registry, fake_llm)
    assert len(turn_claims) == 1  # the first turn only; the second was chained
    # The chained turn saw both results: the model's second request carries them.
    second = fake_llm.requests[-1].json
    assert [m["role"] for m in second["messages"]][-2:] == ["tool", "tool"]
    assert all(c.response_message_id for c in calls)


async def test_chaining_off_queues_every_call_and_turn(
    pool: Pool,
    database_url: str,
    registry: AgentRegistry,
    fake_llm: FakeLLM,
    tool_claims: list[int],
    turn_claims: list[uuid.UUID],
) -> None:
    script(fake_llm, 2)
    calls = await run_one(pool, database_url, registry, fake_llm, chaining=False)
    assert sorted(tool_claims) == sorted(c.id for c in calls)
    assert len(turn_claims) == 2


class UnchainedParsing(ResponseParsing):
    """A turn finalizer written without chaining: it never looks at ctx.chain."""

    async def __call__(self, ctx: Any) -> None:
        ctx.chain = None
        await super().__call__(ctx)


class UnchainedCreation(ResponseCreation):
    """A tool finalizer written without chaining."""

    async def __call__(self, ctx: Any) -> None:
        ctx.chain = None
        await super().__call__(ctx)


class TakesThenCrashes:
    """A finalizer that takes slots and names leases, then fails before any write."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, ctx: Any) -> None:
        assert ctx.chain is not None
        ctx.chain.take(2)
        ctx.chain.tokens = [uuid.uuid4(), uuid.uuid4()]
        raise RuntimeError("finalizer bug")


def _replacing(llm: type | None = None, tool: type | None = None) -> Stacks:
    return Stacks(
        configure_llm=(lambda b: b.replace(ResponseParsing, llm)) if llm else None,
        configure_tool=(lambda b: b.replace(ResponseCreation, tool)) if tool else None,
    )


async def _idle(eng: Any) -> bool:
    return eng.worker.in_flight == 0 and eng.worker.busy == {"llm": 0, "tool": 0}


async def _completed_and_idle(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM, stacks: Any
) -> Any:
    """Run one `calc` loop to completion on an engine with `stacks`, until every slot is
    given back; the loop as started."""
    async with running_engine(pool, database_url, registry, stacks=stacks) as eng:
        loop = await eng.lifecycle.start(
            agent="calc", message="add", state={"llm": fake_llm.base_url}
        )
        await eventually(lambda: completed(pool, loop.id))
        await eventually(lambda: _idle(eng))
    return loop


async def test_a_custom_turn_finalizer_chains_nothing_its_calls_are_claimed(
    pool: Pool,
    database_url: str,
    registry: AgentRegistry,
    fake_llm: FakeLLM,
    tool_claims: list[int],
) -> None:
    script(fake_llm, 2)
    stacks = _replacing(llm=UnchainedParsing)
    loop = await _completed_and_idle(pool, database_url, registry, fake_llm, stacks)
    async with connection(pool) as conn:
        calls = await tool_calls.list_for_loop(conn, loop_id=loop.id)
    assert sorted(tool_claims) == sorted(c.id for c in calls)  # all through the queue
    assert all(c.is_success and c.response_message_id for c in calls)


async def test_a_custom_tool_finalizer_chains_nothing_the_next_turn_is_claimed(
    pool: Pool,
    database_url: str,
    registry: AgentRegistry,
    fake_llm: FakeLLM,
    turn_claims: list[uuid.UUID],
) -> None:
    script(fake_llm, 2)
    stacks = _replacing(tool=UnchainedCreation)
    loop = await _completed_and_idle(pool, database_url, registry, fake_llm, stacks)
    assert turn_claims == [loop.id, loop.id]  # the second turn came through the queue too


async def test_slots_a_failed_finalizer_took_are_given_back(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    script(fake_llm, 2)
    stacks = _replacing(llm=TakesThenCrashes)
    async with running_engine(pool, database_url, registry, stacks=stacks) as eng:
        loop = await eng.lifecycle.start(
            agent="calc", message="add", state={"llm": fake_llm.base_url}
        )
        await eng.worker.turn_done.wait_for(1, within=10)
        await eventually(lambda: _idle(eng))  # the two slots it took came back
        async with connection(pool) as conn:
            row = await loops.get(conn, loop_id=loop.id)
            assert await tool_calls.list_for_loop(conn, loop_id=loop.id) == []
    assert row is not None and row.status == "failed" and row.step_count == 0


class CancelledOnce:
    """After the finalizer committed: the turn's task is cancelled (once) before the stack
    returns, so what its finalize leased must go back to the queue."""

    hits = 0

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, ctx: Any) -> None:
        await self.app(ctx)
        CancelledOnce.hits += 1
        if CancelledOnce.hits == 1:
            task = asyncio.current_task()
            assert task is not None
            task.cancel()
            await asyncio.sleep(0)  # the cancellation lands here


async def test_calls_leased_by_a_turn_cancelled_after_its_commit_go_back_to_the_queue(
    pool: Pool,
    database_url: str,
    registry: AgentRegistry,
    fake_llm: FakeLLM,
    tool_claims: list[int],
) -> None:
    script(fake_llm, 2)
    CancelledOnce.hits = 0
    stacks = Stacks(configure_llm=lambda b: b.insert_after(ResponseParsing, CancelledOnce))
    loop = await _completed_and_idle(pool, database_url, registry, fake_llm, stacks)
    async with connection(pool) as conn:
        calls = await tool_calls.list_for_loop(conn, loop_id=loop.id)
    assert sorted(tool_claims) == sorted(c.id for c in calls)  # handed back, then claimed
    assert all(c.is_success and c.response_message_id for c in calls)
    assert len(CALLS) == 2  # each ran once


async def _finalize(conn: Any, loop_row: Any, own: list[uuid.UUID], worker: uuid.UUID) -> Any:
    return await loops.finalize_turn_all(
        conn,
        loop_id=loop_row.id,
        execution_token=loop_row.execution_token,
        tokens=(1, 1, 0),
        estimated=False,
        shell_message_id=None,
        message={
            "content": "",
            "reasoning": None,
            "metadata": {},
            "ttft": None,
            "duration": 0.0,
            "finish_reason": "tool_calls",
        },
        calls=[
            {
                "position": i,
                "provider_call_id": f"c{i}",
                "name": "add",
                "arguments": {"a": i, "b": 1},
                "arguments_raw": None,
                "metadata": {},
            }
            for i in range(2)
        ],
        sequential=False,
        tool_lease_seconds=30.0,
        notify_tool=False,
        turn_events=[],
        attach=[],
        own_tokens=own,
        worker_id=worker,
    )


async def test_finalize_leases_own_calls_and_queues_the_rest(pool: Pool) -> None:
    worker = uuid.uuid4()
    own = [uuid.uuid4()]
    async with connection(pool) as conn:
        row = await factories.loop(conn, lease_in=30)
        done = await _finalize(conn, row, own, worker)
        assert done is not None and done.jobs_enqueued == 1
        [leased] = done.leased_calls
        assert (leased.position, leased.lease_token, leased.lease_worker_id) == (0, own[0], worker)
        assert leased.status == "running" and leased.attempts == 1
        assert leased.leased_until is not None
        queued = await jobs.list_for_loop(conn, loop_id=row.id)
        calls = await tool_calls.list_for_loop(conn, loop_id=row.id)
        assert [j["tool_call_id"] for j in queued] == [calls[1].id]
        assert calls[1].lease_token is None and calls[1].status == "pending"


async def test_a_frozen_loop_chains_nothing(pool: Pool) -> None:
    async with connection(pool) as conn:
        row = await factories.loop(conn, lease_in=30, frozen=True)
        done = await _finalize(conn, row, [uuid.uuid4(), uuid.uuid4()], uuid.uuid4())
        assert done is not None and done.leased_calls == [] and done.jobs_enqueued == 2


async def test_calls_of_a_cancelled_finalize_go_back_to_the_queue(pool: Pool) -> None:
    own = [uuid.uuid4(), uuid.uuid4()]
    async with connection(pool) as conn:
        row = await factories.loop(conn, lease_in=30)
        done = await _finalize(conn, row, own, uuid.uuid4())
        assert done is not None and len(done.leased_calls) == 2
        await tool_calls.release_own(conn, loop_id=row.id, tokens=[own[0], uuid.uuid4()])
        calls = await tool_calls.list_for_loop(conn, loop_id=row.id)
        queued = await jobs.list_for_loop(conn, loop_id=row.id)
    assert calls[0].lease_token is None and calls[0].status == "pending"
    assert calls[1].lease_token == own[1]  # another token's lease is not touched
    assert [j["tool_call_id"] for j in queued] == [calls[0].id]
    assert queued[0]["generation"] == row.execution_token


async def _finish(conn: Any, loop_row: Any, call: Any, worker: uuid.UUID | None) -> Any:
    cp = tool_calls.Checkpoint(
        result="3", structured=None, is_success=True, error_message=None, duration=0.01
    )
    return await tool_calls.finish(
        conn,
        **factories.finish_arguments(
            loop_row, call, checkpoint=cp, llm_lease_seconds=40.0, chain_worker=worker
        ),
    )


async def _one_call(conn: Any, **loop: Any) -> tuple[Any, Any]:
    row = await factories.loop(conn, step_count=1, **loop)
    call = await factories.tool_call(
        conn, row, status="running", lease_token=uuid.uuid4(), leased_in=30
    )
    return row, call


async def test_finish_claims_the_next_turn_with_its_context(pool: Pool) -> None:
    worker = uuid.uuid4()
    async with connection(pool) as conn:
        row, call = await _one_call(conn)
        done = await _finish(conn, row, call, worker)
        assert done is not None and done.llm_jobs == 0
        turn = done.chained
        assert turn is not None and turn.status == "running" and turn.worker_id == worker
        assert turn.execution_token not in (None, row.execution_token)
        assert turn.lease_expires_at is not None and turn.lease_seconds == 40.0
        assert await jobs.list_for_loop(conn, loop_id=row.id) == []
        assert done.prefetch is not None
        roles = [m.role for m in done.prefetch.messages]
        assert roles == ["user", "assistant", "tool"]  # the result it just wrote included
        assert [t.id for t in done.prefetch.tool_calls] == [call.id]
        stored = await loops.get(conn, loop_id=row.id)
        assert stored is not None and stored.execution_token == turn.execution_token


@pytest.mark.parametrize("why", ["frozen", "concurrency_key", "no_worker"])
async def test_finish_queues_the_turn_when_it_cannot_chain(pool: Pool, why: str) -> None:
    async with connection(pool) as conn:
        row, call = await _one_call(conn, frozen=why == "frozen")
        if why == "concurrency_key":
            await conn.execute(
                "UPDATE loops SET concurrency_key = 'k', concurrency_limit = 1 WHERE id = $1",
                row.id,
            )
        done = await _finish(conn, row, call, None if why == "no_worker" else uuid.uuid4())
        assert done is not None and done.chained is None and done.llm_jobs == 1
        stored = await loops.get(conn, loop_id=row.id)
        assert stored is not None and stored.status == "queued" and stored.worker_id is None
        [job] = await jobs.list_for_loop(conn, loop_id=row.id)
        assert job["queue"] == "llm" and job["generation"] == stored.execution_token


async def test_a_delta_finish_returns_only_rows_after_the_given_id(pool: Pool) -> None:
    async with connection(pool) as conn:
        row, call = await _one_call(conn)
        last = await conn.fetchval("SELECT max(id) FROM messages WHERE loop_id = $1", row.id)
        done = await tool_calls.finish(
            conn, tool_call_id=call.id, loop_id=row.id, lease_token=call.lease_token,
            generation=row.execution_token, checkpoint=tool_calls.Checkpoint(
                result="3", structured=None, is_success=True, error_message=None,
                duration=0.01),
            sequential=False, new_token=uuid.uuid4(), status_reason="tools_resolved",
            llm_lease_seconds=40.0, tool_lease_seconds=30.0, notify_llm=False,
            notify_tool=False, call_events=[], attach=[], chain_worker=uuid.uuid4(),
            chain_after=last,
        )  # fmt: skip
    assert done is not None and done.prefetch is not None and done.prefetch.after == last
    assert [m.role for m in done.prefetch.messages] == ["tool"]  # just the result it wrote
    assert [t.id for t in done.prefetch.tool_calls] == [call.id]


async def test_a_turn_claimed_by_a_cancelled_finish_goes_back_to_the_queue(pool: Pool) -> None:
    async with connection(pool) as conn:
        row, call = await _one_call(conn)
        done = await _finish(conn, row, call, uuid.uuid4())
        assert done is not None and done.chained is not None
        token = done.chained.execution_token
        assert token is not None
        await loops.release_leases(conn, ids=[row.id], tokens=[token])  # what it runs
        stored = await loops.get(conn, loop_id=row.id)
        [job] = await jobs.list_for_loop(conn, loop_id=row.id)
    assert stored is not None and stored.status == "queued" and stored.worker_id is None
    assert job["queue"] == "llm" and job["generation"] == stored.execution_token


async def test_a_chained_read_leaves_out_the_tools_its_worker_holds(pool: Pool) -> None:
    async with connection(pool) as conn:
        row, call = await _one_call(conn)
        await factories.mcp_tools(conn, row.id, names={"add": False})
        last = await conn.fetchval("SELECT max(id) FROM messages WHERE loop_id = $1", row.id)
        args = factories.finish_arguments(
            row, call, checkpoint=None, llm_lease_seconds=40.0, chain_worker=uuid.uuid4()
        )
        done = await tool_calls.finish(conn, **{**args, "chain_after": last, "chain_tools": False})
        assert done is not None and done.prefetch is not None
        pre = done.prefetch
        assert pre.tools_omitted and pre.mcp_tools == [] and pre.mcp_sessions == []
        assert [m.role for m in pre.messages] == ["tool"]  # the delta itself is unchanged


@pytest.mark.parametrize("after", [False, True])
async def test_a_chained_read_has_the_tools_unless_left_out(pool: Pool, after: bool) -> None:
    async with connection(pool) as conn:
        row, call = await _one_call(conn)
        await factories.mcp_tools(conn, row.id, names={"add": False})
        last = await conn.fetchval("SELECT max(id) FROM messages WHERE loop_id = $1", row.id)
        args = factories.finish_arguments(
            row, call, checkpoint=None, llm_lease_seconds=40.0, chain_worker=uuid.uuid4()
        )
        # a delta read that asks for them, or a full read (which has them, whatever it asks)
        doc = (
            {**args, "chain_after": last, "chain_tools": True}
            if after
            else {**args, "chain_after": None, "chain_tools": False}
        )
        done = await tool_calls.finish(conn, **doc)
    assert done is not None and done.prefetch is not None
    assert not done.prefetch.tools_omitted
    assert [t.name for t in done.prefetch.mcp_tools] == ["add"]
    assert [s["mcp_name"] for s in done.prefetch.mcp_sessions] == ["calc"]
