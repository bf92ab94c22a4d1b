"""Chaining: the worker that finishes an LLM turn runs that turn's tool calls itself.

The finalize statement inserts as many calls as the worker has free tool slots already
leased to it (no job, no claim); the rest are queued for any worker. A finalize that is
cancelled after its commit hands its calls back to the queue at once.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from agentd.db.pool import Pool, connection
from agentd.engine import worker as worker_mod
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


@pytest.fixture
def tool_claims(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Ids of the tool calls the worker took through the queue (a claim)."""
    taken: list[int] = []
    real = jobs.claim_tool

    async def counting(conn: Any, **kw: Any) -> Any:
        claim = await real(conn, **kw)
        if claim is not None and claim.tool_call is not None:
            taken.append(claim.tool_call.id)
        return claim

    monkeypatch.setattr(worker_mod.jobs, "claim_tool", counting)
    return taken


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


async def test_chaining_off_queues_every_call(
    pool: Pool,
    database_url: str,
    registry: AgentRegistry,
    fake_llm: FakeLLM,
    tool_claims: list[int],
) -> None:
    script(fake_llm, 2)
    calls = await run_one(pool, database_url, registry, fake_llm, chain_tool_calls=False)
    assert sorted(tool_claims) == sorted(c.id for c in calls)


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
