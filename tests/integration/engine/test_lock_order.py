"""Every pair of writers that lock a loop and its calls/jobs, raced for many rounds on real
PostgreSQL: none deadlocks (one lock order everywhere, loop first; jobs only ever taken with
SKIP LOCKED) and each race ends in one of the states its two serial orders give."""

from __future__ import annotations

import asyncio
import contextlib
import random
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from agentd.db import pool as dbpool
from agentd.db.pool import Pool, connection, transaction
from agentd.engine.lifecycle import Lifecycle
from agentd.engine.reaper import Reaper
from agentd.errors import AgentdError
from agentd.store import jobs, tool_calls
from agentd.store.models import Loop, ToolCall
from agentd.testing import agents, factories
from agentd.testing.engine import fast_settings

ROUNDS = 12
WIDTH = 6  # loops raced at once per round: one sweep meets several lifecycle calls

Setup = Callable[[Any], Awaitable[tuple[Loop, ToolCall | None]]]


@pytest.fixture
async def wide_pool(database_url: str) -> AsyncIterator[Pool]:
    p = await dbpool.create_pool(database_url, min_size=2, max_size=2 * WIDTH + 4)
    try:
        yield p
    finally:
        await p.close()


def lifecycle(pool: Pool) -> Lifecycle:
    return Lifecycle(pool, agents.registry(), fast_settings())


async def race(
    pool: Pool, setup: Setup, left: Callable[..., Any], right: Callable[..., Any]
) -> list[tuple[Loop, ToolCall | None]]:
    """ROUNDS rounds of WIDTH fresh rows each; `left`/`right` get the rows; returns them."""
    made: list[tuple[Loop, ToolCall | None]] = []
    for _ in range(ROUNDS):
        async with transaction(pool) as conn:
            rows = [await setup(conn) for _ in range(WIDTH)]
        results = await asyncio.gather(left(rows), right(rows), return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                raise AssertionError(f"a writer failed in the race: {r!r}") from r
        made.extend(rows)
    return made


async def each(fn: Callable[[Loop, ToolCall | None], Awaitable[Any]], rows: list[Any]) -> None:
    """The per-loop writer, once per row, all at once; its refusals (already decided, an
    invalid transition) are outcomes, not failures."""

    async def one(loop: Loop, call: ToolCall | None) -> None:
        await asyncio.sleep(random.random() * 0.01)  # spread the starts across the other side
        with contextlib.suppress(AgentdError):
            await fn(loop, call)

    await asyncio.gather(*(one(loop, call) for loop, call in rows))


async def state(pool: Pool, loop: Loop) -> tuple[str, list[ToolCall], list[Any]]:
    async with connection(pool) as conn:
        status = await conn.fetchval("SELECT status FROM loops WHERE id = $1", loop.id)
        calls = await tool_calls.list_for_loop(conn, loop_id=loop.id)
        js = await jobs.list_for_loop(conn, loop_id=loop.id)
    return status, calls, js


# --- the rows each race starts from ----------------------------------------------------------


async def expired_approval(conn: Any) -> tuple[Loop, ToolCall]:
    loop = await factories.loop(conn, status="waiting")
    call = await factories.tool_call(
        conn, loop, name="refund", approval_status="pending", approval_deadline_in=-1
    )
    return loop, call


async def queued_turn(conn: Any) -> tuple[Loop, None]:
    loop = await factories.loop(conn, status="queued")
    await factories.job(conn, loop_id=loop.id, generation=loop.execution_token)
    return loop, None


async def stalled_call(conn: Any) -> tuple[Loop, ToolCall]:
    loop = await factories.loop(conn, status="running")  # tool phase: no turn lease
    call = await factories.tool_call(
        conn, loop, status="running", lease_token=uuid.uuid4(), leased_in=-1
    )
    return loop, call


async def leased_call(conn: Any) -> tuple[Loop, ToolCall]:
    loop = await factories.loop(conn, status="running")
    call = await factories.tool_call(
        conn, loop, status="running", lease_token=uuid.uuid4(), leased_in=30
    )
    return loop, call


async def pending_call_job(conn: Any) -> tuple[Loop, ToolCall]:
    loop = await factories.loop(conn, status="running")
    call = await factories.tool_call(conn, loop)
    await factories.job(
        conn, loop_id=loop.id, generation=loop.execution_token, tool_call_id=call.id
    )
    return loop, call


# --- the races -------------------------------------------------------------------------------


async def test_approve_racing_the_approval_expiry_sweep_never_deadlocks(wide_pool: Pool) -> None:
    pool, lc, reaper = wide_pool, lifecycle(wide_pool), Reaper(fast_settings(), wide_pool)

    async def approve(rows: list[Any]) -> None:
        await each(lambda _l, c: lc.decide(c.id, approve=True), rows)

    async def sweep(rows: list[Any]) -> None:
        await reaper.sweep_once()

    async def expiry(rows: list[Any]) -> None:  # the sweep's own statement, without the rest
        async with transaction(pool) as conn:
            await tool_calls.expire_approvals(conn, limit=100)

    made = await race(pool, expired_approval, approve, sweep)
    made += await race(pool, expired_approval, approve, expiry)
    for loop, call in made:
        _, (after,), js = await state(pool, loop)
        assert after.approval_status in ("approved", "expired")
        assert [j["tool_call_id"] for j in js] == [call.id]  # decided once, run once


async def test_pause_racing_the_llm_claim_never_deadlocks(wide_pool: Pool) -> None:
    pool, lc = wide_pool, lifecycle(wide_pool)

    async def pause(rows: list[Any]) -> None:
        await each(lambda loop, _c: lc.pause(loop.id), rows)

    async def claim(rows: list[Any]) -> None:
        async def one() -> None:
            async with connection(pool) as conn:
                await jobs.claim_llm(
                    conn, execution_token=uuid.uuid4(), worker_id=uuid.uuid4(), default_lease=30
                )

        await asyncio.gather(*(one() for _ in rows))

    for loop, _ in await race(pool, queued_turn, pause, claim):
        status, _, js = await state(pool, loop)
        assert status == "paused" and js == []


async def test_stop_racing_the_stalled_call_sweep_never_deadlocks(wide_pool: Pool) -> None:
    pool, lc, reaper = wide_pool, lifecycle(wide_pool), Reaper(fast_settings(), wide_pool)

    async def stop(rows: list[Any]) -> None:
        await each(lambda loop, _c: lc.stop(loop.id), rows)

    async def liveness(rows: list[Any]) -> None:
        await reaper.liveness_once()

    for loop, _ in await race(pool, stalled_call, stop, liveness):
        status, _, js = await state(pool, loop)
        assert status == "stopped" and js == []


async def test_pause_racing_a_shutdown_release_never_deadlocks(wide_pool: Pool) -> None:
    pool, lc = wide_pool, lifecycle(wide_pool)

    async def pause(rows: list[Any]) -> None:
        await each(lambda loop, _c: lc.pause(loop.id), rows)

    async def release(rows: list[Any]) -> None:
        async with transaction(pool) as conn:
            await tool_calls.release_leases(
                conn, ids=[c.id for _, c in rows], tokens=[c.lease_token for _, c in rows]
            )

    for loop, _ in await race(pool, leased_call, pause, release):
        status, _, js = await state(pool, loop)
        assert status == "paused" and js == []


async def test_stop_racing_the_tool_claim_never_deadlocks(wide_pool: Pool) -> None:
    pool, lc = wide_pool, lifecycle(wide_pool)

    async def stop(rows: list[Any]) -> None:
        await each(lambda loop, _c: lc.stop(loop.id), rows)

    async def claim(rows: list[Any]) -> None:
        async def one() -> None:
            async with connection(pool) as conn:
                await jobs.claim_tool(
                    conn, lease_token=uuid.uuid4(), worker_id=uuid.uuid4(), default_lease=30
                )

        await asyncio.gather(*(one() for _ in rows))

    for loop, _ in await race(pool, pending_call_job, stop, claim):
        status, _, js = await state(pool, loop)
        assert status == "stopped" and js == []


async def test_approve_racing_pause_never_deadlocks(wide_pool: Pool) -> None:
    pool, lc = wide_pool, lifecycle(wide_pool)

    async def approve(rows: list[Any]) -> None:
        await each(lambda _l, c: lc.decide(c.id, approve=True), rows)

    async def pause(rows: list[Any]) -> None:
        await each(lambda loop, _c: lc.pause(loop.id), rows)

    for loop, _ in await race(pool, expired_approval, approve, pause):
        status, (after,), js = await state(pool, loop)
        assert status == "paused" and after.approval_status == "approved"
        assert js == []  # a paused loop runs the approved call on resume


async def finish_calls(pool: Pool, rows: list[Any]) -> None:
    """Each call's worker ends it (checkpoint, result, the loop's next turn), all at once."""

    async def one(loop: Loop, call: ToolCall) -> None:
        assert loop.execution_token is not None and call.lease_token is not None
        async with transaction(pool) as conn:
            await tool_calls.finish(
                conn,
                **factories.finish_arguments(
                    loop, call, checkpoint=tool_calls.Checkpoint("3", None, True, None, 0.01)
                ),
            )

    await asyncio.gather(*(one(loop, call) for loop, call in rows))


async def test_a_tool_call_finishing_racing_pause_never_deadlocks(wide_pool: Pool) -> None:
    pool, lc = wide_pool, lifecycle(wide_pool)

    async def pause(rows: list[Any]) -> None:
        await each(lambda loop, _c: lc.pause(loop.id), rows)

    for loop, _ in await race(pool, leased_call, pause, lambda rows: finish_calls(pool, rows)):
        status, _, js = await state(pool, loop)
        assert status == "paused" and js == []


async def test_a_tool_call_finishing_racing_the_stalled_call_sweep_never_deadlocks(
    wide_pool: Pool,
) -> None:
    pool, reaper = wide_pool, Reaper(fast_settings(), wide_pool)

    async def liveness(rows: list[Any]) -> None:
        await reaper.liveness_once()

    for loop, _ in await race(pool, stalled_call, lambda rows: finish_calls(pool, rows), liveness):
        status, (call,), js = await state(pool, loop)
        if call.response_message_id is not None:  # the worker's result won
            assert status == "queued" and [j["queue"] for j in js] == ["llm"]
        else:  # the reaper's reclaim won: the stale worker wrote nothing
            assert status == "running" and [j["tool_call_id"] for j in js] == [call.id]


async def test_an_expired_turn_sweep_racing_pause_never_deadlocks(wide_pool: Pool) -> None:
    pool, lc, reaper = wide_pool, lifecycle(wide_pool), Reaper(fast_settings(), wide_pool)

    async def expired_turn(conn: Any) -> tuple[Loop, None]:
        return await factories.loop(conn, status="running", lease_in=-1), None

    async def pause(rows: list[Any]) -> None:
        await each(lambda loop, _c: lc.pause(loop.id), rows)

    async def liveness(rows: list[Any]) -> None:
        await reaper.liveness_once()

    for loop, _ in await race(pool, expired_turn, pause, liveness):
        status, _, js = await state(pool, loop)
        assert status == "paused" and js == []
